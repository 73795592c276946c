"""The BOS rule: prompts start with BOS exactly where the checkpoint's own tokenizer puts one (as
lm-eval encodes), unless overridden; the rule is kept with the model and in its manifest entry.

The reference is the checkpoint's tokenizer itself (``AutoTokenizer`` on the directory, encode with
special tokens), which TransformerLens never sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cel_lens.evaluation import encode_pair, encode_prompt
from cel_lens.model import load_model, model_manifest
from cel_lens.model.bos import BOS_RULES, bos_rule, read_bos, set_bos_rule
from cel_lens.testing import BOS_CONVENTIONS, tiny_hf_checkpoint, tiny_hooked_transformer, tiny_tokenizer

TEXT = "Question: is the sky blue?\nAnswer:"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bos_checkpoints")
    return {bos: tiny_hf_checkpoint("llama", root / bos, n_layers=1, bos=bos) for bos in BOS_CONVENTIONS}


def _own(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("loader", ["hooked", "bridge"])
@pytest.mark.parametrize("convention", BOS_CONVENTIONS)
def test_default_rule_is_the_checkpoint_tokenizers_own(checkpoints, convention, loader):
    path = checkpoints[convention]
    model = load_model(path, device="cpu", loader=loader)
    own = _own(path)
    assert encode_prompt(model, TEXT) == own(TEXT)["input_ids"]  # encode with special tokens, as lm-eval
    ctx, cont = encode_pair(model, TEXT, " yes")
    assert ctx + cont == own(TEXT + " yes")["input_ids"]
    record = model_manifest(model)["bos"]
    assert record == {
        "rule": "tokenizer",
        "tokenizer_adds_bos": convention == "added",
        "prepends_bos": convention == "added",
        "bos_token_id": own.bos_token_id if convention == "added" else None,
    }
    # TransformerLens's own tokenizer adds BOS for every tokenizer that defines one: not the rule
    assert (model.tokenizer(TEXT)["input_ids"][0] == own.bos_token_id) == (convention != "absent")


@pytest.mark.parametrize("convention", ["added", "not_added"])
def test_overrides(checkpoints, convention):
    path = checkpoints[convention]
    plain = _own(path)(TEXT, add_special_tokens=False)["input_ids"]
    bos = _own(path).bos_token_id
    always = load_model(path, device="cpu", loader="hooked", bos="always")
    never = load_model(path, device="cpu", loader="hooked", bos="never")
    assert encode_prompt(always, TEXT) == [bos] + plain
    assert encode_prompt(never, TEXT) == plain
    assert model_manifest(always)["bos"]["rule"] == "always" and model_manifest(never)["bos"]["rule"] == "never"
    # a text that already starts with BOS (a chat template writing it) gets no second one
    assert encode_prompt(always, "<|bos|>" + TEXT) == [bos] + plain
    # a loaded model keeps its rule unless one is given; the override can be changed afterwards
    assert bos_rule(load_model(always, bos=None))["rule"] == "always"
    assert encode_prompt(load_model(always, bos="never"), TEXT) == plain


def test_always_needs_a_bos_token_and_rules_are_checked_first(checkpoints, tmp_path):
    with pytest.raises(ValueError, match="has no BOS token"):
        load_model(checkpoints["absent"], device="cpu", loader="hooked", bos="always")
    with pytest.raises(ValueError, match="unknown bos rule 'first'"):
        load_model(tmp_path / "not-a-checkpoint", bos="first")  # before any file is read
    assert tuple(BOS_RULES) == ("tokenizer", "always", "never")


def test_models_built_elsewhere_read_the_rule_from_their_tokenizer_files():
    """TransformerLens reloads a tokenizer with ``add_bos_token=True``; the rule comes from the
    files it was loaded from, not from that copy."""
    for convention, prepends in (("added", True), ("not_added", False)):
        model = tiny_hooked_transformer(n_layers=1, tokenizer=tiny_tokenizer(bos=convention))
        assert model.tokenizer(TEXT)["input_ids"][0] == model.tokenizer.bos_token_id
        assert bos_rule(model)["prepends_bos"] is prepends
        assert (encode_prompt(model, TEXT)[0] == model.tokenizer.bos_token_id) is prepends
    model = tiny_hooked_transformer(n_layers=1)
    set_bos_rule(model, "never")
    assert encode_prompt(model, TEXT) == model.tokenizer(TEXT, add_special_tokens=False)["input_ids"]


def test_read_bos_of_each_convention():
    for convention in BOS_CONVENTIONS:
        facts = read_bos(tiny_tokenizer(bos=convention))
        assert facts["tokenizer_adds_bos"] is (convention == "added")
        assert (facts["bos_token_id"] is None) is (convention == "absent")
    assert read_bos(None) == {"bos_token_id": None, "tokenizer_adds_bos": False}


@pytest.mark.parametrize("adds", [True, False])
def test_each_bos_rule_says_whether_a_prompt_gets_bos(adds):
    from cel_lens.config import BOS_RULES

    facts = {"bos_token_id": 1, "tokenizer_adds_bos": adds}
    assert {name: BOS_RULES.resolve(name).prepends(facts) for name in BOS_RULES} == {
        "tokenizer": adds, "always": True, "never": False}

"""Models processed elsewhere so that hook_z ablation is inexact are named, once, in one line; models
whose processing loses nothing are left alone. The reference for "inexact" is the Hugging Face model
with the ablated heads' o_proj input columns zeroed (as in ``test_load.py``)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from cel_lens.evaluation.evaluator import evaluate
from cel_lens.model import ablation, convert, load
from cel_lens.model.load import load_model
from cel_lens.testing.reference import hf_ablated_logits
from cel_lens.model.processing import ProcessedModelWarning, processing_problem, warn_if_processed
from cel_lens.tasks.base import Example, Split

pytestmark = pytest.mark.filterwarnings("ignore::cel_lens.model.processing.ProcessedModelWarning")  # checked by hand

TOKENS = torch.randint(3, 300, (2, 10), generator=torch.Generator().manual_seed(0))


def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()


def _hooked(path, **flags):
    """A HookedTransformer built the way from_pretrained builds it, with ``flags`` processing."""
    tok = convert.load_tokenizer(path, False)
    return convert.hooked_from_hf(path, _hf(path), tok, None, "cpu", torch.float32, {**load.PROCESSING_DEFAULTS, **flags}, {})


def _ablation_error(model, hf) -> float:
    with torch.no_grad(), ablation.ablate(model, "L1H0"):
        got = model(TOKENS)
    return float((got - hf_ablated_logits(hf, [(1, 0)], TOKENS)).abs().max())


def _caught(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen if issubclass(w.category, ProcessedModelWarning)]


def test_folded_value_biases_are_named_once(tiny_checkpoints):
    path = tiny_checkpoints["qwen2"]
    folded = _hooked(path, fold_value_biases=True)
    found = _caught(lambda: load_model(folded))
    assert len(found) == 1 and "\n" not in found[0]
    assert "fold_value_biases=True" in found[0] and "from_pretrained_no_processing" in found[0]
    assert "cel_lens.load_model" in found[0]
    assert _ablation_error(folded, _hf(path)) > 1e-2  # what the warning is about: ablation is inexact
    split = Split("s", (Example("a", "Question: 1 plus 1?\nAnswer:", target=" 2"),), answer_type="exact_match")
    assert _caught(lambda: evaluate(folded, split, "L0H0", progress=False)) == []  # once per model
    # a fresh processed model through evaluate() and ablate() alone
    again = _hooked(path, fold_value_biases=True)
    assert len(_caught(lambda: evaluate(again, split, "L0H0", progress=False))) == 1
    other = _hooked(path, fold_value_biases=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ablation.ablate(other, "L0H0"):
            pass
    assert [w.category for w in seen] == [ProcessedModelWarning]


def test_unprocessed_and_harmlessly_processed_models_are_left_alone(tiny_checkpoints, tiny_model):
    qwen = load_model(tiny_checkpoints["qwen2"], loader="hooked", device="cpu")
    assert processing_problem(qwen) is None and _ablation_error(qwen, _hf(tiny_checkpoints["qwen2"])) < 1e-3
    # Llama has no value biases: folding them changes nothing, so nothing is said
    llama = _hooked(tiny_checkpoints["llama"], fold_value_biases=True)
    assert processing_problem(llama) is None and _ablation_error(llama, _hf(tiny_checkpoints["llama"])) < 1e-3
    assert processing_problem(tiny_model) is None
    assert _caught(lambda: warn_if_processed(qwen)) == []


def test_a_processed_bridge_is_named(tiny_checkpoints):
    from transformer_lens.model_bridge import TransformerBridge

    path = tiny_checkpoints["qwen2"]
    hf = _hf(path)
    bridge = TransformerBridge.boot_transformers(
        str(path), hf_model=copy.deepcopy(hf), tokenizer=convert.load_tokenizer(path, False), device="cpu"
    )
    bridge.enable_compatibility_mode(disable_warnings=True)  # TransformerLens's default: fold_value_biases=True
    assert _ablation_error(bridge, hf) > 1e-2
    assert "fold_value_biases=True" in (processing_problem(bridge) or "")
    raw = load_model(path, loader="bridge", device="cpu")
    assert processing_problem(raw) is None


def test_refactored_factored_matrices_are_named():
    """A GPT-2-shaped model (value biases, learned positions) refactored as TransformerLens does:
    same intact logits, inexact ablation, and the warning names the refactor."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, n_ctx=16, d_vocab=50, act_fn="gelu",
        normalization_type="LN", original_architecture="GPT2LMHeadModel", seed=0,
    )
    plain = HookedTransformer(cfg)
    with torch.no_grad():
        for block in plain.blocks:
            block.attn.b_V.normal_()
            block.attn.b_O.normal_()
    refactored = HookedTransformer(cfg)
    refactored.load_and_process_state_dict(
        plain.state_dict(), fold_ln=False, center_writing_weights=False, center_unembed=False,
        fold_value_biases=False, refactor_factored_attn_matrices=True,
    )
    tokens = TOKENS[:, :8] % 50
    with torch.no_grad():
        torch.testing.assert_close(refactored(tokens), plain(tokens), atol=1e-4, rtol=0)
        with ablation.ablate(plain, "L1H0"):
            want = plain(tokens)
        with ablation.ablate(refactored, "L1H0"):
            got = refactored(tokens)
    assert (got - want).abs().max() > 1e-2
    assert processing_problem(plain) is None
    assert "refactor_factored_attn_matrices=True" in (processing_problem(refactored) or "")


def test_a_freshly_initialised_model_is_not_called_processed():
    """``HookedTransformer(HookedTransformerConfig(..., original_architecture="GPT2LMHeadModel"))``
    starts with ``b_V = 0`` and was warned about as folded; its ``b_O`` is zero too, so nothing was
    folded. The same model with its value biases folded away (a non-zero ``b_O``) is still named."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=1, d_model=16, n_heads=2, d_head=8, n_ctx=8, d_vocab=10, act_fn="gelu",
        original_architecture="GPT2LMHeadModel", seed=0,
    )
    fresh = HookedTransformer(cfg)
    assert all(bool((b.attn.b_V == 0).all()) for b in fresh.blocks)  # the case the check used to misread
    assert processing_problem(fresh) is None and _caught(lambda: warn_if_processed(fresh)) == []
    folded = HookedTransformer(cfg)
    state = fresh.state_dict()
    state["blocks.0.attn.b_V"] = torch.randn_like(state["blocks.0.attn.b_V"])
    folded.load_and_process_state_dict(state, fold_ln=False, center_writing_weights=False, center_unembed=False,
                                       fold_value_biases=True)
    assert "fold_value_biases=True" in (processing_problem(folded) or "")

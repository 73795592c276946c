"""The paper's models at their real widths: published configs, rehearsal checkpoints, exact ablation.

The fast tests check the committed ``config.json`` data against the registry's shapes (two
independent records of the same published files), the rehearsal tokenizer's length and special
ids, and the layer cut. The slow one builds each model at full width and vocabulary with its first
and last layer only (SmolLM3: four layers, so that its layer without rope is among them), loads it
with the loader the real model gets by default, and compares intact and zero-ablated logits with
plain ``transformers`` on the same weights (the heads' ``o_proj`` input columns zeroed), in float32
(within 1e-3) and bf16 (within two bf16 ulps of the largest logit: kernels that sum in another
order round differently), for heads of different key/value groups in the first and the last layer.
"""

from __future__ import annotations

import gc

import pytest
import torch

from cel_lens.model import PAPER_MODELS
from cel_lens.model.registry import paper_config
from cel_lens.testing.paper_width import TOKENIZER_LAYOUTS, rehearsal_config, width_tokenizer
from cel_lens.testing.reference import hf_ablated_logits

HUB_IDS = list(PAPER_MODELS)


@pytest.mark.parametrize("hub_id", HUB_IDS)
def test_published_config_agrees_with_the_registry(hub_id):
    spec, config = PAPER_MODELS[hub_id], paper_config(hub_id)
    assert config["num_hidden_layers"] == spec.n_layers
    assert config["num_attention_heads"] == spec.n_heads
    assert config["num_key_value_heads"] == spec.n_kv_heads
    assert config["hidden_size"] == spec.d_model
    assert config["model_type"] == spec.family
    assert config["tie_word_embeddings"] is True  # all three tie their embeddings
    assert config["vocab_size"] >= TOKENIZER_LAYOUTS[hub_id]["length"]


def test_an_unknown_model_has_no_published_config():
    with pytest.raises(KeyError, match="not one of the paper's models"):
        paper_config("gpt2")


def test_published_features_are_in_the_data():
    """What makes these models unlike the tiny ones: Llama-3 rope scaling, Qwen2's q/k/v biases
    (implied by its type), SmolLM3's every fourth layer without rope."""
    llama = paper_config("meta-llama/Llama-3.2-3B-Instruct")
    assert llama["rope_scaling"]["rope_type"] == "llama3" and llama["head_dim"] == 128
    smol = paper_config("HuggingFaceTB/SmolLM3-3B")
    assert [i for i, r in enumerate(smol["no_rope_layers"]) if r == 0] == list(range(3, 36, 4))


def test_layer_cut_keeps_the_rest():
    full = paper_config("HuggingFaceTB/SmolLM3-3B")
    cut = rehearsal_config("HuggingFaceTB/SmolLM3-3B", 4)
    assert cut["num_hidden_layers"] == 4 and cut["no_rope_layers"] == [1, 1, 1, 0] and len(cut["layer_types"]) == 4
    assert {k: v for k, v in cut.items() if k not in ("num_hidden_layers", "no_rope_layers", "layer_types", "max_window_layers")} \
        == {k: v for k, v in full.items() if k not in ("num_hidden_layers", "no_rope_layers", "layer_types", "max_window_layers")}
    with pytest.raises(ValueError, match="n_layers must be in 1..36"):
        rehearsal_config("HuggingFaceTB/SmolLM3-3B", 37)


@pytest.mark.parametrize("hub_id", HUB_IDS)
def test_width_tokenizer_has_the_real_length_and_ids(hub_id):
    layout = TOKENIZER_LAYOUTS[hub_id]
    tok = width_tokenizer(hub_id)
    assert len(tok) == layout["length"]
    for i, text in layout["specials"].items():
        assert tok.convert_ids_to_tokens(i) == text
    assert tok.convert_tokens_to_ids(tok.eos_token) in layout["specials"]
    ids = tok("Question: What is 98 plus 45?\nAnswer:")["input_ids"]
    starts_with_bos = ids[0] == tok.bos_token_id if tok.bos_token_id is not None else False
    assert starts_with_bos == (layout["bos"] is not None)
    assert max(ids) < layout["regular"] or starts_with_bos
    assert tok.decode(ids, skip_special_tokens=True) == "Question: What is 98 plus 45?\nAnswer:"


@pytest.fixture(scope="module")
def width_checkpoints(tmp_path_factory):
    """Rehearsal checkpoints written on demand, one per model (float32 weights)."""
    from cel_lens.testing.paper_width import paper_width_checkpoint

    root, made = tmp_path_factory.mktemp("paper_width"), {}

    def get(hub_id):
        if hub_id not in made:
            n = 4 if PAPER_MODELS[hub_id].family == "smollm3" else 2
            made[hub_id] = paper_width_checkpoint(hub_id, root / hub_id.split("/")[1], n_layers=n, seed=1)
        return made[hub_id]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("hub_id", HUB_IDS)
def test_ablation_at_width_equals_transformers(hub_id, dtype, width_checkpoints):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cel_lens.model import ablate, load_model

    path = width_checkpoints(hub_id)
    spec = PAPER_MODELS[hub_id]
    model = load_model(path, device="cpu", dtype=dtype, loader=spec.loader)  # first: its load copy is freed before hf
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), attn_implementation="eager").eval()
    assert type(model).__name__ == {"hooked": "HookedTransformer", "bridge": "TransformerBridge"}[spec.loader]
    V = hf.config.vocab_size
    ids = AutoTokenizer.from_pretrained(str(path))("Question: What is 98 plus 45?\nAnswer: 143")["input_ids"]
    tokens = torch.tensor([ids + [V - 1, V // 2, 5]])  # the embedding's last row, beyond the tokenizer's, too
    L, per_group = hf.config.num_hidden_layers, spec.n_heads // spec.n_kv_heads
    # first and last layer; in each, heads of two different key/value groups
    cases = [[(0, 0)], [(0, per_group)], [(L - 1, spec.n_heads - 1)], [(L - 1, per_group - 1), (L - 1, per_group)]]
    bf16_ulp = 2.0 ** -7  # bf16's spacing relative to a value: kernels that sum in another order differ by ulps
    try:
        with torch.no_grad():
            intact = hf(tokens).logits.float()
            got = model(tokens).float()
            assert got.shape[-1] == V and intact.std() > 10  # full vocabulary, logits not degenerate
            atol = 1e-3 if dtype == "float32" else 2 * bf16_ulp * float(intact.abs().max())  # bf16: 2 ulps of the largest
            torch.testing.assert_close(got, intact, atol=atol, rtol=0)
            for heads in cases:
                ref = hf_ablated_logits(hf, heads, tokens)
                with ablate(model, "+".join(f"L{l}H{h}" for l, h in heads)):
                    ablated = model(tokens).float()
                effect = float((ref - intact).abs().max())
                assert effect > 1.0  # the ablation moves the logits
                torch.testing.assert_close(ablated, ref, atol=atol, rtol=0)
                assert float((ablated - ref).abs().max()) < 0.1 * effect  # far below what the ablation does
    finally:
        del hf, model
        gc.collect()

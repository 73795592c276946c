"""The independent reference for head ablation: the heads' input columns of ``o_proj`` zeroed in a
plain ``transformers`` model (what an exported checkpoint holds), against which cel_lens's
``hook_z`` ablation is checked."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

__all__ = ["hf_ablated_logits"]


def hf_ablated_logits(
    hf: Any, heads: Sequence[tuple[int, int]], tokens: Int[Tensor, "batch pos"]
) -> Float[Tensor, "batch pos vocab"]:
    """``hf``'s logits of ``tokens`` with each ``(layer, head)``'s columns of ``o_proj`` zeroed, as
    float32; the weights are restored afterwards, also when the pass raises."""
    cfg = hf.config
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    saved: dict[int, Tensor] = {}
    try:
        with torch.no_grad():
            for layer, head in heads:
                w = hf.model.layers[layer].self_attn.o_proj.weight
                saved.setdefault(layer, w.detach().clone())
                w[:, head * d_head:(head + 1) * d_head] = 0
            return hf(tokens).logits.float()
    finally:
        with torch.no_grad():
            for layer, w in saved.items():
                hf.model.layers[layer].self_attn.o_proj.weight.copy_(w)

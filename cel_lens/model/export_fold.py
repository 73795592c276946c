"""Folding a constant ablation into the output bias, for export.

An ablation whose replacement is one vector ``c_h`` per head at every position (mean ablation with
its position class ``"all"``; :meth:`~cel_lens.model.ablation.Ablation.constant`) is exactly a
zeroed head plus a constant output: ``o_proj(z) = sum_h W_O[h] z_h + b`` becomes, with the heads of
S replaced, ``sum_{h not in S} W_O[h] z_h + (b + sum_{h in S} W_O[h] c_h)``. So the export zeroes
S's columns of ``o_proj`` (as for zero ablation) and writes ``b + sum W_O[h] c_h`` over the layer's
output bias. Where that is not exact it refuses in one line: a replacement that varies with the
position or the input, or a layer whose output projection has no bias slot (Llama without
``attention_bias``, Qwen2, SmolLM3: adding one would change the architecture).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from safetensors import safe_open

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.ablation import Ablation

__all__ = ["fold_bias"]

_HF_WEIGHT = "{prefix}layers.{layer}.self_attn.o_proj.weight"
_NATIVE_WEIGHT = "blocks.{layer}.attn.W_O"


def _locate(ckpt: Any, names: dict[str, str], layer: int) -> tuple[str, str, str]:
    """``(shard, weight name, bias name)`` of ``layer``'s output projection (one-line error when
    the checkpoint has no bias for it)."""
    if ckpt.kind == "native":
        weight, bias = f"blocks.{layer}.attn.W_O", f"blocks.{layer}.attn.b_O"
    else:
        pattern = re.compile(rf"(?:^|\.)layers\.{layer}\.self_attn\.o_proj\.weight$")
        weight = next((n for n in names if pattern.search(n)), "")
        bias = weight[: -len("weight")] + "bias"
    if bias not in names:
        raise ValueError(
            f"cannot fold the ablation into layer {layer}'s output bias: {ckpt.path} has no {bias} "
            "(this architecture's o_proj has no bias slot); export the zero-ablated model instead"
        )
    return names[bias], weight, bias


def fold_bias(
    ckpt: Any, heads: HeadsLike, ablation: Ablation, names: dict[str, str]
) -> dict[str, dict[str, bytes]]:
    """Shard -> {bias tensor name -> its new bytes} folding ``ablation`` for ``heads`` (``names``:
    tensor name -> shard, as the headers say). One-line ``ValueError`` where folding is not exact."""
    head_set = HeadSet.parse(heads)
    out: dict[str, dict[str, bytes]] = {}
    for layer in head_set.layers:
        const = ablation.constant(layer, ckpt.n_heads, ckpt.d_head)
        if const is None:
            raise ValueError(
                f"{ablation.name} ablation replaces z by values that vary with the position or the input: "
                "it cannot be folded into a bias, so it has no exact checkpoint"
            )
        shard, weight_name, bias_name = _locate(ckpt, names, layer)
        with safe_open(str(ckpt.path / names[weight_name]), framework="pt") as f:
            weight = f.get_tensor(weight_name).double()
        with safe_open(str(ckpt.path / shard), framework="pt") as f:
            bias = f.get_tensor(bias_name)
        shift = torch.zeros(bias.shape[-1], dtype=torch.float64)
        for h in (x.head for x in head_set if x.layer == layer):
            c = const[h].double()
            if ckpt.kind == "native":  # W_O [n_heads, d_head, d_model]
                shift += c @ weight[h]
            else:  # o_proj.weight [d_model, n_heads * d_head]
                shift += weight[:, h * ckpt.d_head : (h + 1) * ckpt.d_head] @ c
        new = (bias.double() + shift).to(bias.dtype).contiguous()
        out.setdefault(shard, {})[bias_name] = new.view(torch.uint8).numpy().tobytes()
    return out

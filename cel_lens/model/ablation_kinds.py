"""Ablation kinds learnt from D_dist (entries of :data:`~cel_lens.model.ablation.ABLATION_KINDS`):
mean and resample. Each replaces an ablated head's ``z`` by one vector per head, learnt once from
intact passes over the D_dist prompts and recorded with the run (:meth:`state`)."""

from __future__ import annotations

import hashlib
from typing import Any, Iterator, Optional

import einops
import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.model.ablation import Ablation, hook_z_name
from cel_lens.model.forward import forward_resid, param_device
from cel_lens.model.model_types import model_shape

__all__ = ["MeanAblation", "ResampleAblation", "LearntAblation"]


def _capture_z(
    model: Any, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"], chunk: int = 16
) -> Iterator[tuple[int, int, Float[Tensor, "row pos head d_head"], Tensor]]:
    """``(first row, layer, z, mask)`` for every layer of intact passes over ``tokens``, ``chunk``
    rows at a time (``z`` in float64, per head)."""
    n_layers, n_heads = model_shape(model)
    device = param_device(model)
    for lo in range(0, tokens.shape[0], chunk):
        sink: dict[int, Tensor] = {}

        def grab(z: Tensor, hook=None) -> None:  # noqa: ANN001 - TL hook signature
            layer = int(hook.name.split(".")[1])
            sink[layer] = z.detach() if z.ndim == 4 else einops.rearrange(z.detach(), "b p (h d) -> b p h d", h=n_heads)

        mask = attention_mask[lo : lo + chunk].to(device)
        with torch.no_grad():
            forward_resid(model, tokens[lo : lo + chunk].to(device), fwd_hooks=[(hook_z_name(l), grab) for l in range(n_layers)],
                          attention_mask=mask)
        for layer in range(n_layers):
            yield lo, layer, sink[layer].double(), mask


class LearntAblation(Ablation):
    """A kind whose replacement is one learnt vector per head (``values``: ``[layer, head, d_head]``)."""

    learns = True

    def __init__(self, table: Float[Tensor, "layer head d_head"], **info: Any) -> None:
        self.table = table.detach().to("cpu", torch.float32)
        self.info = info

    def values(self, z: Tensor, layer: int) -> Tensor:
        return self.table[layer].to(device=z.device, dtype=z.dtype)[None, None]

    def constant(self, layer: int, n_heads: int, d_head: int) -> Optional[Tensor]:
        return self.table[layer].clone()

    def record(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.table.numpy().tobytes()).hexdigest()
        return {"kind": self.name, **self.info, "sha256": digest}

    def state(self) -> dict[str, Any]:
        """The record plus the learnt table (what a run directory keeps to resume with it)."""
        return {**self.record(), "table": self.table.tolist()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.info.items() if k != 'donors')})"


class MeanAblation(LearntAblation):
    """Mean ablation: each head's mean ``z`` over every real position of the D_dist prompts
    (position class ``"all"``: one vector per head, so export can fold it into the bias)."""

    name = "mean"

    @classmethod
    def fit(cls, model: Any, tokens: Tensor, attention_mask: Tensor, seed: int = 0) -> "MeanAblation":
        n_layers, n_heads = model_shape(model)
        sums: dict[int, Tensor] = {}
        for _, layer, z, mask in _capture_z(model, tokens, attention_mask):
            part = (z * mask[:, :, None, None].double()).sum(dim=(0, 1))
            sums[layer] = part if layer not in sums else sums[layer] + part
        count = int(attention_mask.sum())
        table = torch.stack([sums[l] for l in range(n_layers)]) / max(count, 1)
        return cls(table, classes="all", n_examples=int(tokens.shape[0]), n_positions=count)


class ResampleAblation(LearntAblation):
    """Resample ablation: each head's ``z`` from another D_dist example (a donor per head, drawn
    with ``seed``), at the donor's last prompt position."""

    name = "resample"

    @classmethod
    def fit(cls, model: Any, tokens: Tensor, attention_mask: Tensor, seed: int = 0) -> "ResampleAblation":
        n_layers, n_heads = model_shape(model)
        gen = torch.Generator().manual_seed(int(seed))
        donors = torch.randint(0, int(tokens.shape[0]), (n_layers, n_heads), generator=gen)
        last = attention_mask.long().sum(1) - 1
        table: Optional[Tensor] = None
        for lo, layer, z, _ in _capture_z(model, tokens, attention_mask):
            for head in range(n_heads):
                row = int(donors[layer, head]) - lo
                if 0 <= row < z.shape[0]:
                    if table is None:
                        table = torch.zeros(n_layers, n_heads, z.shape[-1], dtype=torch.float64)
                    table[layer, head] = z[row, int(last[lo + row]), head].cpu()
        assert table is not None
        return cls(table, seed=int(seed), n_examples=int(tokens.shape[0]), donors=donors.tolist())


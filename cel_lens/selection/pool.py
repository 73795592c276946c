"""The candidate pool: the stage-1 scores' top heads, from which stage 2 builds subsets."""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.config import DEFAULT_POOL_SIZE
from cel_lens.heads import Head

__all__ = ["DEFAULT_POOL_SIZE", "candidate_pool"]

def candidate_pool(scores: Float[Tensor, "layer head"], m: int = DEFAULT_POOL_SIZE) -> list[Head]:
    """The top-``m`` heads by stage-1 score (highest first; ties by layer, then head; NaN last).

    ``m`` larger than the number of heads keeps them all.
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be [layer, head], got shape {tuple(scores.shape)}")
    if m < 1:
        raise ValueError(f"pool size must be >= 1, got {m}")
    L, H = scores.shape
    flat = scores.detach().to(torch.float64).cpu().reshape(-1).tolist()
    key = lambda i: (-(flat[i] if not math.isnan(flat[i]) else -math.inf), i)  # noqa: E731
    order = sorted(range(L * H), key=key)[:m]
    return [Head(i // H, i % H) for i in order]

"""How well an approximate scorer ranks heads like the exact one."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from jaxtyping import Float
from torch import Tensor

__all__ = ["rank_agreement"]


def rank_agreement(
    approx: Float[Tensor, "layer head"], exact: Float[Tensor, "layer head"], top: Sequence[int] = (5, 12)
) -> dict[str, float]:
    """Spearman rank correlation and top-m recall (fraction of the exact top-m heads that the
    approximation also ranks in its top m) of an approximate scorer against ``exact``."""
    from scipy.stats import spearmanr

    a, e = approx.flatten().double().numpy(), exact.flatten().double().numpy()
    out = {"spearman": float(spearmanr(a, e).statistic)}
    for m in top:
        m = min(m, a.size)
        top_a, top_e = set(np.argsort(-a)[:m]), set(np.argsort(-e)[:m])
        out[f"recall@{m}"] = len(top_a & top_e) / m
    return out

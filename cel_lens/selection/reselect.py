"""Selection stability that redoes the selection: pool and stage 2 on resampled discovery data.

:func:`~cel_lens.selection.stability.selection_stability` keeps the pool fixed and resamples only
stage 2's data, which favours the original winner (the pool was chosen on the same examples). Here
each bootstrap resample of D_dist redoes everything from the recorded bits: stage-1 exact scores
(every single head's gain, recorded by stage 1), the top-``pool_size`` pool, and stage 2 with the
search's rule (:mod:`~cel_lens.selection.parsimony`) over the subsets of the new pool that were
evaluated. When a new pool needs a subset that was never evaluated, that resample's winner is
unknown: the stability is reported as the bound ``[wins, wins + unknown] / B`` (its lower end
first). :func:`split_half_agreement` selects on one half of D_dist and again on the other half, and
reports how often the two agree: a direct reproducibility figure (each half has half the data).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.config import SearchConfig
from cel_lens.selection.parsimony import RuleTable
from cel_lens.selection.records import SplitHalf, StabilityRecord
from cel_lens.selection.subsets import SubsetScore

__all__ = ["Reselector", "reselecting_stability", "split_half_agreement"]


class Reselector:
    """The whole selection (pool from exact stage-1 scores, then stage 2 with ``rule``), rerun
    on any example weights from recorded D_dist bits. ``singles``: every head's D_dist correctness
    (``{Head: bits}``); ``subsets``/``subset_bits``: stage 2's evaluated subsets."""

    def __init__(self, singles: dict[Head, Tensor], subsets: Sequence[SubsetScore], subset_bits: Tensor,
                 intact: Tensor, *, pool_size: int, k: int, rule: str = SearchConfig.parsimony, alpha: float = 0.05,
                 stand_ins: Optional[int] = None) -> None:
        self.heads = sorted(singles)
        index = {h: i for i, h in enumerate(self.heads)}
        self.single_d = np.stack([singles[h].numpy().astype(np.float64) for h in self.heads]) - intact.numpy()
        self.subsets = list(subsets)
        m = min(pool_size, len(self.heads))
        self.pool_size, self.rule = m, rule
        self.table = RuleTable(self.subsets, subset_bits, rule, stand_ins=stand_ins if stand_ins else len(self.heads),
                               alpha=alpha)
        width = int(self.table.sizes.max()) if len(self.subsets) else 1
        self.members = np.full((len(self.subsets), width), -1)
        for i, s in enumerate(self.subsets):
            self.members[i, : len(s.heads)] = [index.get(h, -1) for h in s.heads]
        self.needed = sum(math.comb(m, j) for j in range(1, min(k, m) + 1))

    def select(self, w: np.ndarray) -> tuple[Optional[HeadSet], bool]:
        """The selection under example weights ``w`` and whether it is certain: ``(winner, True)``
        when every subset the new pool needs was evaluated, ``(best of those evaluated, False)``
        otherwise (an unevaluated subset might have won instead); ``(None, False)`` when none was.
        Stage 2 is the search's own rule (:class:`~cel_lens.selection.parsimony.RuleTable`), every
        tie broken by the resample's counts."""
        scores = self.single_d @ w
        pool = np.zeros(len(self.heads) + 1, dtype=bool)  # the last entry stands for "not a head" (-1)
        pool[np.argsort(-scores, kind="stable")[: self.pool_size]] = True
        inside = np.where(self.members >= 0, pool[self.members], True).all(1)
        cands = np.flatnonzero(inside)
        if len(cands) == 0:
            return None, False
        return self.subsets[self.table.choose(w, cands)].heads, len(cands) >= self.needed


def _summary(picks: list[tuple[Optional[HeadSet], bool]], selected: HeadSet) -> dict[str, Any]:
    """Frequencies of the winners; S-hat's as a bound: certain wins, and wins that an unevaluated
    subset might have taken (``unknown``)."""
    b = len(picks)  # every figure below comes from these picks: they sum to at most 1
    wins = sum(w == selected and sure for w, sure in picks)
    unknown = sum(w == selected and not sure for w, sure in picks)
    freq: dict[str, int] = {}
    for w, sure in picks:
        if w is not None and sure:
            freq[str(w)] = freq.get(str(w), 0) + 1
    top = sorted(freq.items(), key=lambda kv: -kv[1])[:10]
    if wins and str(selected) not in dict(top):
        top.append((str(selected), wins))
    return {"selected": str(selected), "selected_frequency": wins / b, "upper": (wins + unknown) / b,
            "unknown": unknown, "incomplete": sum(not sure for _, sure in picks) / b,
            "wins": [{"heads": h, "frequency": c / b} for h, c in top]}


def reselecting_stability(
    reselector: Reselector, selected: HeadSet, *, n_resamples: int = 200, seed: int = 0
) -> StabilityRecord:
    """How often the whole selection, redone on a bootstrap resample of D_dist, picks ``selected``:
    ``{"method": "reselect", "n_resamples", "selected", "selected_frequency" (certain wins: the
    lower bound), "upper" (also counting resamples where it beat every evaluated candidate but an
    unevaluated subset was needed), "unknown", "incomplete", "wins"}``."""
    n = reselector.single_d.shape[1]
    rng = np.random.default_rng([seed, 0x5E1])
    picks = [reselector.select(np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64))
             for _ in range(n_resamples)]
    return {"method": "reselect", "n_resamples": int(n_resamples), **_summary(picks, selected)}


def split_half_agreement(reselector: Reselector, *, n_splits: int = 100, seed: int = 0) -> SplitHalf:
    """Select on a random half of D_dist and again on the other half, ``n_splits`` times:
    ``{"n_splits", "agree", "agree_upper", "unknown"}`` (``agree``: the fraction of splits whose two
    halves certainly chose the same subset; ``unknown``: the fraction of splits where a half needed an
    unevaluated subset; ``agree_upper``: the fraction that may agree, a bound: the certain
    agreements, the uncertain splits whose best evaluated choices match, and those where both halves
    are uncertain, since both may have picked the same unevaluated subset. When only one half is
    uncertain and the choices differ, they cannot agree: the sure half's winner was evaluated, so
    it lost to the other half's choice or was outside its pool)."""
    n = reselector.single_d.shape[1]
    rng = np.random.default_rng([seed, 0x4A1F])
    agree = maybe = unknown = 0
    for _ in range(n_splits):
        half = np.zeros(n)
        half[rng.permutation(n)[: n // 2]] = 1.0
        (a, sure_a), (b, sure_b) = reselector.select(half), reselector.select(1.0 - half)
        unknown += not (sure_a and sure_b)
        same = a is not None and a == b
        agree += same and sure_a and sure_b
        maybe += same or not (sure_a or sure_b)
    return {"n_splits": int(n_splits), "agree": agree / n_splits, "agree_upper": maybe / n_splits,
            "unknown": unknown / n_splits}


def singles_from(
    sets: Sequence[HeadSet], bits: Bool[Tensor, "set example"], n_layers: int, n_heads: int
) -> Optional[dict[Head, Tensor]]:
    """Every single head's recorded correctness (``None`` unless all ``n_layers * n_heads`` are
    recorded, as after exact stage-1 scores)."""
    singles = {next(iter(s)): b for s, b in zip(sets, bits) if len(s) == 1}
    return singles if len(singles) == n_layers * n_heads else None


__all__ += ["singles_from"]

"""A parsimonious S-hat: the smallest subset whose D_dist gain is within one standard error of the best.

Stage 2 evaluates every subset of the pool up to ``k`` heads and the raw rule keeps the most
accurate on D_dist. With many subsets and few examples the winner is often padded with heads that
do nothing: adding a null head to a good set moves its D_dist count by noise, and the largest of
many noisy counts usually belongs to a padded set. The *one-standard-error rule* (as in choosing a
regularisation strength by cross-validation) prefers the smallest subset whose discovery accuracy
is within one standard error of the best one's, the error being that of the paired per-example
differences against the best (already recorded: no forward pass). Ties among the smallest sets go
to the raw rule's order (:func:`~cel_lens.selection.subsets.selection_key`).

``rule="simultaneous"`` widens the tolerance to ``z(1 - 0.05 / m)`` standard errors for ``m``
evaluated subsets: the smallest subset that the best is not significantly better than, Bonferroni
over the subsets (the best is itself the largest of ``m`` noisy counts, so one standard error is
often not enough to drop a padded head). ``rule="best"`` keeps the raw rule. The result records
the rule, the raw winner, the tolerance
and the choice.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Literal, Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import PARSIMONY_RULES
from cel_lens.selection.subsets import SubsetScore, select_best, selection_key

__all__ = ["PARSIMONY_RULES", "DEFAULT_PARSIMONY", "Parsimony", "tolerance_width", "select_parsimonious"]

Parsimony = Literal["one_se", "simultaneous", "best"]
DEFAULT_PARSIMONY = "one_se"
"""The default rule: the smallest subset within one standard error of the best."""


def tolerance_width(rule: str, n_subsets: int, alpha: float = 0.05) -> float:
    """Standard errors a subset may trail the best by under ``rule``: 1 for ``one_se``,
    ``z(1 - alpha / n_subsets)`` for ``simultaneous``, 0 for ``best``."""
    if rule == "one_se":
        return 1.0
    if rule == "simultaneous":
        return float(NormalDist().inv_cdf(1 - alpha / max(n_subsets, 1)))
    return 0.0


def select_parsimonious(
    subsets: Sequence[SubsetScore], correct: Bool[Tensor, "subset example"], rule: str = DEFAULT_PARSIMONY
) -> tuple[SubsetScore, dict[str, Any]]:
    """S-hat under ``rule`` and the record of the choice: ``{"rule", "best", "best_dist_gain",
    "tolerance", "chosen", "candidates"}`` (``tolerance``: :func:`tolerance_width` standard errors of the mean paired
    difference against the best, in accuracy; ``candidates``: subsets within it). ``correct[i]`` is
    ``subsets[i]``'s per-example D_dist correctness."""
    if rule not in PARSIMONY_RULES:
        raise ValueError(f"unknown parsimony rule {rule!r}; choose one of {', '.join(PARSIMONY_RULES)}")
    if correct.ndim != 2 or correct.shape[0] != len(subsets):
        raise ValueError(f"correct must be [{len(subsets)}, example], got shape {tuple(correct.shape)}")
    best = select_best(subsets)
    record: dict[str, Any] = {"rule": rule, "best": str(best.heads), "best_dist_gain": best.dist_gain}
    if rule == "best":
        return best, {**record, "tolerance": 0.0, "chosen": str(best.heads), "candidates": 1}
    bits = correct.to(torch.float64)
    width = tolerance_width(rule, len(subsets))
    ref = bits[list(subsets).index(best)]
    diff = bits - ref  # [subset, example]: paired differences against the best
    n = bits.shape[1]
    mean = diff.mean(1)
    sd = diff.std(1, unbiased=True) if n > 1 else torch.zeros(len(subsets), dtype=torch.float64)
    se = sd / math.sqrt(max(n, 1))
    within = [s for s, m, e in zip(subsets, mean.tolist(), se.tolist()) if m >= -width * e - 1e-12]
    smallest = min(len(s.heads) for s in within)
    chosen = min((s for s in within if len(s.heads) == smallest), key=selection_key)
    tolerance = width * float(se[list(subsets).index(chosen)])
    return chosen, {**record, "tolerance": tolerance, "chosen": str(chosen.heads), "candidates": len(within)}

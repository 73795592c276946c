"""A parsimonious S-hat: the smallest subset whose D_dist gain is within one standard error of the best.

Stage 2 evaluates every subset of the pool up to ``k`` heads and the raw rule keeps the most
accurate on D_dist. With many subsets and few examples the winner is often padded with heads that
do nothing: adding a null head to a good set moves its D_dist count by noise, and the largest of
many noisy counts usually belongs to a padded set. The *one-standard-error rule* (as in choosing a
regularisation strength by cross-validation) prefers the smallest subset whose discovery accuracy
is within one standard error of the best one's, the error being that of the paired per-example
differences against the best (already recorded: no forward pass). Ties among the smallest sets go
to the raw rule's order (:func:`~cel_lens.selection.subsets.selection_key`).

``rule="best"`` keeps the raw rule. The result records the rule, the raw winner, the tolerance
and the choice.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import PARSIMONY_RULES
from cel_lens.selection.subsets import SubsetScore, select_best, selection_key

__all__ = ["PARSIMONY_RULES", "DEFAULT_PARSIMONY", "Parsimony", "select_parsimonious"]

Parsimony = Literal["one_se", "best"]
DEFAULT_PARSIMONY = "one_se"
"""The default rule: the smallest subset within one standard error of the best."""


def select_parsimonious(
    subsets: Sequence[SubsetScore], correct: Bool[Tensor, "subset example"], rule: str = DEFAULT_PARSIMONY
) -> tuple[SubsetScore, dict[str, Any]]:
    """S-hat under ``rule`` and the record of the choice: ``{"rule", "best", "best_dist_gain",
    "tolerance", "chosen", "candidates"}`` (``tolerance``: one standard error of the mean paired
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
    ref = bits[list(subsets).index(best)]
    diff = bits - ref  # [subset, example]: paired differences against the best
    n = bits.shape[1]
    mean = diff.mean(1)
    sd = diff.std(1, unbiased=True) if n > 1 else torch.zeros(len(subsets), dtype=torch.float64)
    se = sd / math.sqrt(max(n, 1))
    within = [s for s, m, e in zip(subsets, mean.tolist(), se.tolist()) if m >= -e - 1e-12]
    smallest = min(len(s.heads) for s in within)
    chosen = min((s for s in within if len(s.heads) == smallest), key=selection_key)
    tolerance = float(se[list(subsets).index(chosen)])
    return chosen, {**record, "tolerance": tolerance, "chosen": str(chosen.heads), "candidates": len(within)}

"""Selection stability: would stage 2 pick the same subset on other discovery data?

Every stage-2 subset's per-example D_dist correctness is already known, so stage 2's selection
rule can be rerun on ``B`` bootstrap resamples of D_dist (examples drawn with replacement) without
a single forward pass: on each resample every subset's count of correct examples is recomputed,
and the search's own rule (:class:`~cel_lens.selection.parsimony.RuleTable`, with the resample's
counts for every tie-break) picks a winner. How often S-hat wins, and which subsets
win otherwise, says how much the selection owes to the particular discovery sample.

The pool and the set of evaluated subsets stay fixed (for a beam search, the subsets the beam
visited): what is resampled is the data stage 2 chose on, not stage 1.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.selection.parsimony import RuleTable
from cel_lens.selection.records import StabilityRecord
from cel_lens.config import DEFAULT_N_STABILITY
from cel_lens.selection.subsets import SubsetScore

__all__ = ["DEFAULT_N_STABILITY", "selection_stability", "known_share", "MOSTLY_UNKNOWN"]

MOSTLY_UNKNOWN = 0.5
"""Above this share of resamples (or splits) whose selection is not known (a subset never evaluated
was needed), no share is estimated from the rest: the known ones are too few to stand for them."""


def known_share(frequency: float, incomplete: float) -> Optional[float]:
    """A share of all resamples (``frequency``) as a share of those whose selection is known, or
    ``None`` when more than :data:`MOSTLY_UNKNOWN` of them are not known."""
    if incomplete > MOSTLY_UNKNOWN:
        return None
    return frequency / (1 - incomplete) if incomplete else frequency



def _resample_weights(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    """``[b, n]`` multiplicities of each example in ``b`` bootstrap resamples of ``n`` examples."""
    idx = rng.integers(0, n, size=(b, n)) + n * np.arange(b)[:, None]
    return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)


def selection_stability(
    subsets: Sequence[SubsetScore],
    correct: Bool[Tensor, "subset example"],
    *,
    n_resamples: int = DEFAULT_N_STABILITY,
    seed: int = 0,
    top: int = 50,
    rule: str = "best",
    stand_ins: Optional[int] = None,
    alpha: float = 0.05,
) -> StabilityRecord:
    """How often each subset wins stage 2's selection under ``rule`` (the search passes its own:
    :class:`~cel_lens.selection.parsimony.RuleTable`, the one implementation) on ``n_resamples``
    bootstrap resamples of D_dist. ``correct[i]`` is ``subsets[i]``'s per-example D_dist correctness.

    Returns ``{"n_resamples", "rule", "selected", "selected_frequency", "selected_by_tie_break",
    "identical_subsets", "wins"}``: the subset the rule picks on the full data, the fraction of
    resamples it wins, the fraction it wins only by the tie-break (another subset as many correct),
    how many other subsets answer every example as it does (no resample can separate them), and
    the ``top`` most frequent winners as ``{"heads", "frequency"}`` (best first; the selected one
    always listed when it won at all). Every frequency comes from the same picks, so they sum to at
    most 1 and the selected one's equals its entry in ``wins``. Deterministic given ``seed``.
    """
    if len(subsets) == 0:
        raise ValueError("no subsets to resample")
    if correct.ndim != 2 or correct.shape[0] != len(subsets):
        raise ValueError(f"correct must be [{len(subsets)}, example], got shape {tuple(correct.shape)}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    table = RuleTable(subsets, correct, rule, stand_ins=stand_ins, alpha=alpha)
    bits = table.bits
    n = bits.shape[1]
    full = table.choose()
    rng = np.random.default_rng([seed, 0x5EED])
    wins = np.zeros(len(subsets), dtype=np.int64)
    by_tie = 0  # resamples S-hat won only by the tie-break (another subset had as many correct)
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        weights = _resample_weights(rng, b, n)
        counts = bits @ weights.T  # [subset, resample], exact integers
        for r in range(b):
            winner = table.best(counts[:, r], np.arange(len(subsets))) if table.entry.plain_best else table.choose(weights[r])
            wins[winner] += 1
            by_tie += int(winner == full and (counts[:, r] == counts[winner, r]).sum() > 1)
    identical = int((bits == bits[full]).all(1).sum()) - 1  # same answer on every example: never separable
    ranked = sorted(range(len(subsets)), key=lambda j: (-wins[j], table.rank[j]))[:top]
    if wins[full] > 0 and full not in ranked:
        ranked.append(full)
    return {
        "n_resamples": int(n_resamples),
        "rule": rule,
        "selected": str(subsets[full].heads),
        "selected_frequency": float(wins[full] / n_resamples),
        "selected_by_tie_break": float(by_tie / n_resamples),
        "identical_subsets": identical,
        "wins": [
            {"heads": str(subsets[j].heads), "frequency": float(wins[j] / n_resamples)}
            for j in ranked
            if wins[j] > 0
        ],
    }

"""Selection stability: would stage 2 pick the same subset on other discovery data?

Every stage-2 subset's per-example D_dist correctness is already known, so stage 2's selection
rule can be rerun on ``B`` bootstrap resamples of D_dist (examples drawn with replacement) without
a single forward pass: on each resample every subset's count of correct examples is recomputed,
and the rule (:func:`~cel_lens.selection.subsets.selection_key`: most correct; ties by fewer heads,
higher summed stage-1 score, head order) picks a winner. How often S-hat wins, and which subsets
win otherwise, says how much the selection owes to the particular discovery sample.

The pool and the set of evaluated subsets stay fixed (for a beam search, the subsets the beam
visited): what is resampled is the data stage 2 chose on, not stage 1.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.selection.subsets import SubsetScore, selection_key

__all__ = ["DEFAULT_N_STABILITY", "selection_stability"]

DEFAULT_N_STABILITY = 1000
"""Bootstrap resamples of D_dist for the selection stability."""


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
) -> dict[str, Any]:
    """How often each subset wins stage 2's selection on ``n_resamples`` bootstrap resamples of
    D_dist. ``correct[i]`` is ``subsets[i]``'s per-example D_dist correctness.

    Returns ``{"n_resamples", "selected", "selected_frequency", "selected_by_tie_break",
    "identical_subsets", "wins"}``: the subset the rule picks on the full data, the fraction of
    resamples it wins, the fraction it wins only by the tie-break (another subset as many correct),
    how many other subsets answer every example as it does (no resample can separate them), and
    the ``top`` most frequent winners as ``{"heads", "frequency"}`` (best first). Deterministic
    given ``seed``.
    """
    if len(subsets) == 0:
        raise ValueError("no subsets to resample")
    if correct.ndim != 2 or correct.shape[0] != len(subsets):
        raise ValueError(f"correct must be [{len(subsets)}, example], got shape {tuple(correct.shape)}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    # order by the rule's tie-break (everything after the count): the first maximum is the winner
    order = sorted(range(len(subsets)), key=lambda i: selection_key(subsets[i])[1:])
    bits = correct[order].to(torch.float64).numpy()
    n = bits.shape[1]
    full = int(np.argmax(bits.sum(1)))
    rng = np.random.default_rng([seed, 0x5EED])
    wins = np.zeros(len(order), dtype=np.int64)
    by_tie = 0  # resamples S-hat won only by the tie-break (another subset had as many correct)
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        counts = bits @ _resample_weights(rng, b, n).T  # [subset, resample], exact integers
        winners = counts.argmax(0)
        wins += np.bincount(winners, minlength=len(order))
        tied = (counts == counts.max(0, keepdims=True)).sum(0) > 1
        by_tie += int(((winners == full) & tied).sum())
    identical = int((bits == bits[full]).all(1).sum()) - 1  # same answer on every example: never separable
    ranked = sorted(range(len(order)), key=lambda j: (-wins[j], j))[:top]
    return {
        "n_resamples": int(n_resamples),
        "selected": str(subsets[order[full]].heads),
        "selected_frequency": float(wins[full] / n_resamples),
        "selected_by_tie_break": float(by_tie / n_resamples),
        "identical_subsets": identical,
        "wins": [
            {"heads": str(subsets[order[j]].heads), "frequency": float(wins[j] / n_resamples)}
            for j in ranked
            if wins[j] > 0
        ],
    }

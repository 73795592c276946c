"""Stage 2: joint ablations of small subsets of the pool, evaluated on D_dist, and the selection rule.

:func:`evaluate_subsets` evaluates every subset of size 1..k of the pool (or a beam search);
:func:`select_best` keeps the best discovery accuracy (ties: fewer heads, higher summed stage-1
score, then the canonical head order): S-hat.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import DEFAULT_K, STRATEGIES, SearchConfig
from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.oracle import Oracle, call_oracle, evaluate_chunked

__all__ = ["DEFAULT_K", "STAGE2_BATCH", "SubsetStrategy", "EXHAUSTIVE", "BEAM", "SubsetScore", "selection_key", "select_best", "evaluate_subsets"]

STAGE2_BATCH = 8
"""Subsets per oracle call in stage 2 (at most; ``chunk`` when smaller). A run directory records each
call's answers as it returns and the progress bar moves once per call, so a killed stage 2 loses
at most one batch and resumes with the next (stage 2 of a pool of 6 and k=2, 21 subsets, was one
call: nothing shown or recorded until all had run). Each batch holds subsets that resume at
nearby layers (sorted by their first ablated layer), so they share forward passes."""

@dataclass(frozen=True)
class SubsetScore:
    """A stage-2 subset and its discovery result (``test_gain_posthoc`` is filled after selection)."""

    heads: HeadSet
    n_correct: int
    n_dist: int
    dist_gain: float
    score_sum: float
    test_gain_posthoc: Optional[float] = None

    @property
    def dist_acc(self) -> float:
        """Discovery accuracy with these heads ablated."""
        return self.n_correct / self.n_dist

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (as stored in ``Result.subsets``)."""
        return {
            "heads": str(self.heads),
            "size": len(self.heads),
            "dist_acc": self.dist_acc,
            "dist_gain": self.dist_gain,
            "score_sum": self.score_sum,
            "test_gain_posthoc": self.test_gain_posthoc,
        }


def selection_key(s: SubsetScore) -> tuple:
    """Sort key: best discovery accuracy first; ties by fewer heads, then higher summed stage-1
    score (rounded to 1e-12 so that equal sums tie), then the canonical (layer, head) order."""
    return (-s.n_correct, len(s.heads), -round(s.score_sum, 12), s.heads.heads)


def select_best(subsets: Sequence[SubsetScore]) -> SubsetScore:
    """The selected subset S-hat (see :func:`selection_key`); deterministic."""
    if not subsets:
        raise ValueError("no subsets to select from")
    return min(subsets, key=selection_key)


Run = Callable[[list[HeadSet], str], list["SubsetScore"]]


def _exhaustive_sets(heads: list[Head], k: int, beam_width: int, run: Run) -> None:
    run([HeadSet(c) for j in range(1, min(k, len(heads)) + 1) for c in itertools.combinations(heads, j)], "stage2")


def _beam_sets(heads: list[Head], k: int, beam_width: int, run: Run) -> None:
    if beam_width < 1:
        raise ValueError(f"beam_width must be >= 1, got {beam_width}")
    level = run([HeadSet([h]) for h in heads], "stage2")
    for _ in range(2, min(k, len(heads)) + 1):
        beam = sorted(level, key=selection_key)[:beam_width]
        grown = {b.heads.union(h) for b in beam for h in heads if h not in b.heads}
        level = run(sorted(grown, key=lambda s: s.heads), "stage2")


def _exhaustive_count(m: int, k: int, beam_width: int) -> tuple[int, bool]:
    return sum(math.comb(m, j) for j in range(1, min(k, m) + 1)), False


def _beam_count(m: int, k: int, beam_width: int) -> tuple[int, bool]:
    sizes = range(1, min(k, m) + 1)
    return sum(m if j == 1 else min(math.comb(m, j), beam_width * (m - j + 1)) for j in sizes), True


@dataclass(frozen=True)
class SubsetStrategy:
    """A stage-2 strategy (an entry of :data:`~cel_lens.config.STRATEGIES`): ``run_sets(heads, k,
    beam_width, run)`` hands ``run`` the subsets it evaluates, level by level; ``count(m, k,
    beam_width)`` is how many for a pool of ``m`` (``(count, is_bound)``); ``uses_beam_width``:
    whether ``beam_width`` changes what it does (a result records the width only then)."""

    name: str
    run_sets: Callable[[list[Head], int, int, Run], None]
    count: Callable[[int, int, int], tuple[int, bool]]
    uses_beam_width: bool


EXHAUSTIVE = SubsetStrategy("exhaustive", _exhaustive_sets, _exhaustive_count, False)
"""Every subset of 1..k pool heads."""
BEAM = SubsetStrategy("beam", _beam_sets, _beam_count, True)
"""All singles, then the ``beam_width`` best sets of each size grown by one pool head."""


def _score_sum(hs: HeadSet, scores: Optional[Tensor]) -> float:
    if scores is None:
        return 0.0
    return float(sum(float(scores[h.layer, h.head]) for h in hs))


def evaluate_subsets(
    oracle: Oracle,
    pool: Sequence[HeadsLike],
    k: int = DEFAULT_K,
    *,
    strategy: str = SearchConfig.strategy,
    beam_width: int = SearchConfig.beam_width,
    scores: Optional[Float[Tensor, "layer head"]] = None,
    intact: Optional[Bool[Tensor, " example"]] = None,
    chunk: int = 64,
    progress: bool = False,
) -> list[SubsetScore]:
    """Stage 2: discovery accuracy of joint ablations of subsets of ``pool``, sizes 1..``k``.

    ``exhaustive`` evaluates every subset (sum of C(m, j) for j <= k); ``beam`` evaluates all
    singles, then grows only the ``beam_width`` best sets of each size by one pool head (for pools
    too large to enumerate). ``scores`` (stage 1) feed the tie-break; ``intact`` is the intact
    model's D_dist correctness (evaluated when omitted). Returns every evaluated subset, in
    evaluation order.
    """
    heads = [Head.parse(h) for h in pool]
    if len(set(heads)) != len(heads):
        raise ValueError("pool has repeated heads")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if intact is None:
        intact = call_oracle(oracle, "dist", [HeadSet()], "intact")[0]
    n = int(intact.shape[0])
    base = int(intact.sum())
    sc = scores.detach().to(torch.float64).cpu() if scores is not None else None
    done: dict[HeadSet, SubsetScore] = {}

    def run(sets: list[HeadSet], desc: str) -> list[SubsetScore]:
        todo = [s for s in sets if s not in done]
        if todo:
            order = sorted(todo, key=lambda s: s.first_layer or 0)  # stable: ties keep their order
            correct = dict(zip(order, evaluate_chunked(oracle, "dist", order, desc, min(chunk, STAGE2_BATCH), progress)))
            for s in todo:
                nc = int(correct[s].sum())
                done[s] = SubsetScore(s, nc, n, (nc - base) / n, _score_sum(s, sc))
        return [done[s] for s in sets]

    STRATEGIES.resolve(strategy).run_sets(heads, k, beam_width, run)
    return list(done.values())

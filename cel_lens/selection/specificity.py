"""Specificity that respects selection: S-hat against the winners of random pools.

The random-subset null compares S-hat's test gain with that of random head sets, but S-hat was
*chosen* (the best of many subsets on D_dist) while the random sets were not. This comparison
gives the competitors the same treatment: draw ``R`` random pools of the pool's size, rerun
stage 2 on each (every subset up to ``k`` heads, on D_dist only), and take each pool's winner.
After S-hat is fixed, every winner's test gain is measured; the p-value is ``(1 + b) / (1 + R)``
for the ``b`` winners whose test gain is at least S-hat's. A small p says the stage-1 pool found
heads that selection on random pools does not; a large one, that selecting the best subset of
any pool gains about as much.

It costs stage 2 once per random pool (``R`` times C(m, 1) + ... + C(m, k) evaluations on D_dist
before the selection is fixed, minus what is already known) plus ``R`` test evaluations.
"""

from __future__ import annotations

from typing import Optional, Sequence

from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import SearchConfig
from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import Oracle, call_oracle, evaluate_chunked
from cel_lens.selection.records import SpecificityRecord
from cel_lens.selection.subsets import SubsetScore, evaluate_subsets, select_best
from cel_lens.stats import count_head_sets, null_min_p, null_p_value, random_head_sets

__all__ = ["random_pool_winners", "specificity_statistics"]


def random_pool_winners(
    oracle: Oracle,
    pool: Sequence[Head],
    n_pools: int,
    *,
    k: int,
    seed: int,
    intact: Bool[Tensor, " example"],
    scores: Optional[Float[Tensor, "layer head"]] = None,
    strategy: str = SearchConfig.strategy,
    beam_width: int = SearchConfig.beam_width,
    chunk: int = 64,
    progress: bool = False,
) -> tuple[list[SubsetScore], int]:
    """Stage 2 (on D_dist only) on ``n_pools`` distinct random pools of ``len(pool)`` heads other
    than ``pool`` itself; returns each pool's winner and how many such pools exist."""
    size = len(pool)
    L, H = oracle.n_layers, oracle.n_heads
    possible = count_head_sets(L, H, size, exclude=[HeadSet(pool)])
    pools = random_head_sets(L, H, size, n_pools, seed, exclude=[HeadSet(pool)])
    winners = []
    for random_pool in pools:
        subsets = evaluate_subsets(
            oracle, list(random_pool), k, strategy=strategy, beam_width=beam_width, scores=scores,
            intact=intact, chunk=chunk, progress=progress,
        )
        winners.append(select_best(subsets))
    return winners, possible


def specificity_statistics(
    oracle: Oracle,
    winners: Sequence[SubsetScore],
    gain: float,
    n_possible: int,
    *,
    chunk: int = 64,
    progress: bool = False,
) -> SpecificityRecord:
    """Test gains of the random pools' ``winners`` (call only after S-hat is fixed: ``oracle`` reads
    the test split) against S-hat's ``gain``: ``{"n_pools", "n_possible", "winners", "dist_gains",
    "test_gains", "p_value", "min_p"}``."""
    gains: list[float] = []
    if winners:
        intact = call_oracle(oracle, "test", [HeadSet()], "test")[0]
        correct = evaluate_chunked(oracle, "test", [w.heads for w in winners], "specificity", chunk, progress)
        gains = [(int(c.sum()) - int(intact.sum())) / int(intact.shape[0]) for c in correct]
    return {
        "n_pools": len(winners),
        "n_possible": int(n_possible),
        "winners": [str(w.heads) for w in winners],
        "dist_gains": [w.dist_gain for w in winners],
        "test_gains": gains,
        "p_value": null_p_value(gains, gain),
        "min_p": null_min_p(len(gains)),
    }

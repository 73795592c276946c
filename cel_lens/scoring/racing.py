"""Racing stage 1: exact scoring that stops evaluating a head once it provably cannot change the pool.

Exact stage 1 evaluates every head on all ``n`` examples of D_dist and keeps the ``pool_size`` best
(:func:`~cel_lens.selection.pool.candidate_pool`). The race evaluates every still-undecided head on
growing batches of D_dist, taken in the order of a seeded random permutation (batch ``r`` is the
subsplit ``dist@SEED[m_{r-1}:m_r]``, :func:`~cel_lens.oracle.subsplit`; it goes through the oracle,
so a run directory records and resumes it like any evaluation). After each batch every head gets a
confidence interval for its *exact* stage-1 score (its D_dist accuracy gain over all ``n`` examples).

**The bound.** A head's gain is ``(K+ - K-) / n``: ``K+`` examples it fixes (wrong intact, right
ablated: only among the ``n0`` intact-wrong examples) and ``K-`` it breaks (among the ``n1``
intact-right ones). The first ``m`` examples of a random permutation are a sample without
replacement, so the fixes seen among its intact-wrong examples are hypergeometric given ``K+``
(likewise ``K-``): exact intervals, with the finite-population correction (at ``m = n`` the score
is known). Each of the four one-sided bounds (``K+`` and ``K-``, up and down) of each head at each
batch before the last is taken at level ``alpha = delta / (4 * heads * batches)``; by the union
bound every interval holds at once with probability at least ``1 - delta``.

**The rules.** A head is *out* once at least ``pool_size`` heads have a lower bound above its upper
bound minus ``margin``, and *in* once its lower bound plus ``margin`` exceeds the upper bounds of
all but ``pool_size - 1`` other heads. The heads still undecided after the last batch were
evaluated on every example, so their scores are exact, and the remaining places go to the best of
them, ties broken as :func:`candidate_pool` breaks them (layer, then head).

**The guarantee.** Let ``s_P`` be the lowest score in exact stage 1's pool and ``s_P+1`` the best
score outside it. With probability at least ``1 - delta`` (over the permutation alone; the oracle
may be any deterministic one) every interval holds, and then a head put out scores below
``s_P + margin`` and a head put in above ``s_P+1 - margin``. With ``margin = 0`` (the default) the
race's pool therefore *equals* exact stage 1's pool, ties included: a head put out scores strictly
below ``pool_size`` others, one put in strictly above all but ``pool_size - 1``, and the rest are
ranked by exact scores. With ``margin > 0`` heads within ``margin`` of the boundary may be swapped,
in exchange for stopping earlier on them.

**The scores** returned are exact for heads evaluated on all of D_dist; for the others, the gain on
the examples they saw, clipped to their interval; a head left out is capped just below the pool's
lowest score, so that :func:`candidate_pool` of the scores is the race's pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from jaxtyping import Float, Int
from scipy.special import gammaln
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import DIST_SPLIT, Oracle, Stage1Scores, call_oracle, evaluate_chunked
from cel_lens.splits import subsplit, subsplit_indices
from cel_lens.scoring.base import Cost, Scorer
from cel_lens.tasks.base import Split

__all__ = ["RacingOptions", "RacingOutcome", "RacingScorer", "RacingScorerOptions", "racing_scores", "racing_schedule", "racing_cost",
           "racing_level", "count_bounds", "gain_bounds"]


@dataclass(frozen=True)
class RacingOptions:
    """Options of the racing scorer. ``delta``: the probability allowed for the race's pool to
    differ from exact stage 1's (see the module docstring); ``margin``: score differences (accuracy
    units) the pool may get wrong in exchange for stopping earlier (0: none); ``first``: examples in
    the first batch (default: ``max(64, n // 32)``); ``growth``: each batch's end is this multiple
    of the previous one's; ``seed``: the permutation of D_dist."""

    delta: float = 0.05
    margin: float = 0.0
    first: Optional[int] = None
    growth: float = 2.0
    seed: int = 0

    def validate(self) -> "RacingOptions":
        """Raise ``ValueError`` naming the first option that cannot work; return ``self``."""
        if not 0.0 < float(self.delta) < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")
        if not 0.0 <= float(self.margin) < 2.0:
            raise ValueError(f"margin must lie in [0, 2), got {self.margin!r}")
        if self.first is not None and int(self.first) < 1:
            raise ValueError(f"first must be >= 1, got {self.first!r}")
        if not float(self.growth) > 1.0:
            raise ValueError(f"growth must be > 1, got {self.growth!r}")
        if int(self.seed) < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        return self


def racing_schedule(n: int, options: RacingOptions = RacingOptions()) -> list[int]:
    """Ends of the batches (examples seen after each), increasing, the last one ``n``."""
    if n < 1:
        raise ValueError(f"D_dist needs at least one example, got {n}")
    m = min(n, int(options.first) if options.first is not None else max(64, n // 32))
    ends = [m]
    while ends[-1] < n:
        ends.append(min(n, max(ends[-1] + 1, math.ceil(ends[-1] * float(options.growth)))))
    return ends


def racing_cost(n_heads: int, n_dist: int, options: RacingOptions = RacingOptions()) -> tuple[int, int]:
    """``(head-set x example evaluations at most, batches)``: with no head decided early the race
    costs exactly exact stage 1 (``n_heads * n_dist``); what it saves depends on the effects."""
    return n_heads * n_dist, len(racing_schedule(n_dist, options))


def _tails(population: int, sample: int) -> tuple[np.ndarray, np.ndarray]:
    """``P(X <= x | K)`` and ``P(X >= x | K)`` for ``X ~ Hypergeometric(population, K, sample)``,
    as ``[K, x]`` tables (``K = 0..population``, ``x = 0..sample``), each summed from its own tail
    so that small tail probabilities keep their precision."""
    K = np.arange(population + 1, dtype=np.float64)[:, None]
    x = np.arange(sample + 1, dtype=np.float64)[None, :]
    lc = lambda a, b: gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)  # noqa: E731
    valid = (x <= K) & (sample - x <= population - K)
    with np.errstate(invalid="ignore"):
        logp = lc(K, np.minimum(x, K)) + lc(population - K, np.clip(sample - x, 0, population - K)) - lc(
            np.float64(population), np.float64(sample)
        )
    pmf = np.exp(np.where(valid, logp, -np.inf))
    return np.cumsum(pmf, axis=1), np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]


def count_bounds(
    seen: Int[np.ndarray, " head"], sample: int, population: int, alpha: float
) -> tuple[Int[np.ndarray, " head"], Int[np.ndarray, " head"]]:
    """Exact one-sided hypergeometric bounds on a population count ``K`` (``0..population``) from
    ``seen`` successes in a sample without replacement of ``sample``: the smallest ``K`` with
    ``P(X >= seen | K) > alpha`` and the largest with ``P(X <= seen | K) > alpha`` (each misses the
    true ``K`` with probability at most ``alpha``). A full sample returns ``seen`` itself."""
    seen = np.asarray(seen, dtype=np.int64)
    if sample >= population:
        return seen.copy(), seen.copy()
    if sample == 0:
        return np.zeros_like(seen), np.full_like(seen, population)
    cdf, sf = _tails(population, sample)
    lo = np.argmax(sf[:, seen].T > alpha, axis=1)  # P(X >= seen | K) rises with K
    hi = population - np.argmax((cdf[:, seen].T > alpha)[:, ::-1], axis=1)  # P(X <= seen | K) falls with K
    return lo.astype(np.int64), hi.astype(np.int64)


def racing_level(n_heads: int, n_batches: int, delta: float) -> float:
    """The level of each one-sided bound of a race over ``n_heads`` heads and ``n_batches`` batch
    ends (module docstring): four bounds per head at every batch before the last share ``delta``."""
    return float(delta) / (4 * n_heads * max(1, n_batches - 1))


def gain_bounds(
    fixes: Int[np.ndarray, " head"], breaks: Int[np.ndarray, " head"], seen0: int, seen1: int, n0: int, n1: int,
    alpha: float,
) -> tuple[Float[np.ndarray, " head"], Float[np.ndarray, " head"]]:
    """Interval ``(lo, hi)`` on each head's exact gain ``(K+ - K-) / n`` from ``fixes`` seen among
    ``seen0`` of the ``n0`` intact-wrong examples and ``breaks`` among ``seen1`` of the ``n1``
    intact-right ones (:func:`count_bounds`, each side at level ``alpha``)."""
    n = n0 + n1
    f_lo, f_hi = count_bounds(fixes, seen0, n0, alpha)
    b_lo, b_hi = count_bounds(breaks, seen1, n1, alpha)
    return (f_lo - b_hi) / n, (f_hi - b_lo) / n


@dataclass
class RacingOutcome:
    """What a race did: ``scores`` ``[layer, head]`` (see the module docstring), ``pool`` (the
    race's pool, best first), ``seen`` ``[layer, head]`` (examples each head was evaluated on),
    ``status`` (``"in"``, ``"out"`` or ``"open"``: ranked at the end), the batch ends, and the
    head-set x example evaluations it made against exact stage 1's."""

    scores: Float[Tensor, "layer head"]
    pool: list[Head]
    seen: Int[Tensor, "layer head"]
    status: list[str]
    ends: list[int]
    evaluations: int
    exact_evaluations: int
    options: RacingOptions = field(default_factory=RacingOptions)

    @property
    def saved(self) -> float:
        """Fraction of exact stage 1's head x example evaluations the race did not make."""
        return 1.0 - self.evaluations / self.exact_evaluations if self.exact_evaluations else 0.0

    def record(self) -> dict:
        """A JSON summary (for a run directory's events or a benchmark)."""
        return {
            "delta": self.options.delta, "margin": self.options.margin, "seed": self.options.seed,
            "ends": self.ends, "evaluations": self.evaluations, "exact_evaluations": self.exact_evaluations,
            "saved": self.saved, "pool": [str(h) for h in self.pool],
            "seen": self.seen.tolist(), "status": self.status,
        }


@dataclass
class _Race:
    """The race's state: per-head counts of fixes and breaks, examples seen, bounds and status."""

    n0: int
    n1: int
    fixes: np.ndarray
    breaks: np.ndarray
    seen0: np.ndarray
    seen1: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    status: np.ndarray  # 0 open, 1 in, -1 out

    @classmethod
    def start(cls, n0: int, n1: int, total: int) -> "_Race":
        z = lambda: np.zeros(total, dtype=np.int64)  # noqa: E731
        n = n0 + n1
        return cls(n0, n1, z(), z(), z(), z(), np.full(total, -n1 / n), np.full(total, n0 / n), z())

    def estimate(self) -> np.ndarray:
        """Gain on the examples seen, scaled to D_dist's strata (unbiased for the exact score)."""
        n = self.n0 + self.n1
        f = np.where(self.seen0 > 0, self.fixes / np.maximum(self.seen0, 1), 0.0) * self.n0
        b = np.where(self.seen1 > 0, self.breaks / np.maximum(self.seen1, 1), 0.0) * self.n1
        return (f - b) / n

    def bound(self, heads: np.ndarray, alpha: float) -> None:
        """New intervals for ``heads`` (all seen on the same examples)."""
        s0, s1 = int(self.seen0[heads[0]]), int(self.seen1[heads[0]])
        self.lo[heads], self.hi[heads] = gain_bounds(self.fixes[heads], self.breaks[heads], s0, s1, self.n0, self.n1, alpha)

    def decide(self, pool_size: int, margin: float) -> None:
        """Put out every open head that ``pool_size`` heads surely beat (less ``margin``); put in
        every open head that surely beats all but ``pool_size - 1`` others (less ``margin``)."""
        total = len(self.status)
        order_lo = np.sort(self.lo)
        order_hi = np.sort(self.hi)
        open_ = np.flatnonzero(self.status == 0)
        for h in open_[np.argsort(self.hi[open_], kind="stable")]:  # the worst first: the pool never empties
            # other heads with lo > hi[h] - margin, and with hi < lo[h] + margin (h itself counted out)
            self_counts = bool(self.lo[h] > self.hi[h] - margin)
            above = total - np.searchsorted(order_lo, self.hi[h] - margin, side="right") - self_counts
            below = np.searchsorted(order_hi, self.lo[h] + margin, side="left") - self_counts
            if above >= pool_size and int((self.status != -1).sum()) > pool_size:
                self.status[h] = -1
            elif below >= total - pool_size:
                self.status[h] = 1


def racing_scores(
    oracle: Oracle, pool_size: int, options: RacingOptions = RacingOptions(), *, chunk: int = 64, progress: bool = False
) -> RacingOutcome:
    """Race every head of ``oracle`` for a pool of ``pool_size`` on D_dist (module docstring)."""
    options.validate()
    if pool_size < 1:
        raise ValueError(f"pool size must be >= 1, got {pool_size}")
    L, H = oracle.n_layers, oracle.n_heads
    total = L * H
    intact = call_oracle(oracle, "dist", [HeadSet()], "intact")[0]
    n = int(intact.shape[0])
    ends = racing_schedule(n, options)
    alpha = racing_level(total, len(ends), options.delta)
    race = _Race.start(int((~intact).sum()), int(intact.sum()), total)
    heads = [HeadSet([Head(i // H, i % H)]) for i in range(total)]
    evaluations, start = 0, 0
    for stop in ends:
        open_ = np.flatnonzero(race.status == 0)
        if len(open_) == 0:
            break
        name = subsplit(options.seed, start, stop)
        base = intact[subsplit_indices(name, n)].numpy()
        correct = evaluate_chunked(oracle, name, [heads[i] for i in open_], "stage1", chunk, progress).numpy()
        evaluations += correct.size
        race.fixes[open_] += (correct & ~base).sum(1)
        race.breaks[open_] += (~correct & base).sum(1)
        race.seen0[open_] += int((~base).sum())
        race.seen1[open_] += int(base.sum())
        race.bound(open_, alpha)
        race.decide(pool_size, float(options.margin))
        start = stop
    return _outcome(race, L, H, pool_size, ends, evaluations, n, options)


def _outcome(
    race: _Race, L: int, H: int, pool_size: int, ends: list[int], evaluations: int, n: int, options: RacingOptions
) -> RacingOutcome:
    """The pool (in, then open heads by estimate, ties by index) and scores consistent with it."""
    est = np.clip(race.estimate(), race.lo, race.hi)
    total = L * H
    rank = lambda idx: sorted(idx, key=lambda i: (-est[i], i))  # noqa: E731
    chosen = rank(np.flatnonzero(race.status == 1).tolist())
    chosen += rank(np.flatnonzero(race.status == 0).tolist())[: max(0, pool_size - len(chosen))]
    pool = rank(chosen[:pool_size])
    scores = est.copy()
    if len(pool) < total:
        floor = min(est[i] for i in pool)
        rest = np.setdiff1d(np.arange(total), pool)
        scores[rest] = np.minimum(scores[rest], np.nextafter(floor, -np.inf))
    status = np.where(race.status == 1, "in", np.where(race.status == -1, "out", "open"))
    seen = torch.from_numpy(race.seen0 + race.seen1).reshape(L, H)
    return RacingOutcome(
        torch.from_numpy(scores).reshape(L, H), [Head(i // H, i % H) for i in pool], seen,
        status.tolist(), ends, evaluations, total * n, options,
    )


@dataclass(frozen=True)
class RacingScorerOptions:
    """What a search's :class:`~cel_lens.config.SearchConfig` gives the racing scorer: the pool it
    races for and :class:`RacingOptions`' ``delta``, ``margin`` and ``seed``."""

    pool_size: Optional[int] = None
    delta: float = 0.05
    margin: float = 0.0
    seed: int = 0

    def racing(self) -> RacingOptions:
        """The race's own options."""
        return RacingOptions(delta=self.delta, margin=self.margin, seed=self.seed)


class RacingScorer(Scorer):
    """Exact single-head scoring on growing D_dist batches, heads stopped once they cannot change
    the pool (:func:`racing_scores`); the pool equals exact stage 1's with probability ``1 - delta``."""

    name = "racing"
    Options = RacingScorerOptions

    @classmethod
    def manifest_options(cls, config: Any) -> dict[str, Any]:
        return {"racing": {"delta": config.delta, "margin": config.margin}}

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        return Cost(n_layers * n_heads, "every head alone on growing batches, at most as exact; heads ruled out "
                    "stop early", bound=True)

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        if oracle is None:
            raise ValueError("the 'racing' scorer needs oracle=...")
        if self.options.pool_size is None:
            raise ValueError("the 'racing' scorer needs pool_size= (the pool it races for)")
        outcome = racing_scores(oracle, self.options.pool_size, self.options.racing(), progress=progress)
        return Stage1Scores(outcome.scores, DIST_SPLIT, self.name)

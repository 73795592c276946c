"""Statistics for a held-out ablation gain: paired bootstrap CI, exact McNemar test, random-subset
null, and intervals for a single accuracy.

Every function takes per-example correctness vectors (``Bool[Tensor, " example"]``, or anything
``numpy.asarray`` accepts) of the *same* examples, so comparisons are paired: the intact and the
ablated model answer the same questions, and the per-example pairing removes the between-example
variance that an unpaired comparison would carry.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterable, Literal, Optional, Sequence, Union

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike

__all__ = [
    "paired_bootstrap_ci",
    "mcnemar_exact",
    "accuracy_interval",
    "wilson_interval",
    "count_head_sets",
    "random_head_sets",
    "random_subset_null",
    "null_p_value",
    "null_min_p",
    "null_fraction",
    "NullDistribution",
]

ArrayLike = Union[Tensor, np.ndarray, Sequence[Any]]


def _as_vector(x: ArrayLike, name: str) -> np.ndarray:
    """A 1-D float64 array from a tensor/array/list (bools become 0/1)."""
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D per-example vector, got shape {arr.shape}")
    return arr


def _paired(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    va, vb = _as_vector(a, "correct_a"), _as_vector(b, "correct_b")
    if va.shape != vb.shape:
        raise ValueError(f"paired vectors differ in length: {va.shape[0]} vs {vb.shape[0]}")
    if va.shape[0] == 0:
        raise ValueError("paired vectors are empty")
    return va, vb


def paired_bootstrap_ci(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    n_boot: int = 10000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap ``(low, high)`` interval for ``mean(b) - mean(a)`` at level ``1 - alpha``.

    Meaning: examples are resampled with replacement (pairs kept together), the difference of
    mean accuracies is recomputed for each of ``n_boot`` resamples, and the ``alpha/2`` and
    ``1 - alpha/2`` quantiles of those differences are returned. With ``a`` = intact and ``b`` =
    ablated this is a CI for the gain Δ. Assumptions: examples are i.i.d. draws from the task's
    distribution and the model is deterministic given the example (so the only randomness is which
    examples were drawn); the percentile interval is approximate and can under-cover slightly for
    small ``n`` or gains near the edges (all pairs concordant gives the degenerate interval
    ``[Δ, Δ]``). Vectorized over resamples in chunks; deterministic given ``seed``.
    """
    va, vb = _paired(correct_a, correct_b)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    diff = vb - va
    n = diff.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 4_000_000 // n))  # ~32 MB of indices per chunk
    means = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike) -> float:
    """Two-sided exact McNemar p-value for "a and b are equally accurate on these examples".

    Only discordant pairs carry information: ``n01`` = examples ``a`` gets right and ``b`` wrong,
    ``n10`` the reverse. Under the null each discordant pair is equally likely to go either way,
    so ``min(n01, n10) ~ Binomial(n01 + n10, 1/2)``; the p-value is twice the lower tail, capped at
    1 (the central, doubled-tail convention, equal to ``scipy.stats.binomtest(...).pvalue`` for
    p = 1/2 since that distribution is symmetric). No discordant pairs gives 1. Computed in exact
    rational arithmetic. Assumes paired binary outcomes, pairs independent of each other.
    """
    va, vb = _paired(correct_a, correct_b)
    for name, v in (("correct_a", va), ("correct_b", vb)):
        if not np.isin(v, (0.0, 1.0)).all():
            raise ValueError(f"{name} must be binary (bool or 0/1) for McNemar's test")
    n01 = int(((va == 1) & (vb == 0)).sum())
    n10 = int(((va == 0) & (vb == 1)).sum())
    n = n01 + n10
    if n == 0:
        return 1.0
    lo = min(n01, n10)
    tail = Fraction(sum(math.comb(n, i) for i in range(lo + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def accuracy_interval(
    correct: Union[ArrayLike, int],
    n: int | None = None,
    alpha: float = 0.05,
    method: Literal["wilson", "clopper-pearson"] = "wilson",
) -> tuple[float, float]:
    """``(low, high)`` interval at level ``1 - alpha`` for one accuracy (a binomial proportion).

    Pass a correctness vector, or a count ``correct`` with the number of examples ``n``. ``wilson``
    is the score interval (good coverage, never outside [0, 1]); ``clopper-pearson`` inverts exact
    binomial tests (conservative: coverage at least ``1 - alpha``). Assumes examples are i.i.d.
    draws and each is scored right/wrong.
    """
    if n is None:
        v = _as_vector(correct, "correct")  # type: ignore[arg-type]
        k, n = int(v.sum()), int(v.shape[0])
    else:
        k = int(correct)  # type: ignore[arg-type]
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= correct <= n and n > 0, got correct={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    from scipy import stats as _st

    if method == "wilson":
        return wilson_interval(k, n, alpha)
    if method == "clopper-pearson":
        low = 0.0 if k == 0 else float(_st.beta.ppf(alpha / 2, k, n - k + 1))
        high = 1.0 if k == n else float(_st.beta.ppf(1 - alpha / 2, k + 1, n - k))
        return low, high
    raise ValueError(f"unknown method {method!r}; choose 'wilson' or 'clopper-pearson'")


def wilson_interval(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score ``(low, high)`` interval at level ``1 - alpha`` for ``successes`` out of ``n``.

    The interval inverts the normal-approximation score test, ``|p̂ - p| ≤ z·sqrt(p(1 - p)/n)``
    with ``z`` the ``1 - alpha/2`` normal quantile, so unlike the plain Wald interval it keeps good
    coverage near 0 and 1 and never leaves ``[0, 1]``; the ends are exactly 0 when
    ``successes = 0`` and exactly 1 when ``successes = n``. It is the one Wilson interval of the
    package (:func:`accuracy_interval` and the theory lab both use it). Assumes ``n`` independent
    Bernoulli trials with a common success probability.
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got successes={successes}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    from scipy.special import ndtri

    z = float(ndtri(1 - alpha / 2))
    phat = successes / n
    denom = 1 + z * z / n
    center = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


# -- random-subset null ------------------------------------------------------------------------

#: Below this many eligible head sets the null's draw enumerates them all and samples indices
#: (exact and fast); above it, it draws sets and rejects repeats (rare when sets far outnumber R).
_ENUMERATE_LIMIT = 200_000


def _check_null_args(total: int, size: int, R: int) -> None:
    if not 0 <= size <= total:
        raise ValueError(f"size must lie in 0..{total}, got {size}")
    if R < 0:
        raise ValueError(f"R must be >= 0, got {R}")


def _excluded(exclude: Iterable[HeadsLike], size: int) -> set[HeadSet]:
    return {hs for hs in (HeadSet.parse(e) for e in exclude) if len(hs) == size}


def count_head_sets(n_layers: int, n_heads: int, size: int, exclude: Iterable[HeadsLike] = ()) -> int:
    """How many distinct sets of ``size`` heads a model has, leaving out those in ``exclude``."""
    total = n_layers * n_heads
    _check_null_args(total, size, 0)
    return math.comb(total, size) - len(_excluded(exclude, size))


def random_head_sets(
    n_layers: int, n_heads: int, size: int, R: int, seed: int, *, exclude: Iterable[HeadsLike] = ()
) -> list[HeadSet]:
    """``R`` *distinct* head sets of ``size`` distinct heads each, drawn uniformly without
    replacement from all sets of the model's ``n_layers*n_heads`` heads except those in ``exclude``
    (the selected set: it is not a random competitor of itself). When at most ``R`` such sets exist,
    all of them, in canonical order (the null is then exact). Deterministic given ``seed``."""
    total = n_layers * n_heads
    _check_null_args(total, size, R)
    banned = _excluded(exclude, size)
    eligible = math.comb(total, size) - len(banned)
    heads = [Head(i // n_heads, i % n_heads) for i in range(total)]
    if eligible <= R or eligible <= _ENUMERATE_LIMIT:
        every = [hs for hs in (HeadSet(c) for c in itertools.combinations(heads, size)) if hs not in banned]
        if eligible <= R:
            return every
        pick = np.random.default_rng(seed).choice(eligible, size=R, replace=False)
        return [every[int(i)] for i in pick]
    rng = np.random.default_rng(seed)
    seen: set[HeadSet] = set()
    sets: list[HeadSet] = []
    while len(sets) < R:
        hs = HeadSet(heads[int(i)] for i in rng.choice(total, size=size, replace=False))
        if hs not in seen and hs not in banned:
            seen.add(hs)
            sets.append(hs)
    return sets


def null_p_value(null_gains: Union[ArrayLike, Sequence[float]], observed: float) -> Optional[float]:
    """Monte Carlo (or, for an exhaustive null, exact) p-value ``(1 + b) / (1 + R)``, where ``b`` of
    the ``R`` null gains are at least ``observed``: valid when the selected set's gain is exchangeable
    with the random sets' under the null (it was chosen without the test split). ``None`` when
    ``R = 0``. Its smallest possible value is ``1 / (1 + R)`` (:func:`null_min_p`)."""
    g = _as_vector(null_gains, "null_gains") if len(null_gains) else np.zeros(0)
    if g.shape[0] == 0:
        return None
    # compare with a tolerance: gains are differences of k/n accuracies, equal values must tie
    b = int((g >= observed - 1e-12).sum())
    return (1 + b) / (1 + g.shape[0])


def null_min_p(R: int) -> Optional[float]:
    """The smallest p-value a null of ``R`` sets can give, ``1 / (1 + R)`` (``None`` for ``R = 0``)."""
    return 1.0 / (1 + R) if R > 0 else None


@dataclass(frozen=True)
class NullDistribution:
    """Gains of random head sets: ``gains[r] = acc(head_sets[r]) - acc(intact)`` on one split.

    ``exhaustive``: the sets are every eligible set (the null is exact, not sampled)."""

    head_sets: tuple[HeadSet, ...]
    gains: Float[Tensor, " R"]
    exhaustive: bool = False

    def fraction_at_least(self, observed: float) -> float:
        """Fraction of the null gains ``>= observed`` (see :func:`null_fraction`)."""
        return null_fraction(self.gains, observed)

    def p_value(self, observed: float) -> Optional[float]:
        """``(1 + b) / (1 + R)`` (:func:`null_p_value`)."""
        return null_p_value(self.gains, observed)

    @property
    def min_p(self) -> Optional[float]:
        """The smallest p-value this null can give, ``1 / (1 + R)``."""
        return null_min_p(len(self.head_sets))


def null_fraction(null_gains: Union[ArrayLike, Sequence[float]], observed: float) -> float:
    """Fraction of random-subset gains at least as large as the observed gain (``nan`` for an
    empty null).

    Descriptive only: as a p-value it can be 0 and ignores that a null of ``R`` sets cannot show
    anything below ``1 / (1 + R)``; use :func:`null_p_value` for the test.
    """
    g = _as_vector(null_gains, "null_gains") if len(null_gains) else np.zeros(0)
    if g.shape[0] == 0:
        return float("nan")
    return float((g >= observed - 1e-12).mean())


OracleOrFn = Callable[[Sequence[HeadSet]], Bool[Tensor, "variant example"]]


def random_subset_null(
    oracle: OracleOrFn,
    n_layers: int,
    n_heads: int,
    size: int,
    R: int,
    seed: int,
    *,
    exclude: Iterable[HeadsLike] = (),
    intact: Bool[Tensor, " example"] | None = None,
    chunk: int = 32,
) -> NullDistribution:
    """Gains of ``R`` random head sets of ``size`` heads (see :func:`random_head_sets`: distinct,
    none in ``exclude``, every eligible set when at most ``R`` exist) on one split.

    ``oracle`` is a callable ``head_sets -> Bool[variant, example]`` on that split (an oracle's
    ``lambda sets: oracle.evaluate("test", sets)``). ``intact`` is the intact model's correctness on that
    split (evaluated when omitted). Sets are evaluated ``chunk`` at a time. The null answers "is the
    gain special to the selected heads, or would ablating any ``size`` heads do as well?".
    """
    if not callable(oracle):
        raise TypeError("evaluate must be callable(head_sets) -> Bool[variant, example]")
    fn = oracle
    exclude = list(exclude)
    sets = random_head_sets(n_layers, n_heads, size, R, seed, exclude=exclude)
    exhaustive = len(sets) == count_head_sets(n_layers, n_heads, size, exclude)
    if not sets:
        return NullDistribution((), torch.zeros(0, dtype=torch.float64), exhaustive)
    if intact is None:
        intact = fn([HeadSet()])[0]
    base, n = int(intact.sum()), int(intact.shape[0])
    gains, step = [], max(chunk, 1)
    for start in range(0, len(sets), step):
        correct = fn(sets[start : start + step])
        # (count - count) / n: exact integers, one rounding, so equal gains compare equal
        gains.append((correct.to(torch.int64).sum(1) - base).to(torch.float64) / n)
    return NullDistribution(tuple(sets), torch.cat(gains), exhaustive)


# -- multiple comparisons ----------------------------------------------------------------------


def holm_adjust(p_values: Union[ArrayLike, Sequence[float]]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values, in the order given (a grid's McNemar p-values, one per
    model-task pair).

    Sorted ascending, the ``i``-th smallest of ``m`` p-values (``i = 1..m``) is adjusted to
    ``max over j <= i of min(1, (m - j + 1) p_(j))``: rejecting every hypothesis whose adjusted p is
    at most ``alpha`` controls the family-wise error rate at ``alpha`` under any dependence between
    the tests, and is never less powerful than plain Bonferroni (``min(1, m p)``). NaN entries (a
    pair without a result) are left out of the family and stay NaN.
    """
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    present = ~np.isnan(p)
    if ((p[present] < 0) | (p[present] > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(present)
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


__all__ += ["holm_adjust"]


# the one decision rule (one-sided exact McNemar), its bounds and its power: cel_lens.stats.decision
from cel_lens.stats.decision import (  # noqa: E402
    gain_bounds,
    gain_bounds_array,
    minimum_detectable_effect,
    sign_test_bound,
    sign_test_p,
    sign_test_power,
    sign_test_upper,
)

__all__ += ["sign_test_p", "sign_test_bound", "sign_test_upper", "gain_bounds", "gain_bounds_array", "sign_test_power",
            "minimum_detectable_effect"]

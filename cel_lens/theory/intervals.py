"""The 95% intervals the theory table reports, one kind per kind of quantity.

Proportions get the Wilson score interval (:func:`cel_lens.stats.wilson_interval`, re-exported
here), means a Student-t interval, medians a distribution-free order-statistic interval, and
fitted power-law exponents a bootstrap interval.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from cel_lens.stats import wilson_interval

__all__ = ["wilson_interval", "mean_interval", "median_interval", "loglog_slope"]


def mean_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student-t interval for the mean of ``x``."""
    from scipy.special import stdtrit

    x = np.asarray(x, dtype=np.float64)
    n = x.size
    mean = float(x.mean()) if n else float("nan")
    if n < 2:
        return (mean, float("nan"), float("nan"))
    half = float(stdtrit(n - 1, 0.5 + level / 2) * x.std(ddof=1) / math.sqrt(n))
    return (mean, mean - half, mean + half)


def median_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """``(median, low, high)``: distribution-free order-statistic interval for the median.

    Uses order statistics ``x_(j) ≤ median ≤ x_(n-j+1)`` with the largest ``j`` such that
    ``P(Bin(n, ½) ≤ j-1) ≤ (1-level)/2``, so coverage is at least ``level``.
    """
    from scipy.special import bdtr

    x = np.sort(np.asarray(x, dtype=np.float64))
    n = x.size
    if n == 0:
        return (float("nan"), float("nan"), float("nan"))
    cdf = bdtr(np.arange(n + 1), n, 0.5)  # P(Bin(n, 1/2) <= k)
    j = int((cdf <= (1 - level) / 2).sum())
    if j == 0:
        return (float(np.median(x)), float(x[0]), float(x[-1]))
    return (float(np.median(x)), float(x[j - 1]), float(x[n - j]))


def loglog_slope(alphas: Sequence[float], samples: Sequence[np.ndarray], rng: np.random.Generator, boots: int = 300) -> tuple[float, float, float]:
    """Slope of ``log median(sample)`` against ``log α``, with a bootstrap 95% interval.

    A quantity of order ``α^p`` has slope ``p``: this is how the α sweep measures the orders
    the theorems state. The interval resamples each α's sample ``boots`` times with ``rng``.
    """
    la = np.log(np.asarray(alphas, dtype=np.float64))

    def slope(meds: np.ndarray) -> float:
        """Least-squares slope of ``log meds`` on ``log α``."""
        return float(np.polyfit(la, np.log(meds), 1)[0])

    point = slope(np.array([np.median(s) for s in samples]))
    boot = np.empty(boots)
    for i in range(boots):
        boot[i] = slope(np.array([np.median(s[rng.integers(0, s.size, s.size)]) for s in samples]))
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return point, float(lo), float(hi)

"""The intervals the theory table reports."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from cel_lens import theory as th


def test_wilson_interval_matches_scipy():
    for k, n in [(0, 10), (3, 10), (444, 1000), (1000, 1000)]:
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        lo, hi = th.wilson_interval(k, n)
        assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)


def test_median_interval_covers_the_median():
    rng = np.random.default_rng(8)
    covered = 0
    for _ in range(200):
        x = rng.exponential(size=101)
        _, lo, hi = th.median_interval(x)
        covered += lo <= math.log(2) <= hi
    assert covered >= 180  # nominal 95% (at least), binomial slack

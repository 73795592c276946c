"""A hand-made search result the report tests draw: small enough that its ranking, marked cells and
null band are known by hand."""

from __future__ import annotations

import pytest

SCORES = [
    [0.010, -0.020, 0.000],
    [0.050, 0.030, -0.040],
    [-0.010, 0.040, 0.020],
    [0.000, -0.060, 0.035],
]
POOL = ["L1H0", "L2H1", "L3H2", "L1H1"]
SUBSETS = [  # deliberately not in rank order; "size" as a real Result's subsets have it
    {"heads": "L1H0", "size": 1, "dist_acc": 0.60, "dist_gain": 0.05, "score_sum": 0.05, "test_gain_posthoc": 0.02},
    {"heads": "L2H1", "size": 1, "dist_acc": 0.58, "dist_gain": 0.03, "score_sum": 0.04, "test_gain_posthoc": 0.01},
    {"heads": "L3H2", "size": 1, "dist_acc": 0.57, "dist_gain": 0.02, "score_sum": 0.035, "test_gain_posthoc": -0.01},
    {"heads": "L1H1", "size": 1, "dist_acc": 0.56, "dist_gain": 0.01, "score_sum": 0.03, "test_gain_posthoc": 0.00},
    {"heads": "L1H0+L2H1", "size": 2, "dist_acc": 0.64, "dist_gain": 0.09, "score_sum": 0.09, "test_gain_posthoc": 0.045},
    {"heads": "L1H0+L3H2", "size": 2, "dist_acc": 0.60, "dist_gain": 0.05, "score_sum": 0.085, "test_gain_posthoc": 0.03},
    {"heads": "L2H1+L3H2", "size": 2, "dist_acc": 0.62, "dist_gain": 0.07, "score_sum": 0.075, "test_gain_posthoc": 0.02},
    {"heads": "L1H1+L1H0", "size": 2, "dist_acc": 0.55, "dist_gain": 0.00, "score_sum": 0.08, "test_gain_posthoc": None},
]
# by hand: dist_acc descending; the 0.60 tie goes to the smaller subset (L1H0 before L1H0+L3H2)
EXPECTED_RANK = ["L1H0+L2H1", "L2H1+L3H2", "L1H0", "L1H0+L3H2", "L2H1", "L3H2", "L1H1", "L1H0+L1H1"]
NULL = [-0.03, -0.02, -0.02, -0.01, -0.01, 0.0, 0.0, 0.01, 0.01, 0.02]


class HandResult:
    """The hand-made result's parts, and :meth:`make` for a fresh result dict."""

    scores = SCORES
    pool = POOL
    subsets = SUBSETS
    expected_rank = EXPECTED_RANK
    null = NULL

    def make(self) -> dict:
        return dict(
            heads="L2H1+L1H0", dist_acc_intact=0.55, dist_acc_ablated=0.64, dist_gain=0.09,
            test_acc_intact=0.50, test_acc_ablated=0.545, gain=0.045, ci_low=0.01, ci_high=0.08, p_value=0.02,
            null_gains=NULL, null_p=0.0, scores=SCORES, scorer="exact", pool=POOL, subsets=SUBSETS, k=2,
            pool_size=4, n_dist=100, n_test=200, seed=0, n_layers=4, n_heads=3,
        )


@pytest.fixture
def hand() -> HandResult:
    """The hand-made result (``hand.make()``) and its parts (``hand.scores``, ``hand.expected_rank``, ...)."""
    return HandResult()


@pytest.fixture
def trace():
    """``trace(fig, part)``: the one trace of ``fig`` whose name contains ``part``."""

    def find(fig, name_part: str):
        found = [t for t in fig.data if t.name and name_part in t.name]
        assert len(found) == 1, [t.name for t in fig.data]
        return found[0]

    return find

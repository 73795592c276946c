"""Discovery vs test: the points are the subsets' gains, the band is the null's 95% range."""

from __future__ import annotations

import numpy as np
import pytest

from cel_lens.heads import HeadSet
from cel_lens.report.transfer import plot_discovery_vs_test


def test_discovery_vs_test_points_and_null_band(hand, trace):
    fig = plot_discovery_vs_test(hand.make())
    others = trace(fig, "pool subsets")
    sel = trace(fig, "selected")
    assert (sel.x[0], sel.y[0]) == (0.09, 0.045)
    got = sorted(zip(others.customdata, others.x, others.y))
    want = sorted(
        (str(HeadSet.parse(s["heads"])), s["dist_gain"], s["test_gain_posthoc"])
        for s in hand.subsets
        if s["test_gain_posthoc"] is not None and s["heads"] != "L1H0+L2H1"
    )
    assert got == want  # subsets without a post-hoc test gain are left out
    band = trace(fig, "95% range")
    assert min(band.y) == pytest.approx(np.quantile(hand.null, 0.025))
    assert max(band.y) == pytest.approx(np.quantile(hand.null, 0.975))
    assert "Spearman" in fig.layout.title.text

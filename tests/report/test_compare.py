"""Two runs compared: overlaps by hand, the rank correlation against scipy, one colour scale only
when the scores share a unit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from cel_lens.report.compare import compare_runs, format_comparison, plot_compare


def _other(hand, **changes):
    return dict(hand.make(), **changes)


def test_overlaps_by_hand(hand):
    a = hand.make()  # S-hat L1H0+L2H1, pool L1H0 L2H1 L3H2 L1H1
    b = _other(hand, heads="L2H1+L3H2", pool=["L2H1", "L3H2", "L0H0"])
    cmp = compare_runs(a, b, labels=("a", "b"))
    assert cmp["selected"] == {"both": ["L2H1"], "only_a": ["L1H0"], "only_b": ["L3H2"], "jaccard": pytest.approx(1 / 3)}
    assert cmp["pool"]["both"] == ["L2H1", "L3H2"] and cmp["pool"]["only_a"] == ["L1H0", "L1H1"]
    assert cmp["pool"]["only_b"] == ["L0H0"] and cmp["pool"]["jaccard"] == pytest.approx(2 / 5)
    text = format_comparison(cmp)
    assert "selected: both L2H1; only a L1H0; only b L3H2 (Jaccard 0.33)" in text
    assert "pool: both L2H1, L3H2; only a L1H0, L1H1; only b L0H0 (Jaccard 0.40)" in text  # heads, not a head set


def test_rank_correlation_is_spearmans_and_needs_one_layout(hand):
    rng = np.random.default_rng(0)
    other = (np.asarray(hand.scores) + rng.normal(0, 0.02, (4, 3))).tolist()
    cmp = compare_runs(hand.make(), _other(hand, scores=other))
    want = spearmanr(np.ravel(hand.scores), np.ravel(other)).correlation
    assert cmp["score_rank_correlation"] == pytest.approx(want)
    assert compare_runs(hand.make(), _other(hand, scores=np.zeros((2, 6)).tolist()))["score_rank_correlation"] is None


def test_one_colour_scale_for_one_unit_two_otherwise(hand):
    same = plot_compare(hand.make(), _other(hand, scores=(np.asarray(hand.scores) * 2).tolist()))
    heat = [t for t in same.data if t.type == "heatmap"]
    assert len(heat) == 2 and heat[0].zmax == heat[1].zmax == pytest.approx(0.12)
    assert [t.showscale for t in heat] == [False, True]
    mixed = plot_compare(hand.make(), _other(hand, scorer="attribution"))
    heat = [t for t in mixed.data if t.type == "heatmap"]
    assert [t.showscale for t in heat] == [True, True] and "nats" in heat[1].colorbar.title.text
    assert heat[0].zmax == pytest.approx(0.06)

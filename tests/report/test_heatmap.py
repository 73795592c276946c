"""The gain heatmap's data equal the result it draws: scores, marked heads, ranked subsets, test gain."""

from __future__ import annotations

import numpy as np
import pytest

from cel_lens.heads import HeadSet
from cel_lens.report.data import ranked_subsets
from cel_lens.report.heatmap import plot_gain_heatmap
from cel_lens.report.style import SELECTED_COLOUR


def test_heatmap_values_are_the_scores_on_a_zero_centred_diverging_scale(hand):
    fig = plot_gain_heatmap(hand.make())
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 1
    assert np.array_equal(np.asarray(heat[0].z, dtype=float), np.asarray(hand.scores))
    assert heat[0].zmid == 0
    colours = [c[1] for c in heat[0].colorscale]
    assert colours[0] != colours[-1]  # two-ended
    assert "exact" in heat[0].hovertemplate
    assert heat[0].customdata[3][1].startswith("L3H1<br>gain: -6.00 pp")  # hover names the head at (layer 3, head 1)
    assert heat[0].customdata[1][0].startswith("L1H0 (selected Ŝ)") and "(pool)" in heat[0].customdata[3][2]


def test_marked_cells_are_exactly_the_pool_and_the_selected_heads(hand, trace):
    fig = plot_gain_heatmap(hand.make())
    pool = trace(fig, "candidate pool")
    sel = trace(fig, "selected")
    pool_cells = {(y, x) for x, y in zip(pool.x, pool.y)}
    sel_cells = {(y, x) for x, y in zip(sel.x, sel.y)}
    assert sel_cells == {(1, 0), (2, 1)}
    assert pool_cells == {(3, 2), (1, 1)}  # the pool minus the selected heads
    assert pool_cells | sel_cells == {(h.layer, h.head) for h in HeadSet.parse(hand.pool)}


def test_subsets_are_ranked_like_the_search_and_the_selected_is_highlighted(hand):
    assert [s["heads"] for s in ranked_subsets(hand.make())] == hand.expected_rank
    fig = plot_gain_heatmap(hand.make())
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    labels = [y.split(" ", 1)[1] for y in panel.y]
    assert labels == hand.expected_rank
    by_heads = {s["heads"]: s["dist_acc"] for s in hand.subsets}
    by_heads["L1H0+L1H1"] = by_heads.pop("L1H1+L1H0")
    assert list(panel.x) == [by_heads[h] for h in hand.expected_rank]
    colours = list(panel.marker.color)
    assert colours[0] == SELECTED_COLOUR and colours.count(SELECTED_COLOUR) == 1
    # the selected subset's test gain with its CI, in percentage points (the axis says pp, not %)
    gain = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x3"][0]
    assert gain.y[0] == pytest.approx(4.5)
    assert gain.error_y.array[0] == pytest.approx(8 - 4.5)
    assert gain.error_y.arrayminus[0] == pytest.approx(4.5 - 1)
    assert fig.layout.yaxis3.ticksuffix == " pp" and "%" not in fig.layout.yaxis3.tickformat
    assert "(pp)" in fig.layout.yaxis3.title.text


def test_max_subsets_keeps_the_selected_one(hand):
    fig = plot_gain_heatmap(hand.make(), max_subsets=3)
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert [y.split(" ", 1)[1] for y in panel.y] == hand.expected_rank[:3]


def test_title_and_test_gain_use_the_one_result_formatter(hand):
    """Figure text reads like ``cel-lens report``: :func:`cel_lens.selection.result.pp` and
    :func:`~cel_lens.selection.result.format_p`."""
    fig = plot_gain_heatmap(hand.make())
    assert fig.layout.title.text == (
        "Ŝ = L1H0+L2H1: test accuracy 50.00% -> 54.50%, gain +4.50 pp [+1.00 pp, +8.00 pp], p=0.02"
    )
    gain = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x3"][0]
    assert gain.x[0] == "+4.50 pp<br>[+1.00 pp,<br>+8.00 pp]"


def test_subset_panel_shows_selection_stability_and_says_selection_biased(hand):
    stability = {"n_resamples": 400, "selected": "L1H0+L2H1", "selected_frequency": 0.6,
                 "wins": [{"heads": "L1H0+L2H1", "frequency": 0.6}, {"heads": "L2H1+L3H2", "frequency": 0.4}]}
    fig = plot_gain_heatmap(dict(hand.make(), selection_stability=stability))
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert list(panel.text) == ["60%", "40%"] + ["0%"] * (len(hand.expected_rank) - 2)
    assert "selection-biased" in panel.hovertemplate and "resamples of D_dist" in panel.hovertemplate
    headings = [a.text for a in fig.layout.annotations if "subsets by discovery accuracy" in (a.text or "")]
    assert len(headings) == 1 and "selection-biased" in headings[0] and "400 resamples" in headings[0]
    # a result without stability (written before it existed): no numbers, still labelled biased
    plain = [t for t in plot_gain_heatmap(hand.make()).data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert plain.text is None and "selection-biased" in plain.hovertemplate


def _heat(fig):
    return [t for t in fig.data if t.type == "heatmap"][0]


def test_small_gains_get_colourbar_ticks_that_read_differently(hand):
    """Gains of a few hundredths of a point: every tick used to read "0.0%"."""
    tiny = dict(hand.make(), scores=(np.asarray(hand.scores) * 0.01).tolist())
    bar = _heat(plot_gain_heatmap(tiny)).colorbar
    labels = list(bar.ticktext)
    assert len(labels) >= 3 and len(set(labels)) == len(labels)
    assert "0" in labels and any(t.startswith("+0.0") for t in labels)
    assert "pp" in bar.title.text  # accuracy differences in percentage points
    values = list(bar.tickvals)
    assert max(values) <= 0.0006 + 1e-12 and min(values) >= -0.0006 - 1e-12


def test_axes_stay_on_the_grid_and_accuracy_never_goes_below_zero(hand):
    r = dict(hand.make(), dist_acc_intact=0.002,
             subsets=[dict(s, dist_acc=s["dist_acc"] / 100) for s in hand.subsets])
    fig = plot_gain_heatmap(r)
    assert list(fig.layout.xaxis.range) == [-0.5, 2.5]  # 3 heads: no tick at -1 or 3
    assert list(fig.layout.yaxis.range) == [3.5, -0.5]  # 4 layers, top to bottom
    assert fig.layout.xaxis.tick0 == 0 and fig.layout.yaxis.tick0 == 0
    low, high = fig.layout.xaxis2.range
    assert low == 0.0 and high < 0.01  # discovery accuracy: never below 0 %
    assert fig.layout.xaxis2.tickformat == ".1%"


def test_marks_outline_the_cells_instead_of_covering_them(hand):
    fig = plot_gain_heatmap(hand.make())
    marks = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x"]
    assert marks and all(t.marker.symbol.endswith("-open") for t in marks)


def test_attribution_scores_are_not_called_accuracy_gains(hand):
    fig = plot_gain_heatmap(dict(hand.make(), scorer="attribution"))
    heat = _heat(fig)
    assert "nats" in heat.colorbar.title.text and "accuracy" not in heat.colorbar.title.text
    assert "gain" not in heat.customdata[0][0] and "nats" in heat.customdata[0][0]
    headings = [a.text for a in fig.layout.annotations if "layers x" in (a.text or "")]
    assert headings == ["<b>stage-1 scores (4 layers x 3 heads)</b>"]
    exact = [a.text for a in plot_gain_heatmap(hand.make()).layout.annotations if "layers x" in (a.text or "")]
    assert exact == ["<b>stage-1 gains (4 layers x 3 heads)</b>"]


def test_small_grids_print_their_values_and_large_ones_do_not(hand):
    heat = _heat(plot_gain_heatmap(hand.make()))
    assert heat.texttemplate == "%{text}"
    assert heat.text[1][0] == "+5.0" and heat.text[3][1] == "-6.0"
    assert heat.text[0][2] == "0"
    rng = np.random.default_rng(0)
    big = dict(hand.make(), scores=(rng.normal(0, 0.002, (28, 24))).tolist(), pool=[], subsets=hand.subsets[:1],
               heads="L1H0", n_layers=28, n_heads=24)
    assert _heat(plot_gain_heatmap(big)).text is None


def test_an_unfinished_run_draws_what_it_recorded(hand):
    """A run without result.json had no figure; its recorded stage-1 scores now make one."""
    scores = [[v if (l, h) < (2, 0) else float("nan") for h, v in enumerate(row)] for l, row in enumerate(hand.scores)]
    partial = dict(scores=scores, scorer="exact", pool=[], subsets=[], heads=None, n_layers=4, n_heads=3,
                   finished=False, state="stopped", progress={"status": "stage 1: 6 of 12 heads scored"})
    fig = plot_gain_heatmap(partial)
    heat = _heat(fig)
    assert heat.z[0][1] == -0.02 and heat.z[3][2] is None and heat.text[3][2] == ""
    assert "not scored yet" in heat.customdata[3][2]
    assert fig.layout.title.text == "unfinished run (stopped): stage 1: 6 of 12 heads scored"
    notes = {a.text for a in fig.layout.annotations}
    assert {"no subset evaluated yet", "not<br>measured<br>yet"} <= notes  # wrapped: clear of the tick labels
    empty = plot_gain_heatmap(dict(partial, scores=None))  # a scorer still running: the grid, blank
    assert all(v is None for row in _heat(empty).z for v in row)


def test_the_title_carries_the_warnings_and_one_layer_is_singular(hand):
    """"Not an enhancement" was in the text report but not the heatmap's title; a tie-break win read
    as a clear one; a one-layer model was "1 layers"."""
    r = hand.make()
    assert "not an enhancement" not in plot_gain_heatmap(r).layout.title.text  # a real discovery gain
    flat = dict(r, dist_gain=0.0, selection_stability={"n_resamples": 10, "selected": "L2H1+L1H0",
                                                                 "selected_frequency": 1.0, "selected_by_tie_break": 1.0,
                                                                 "identical_subsets": 20, "wins": []})
    fig = plot_gain_heatmap(flat)
    assert "not an enhancement" in fig.layout.title.text and "ties 20 other subset(s)" in fig.layout.title.text
    assert "NOT fixed before D_test" not in fig.layout.title.text
    unsealed = dict(r, selected_before_test=False, seal={"prior_test_reads": 5, "reads": [], "reason": "..."})
    assert "Ŝ NOT fixed before D_test: D_test was read 5 time(s)" in plot_gain_heatmap(unsealed).layout.title.text
    subset = {"heads": "L0H1", "size": 1, "dist_acc": 0.6, "dist_gain": 0.05, "score_sum": 0.02, "test_gain_posthoc": 0.01}
    one_layer = dict(r, scores=[hand.scores[0]], n_layers=1, heads="L0H1", pool=["L0H1"], subsets=[subset])
    texts = [a.text for a in plot_gain_heatmap(one_layer).layout.annotations]
    assert any("(1 layer x 3 heads)" in t for t in texts) and not any("1 layers" in t for t in texts)


def test_no_stability_share_is_shown_when_most_resamples_winners_are_unknown(hand):
    """The sealed BoolQ row: 906 of 1,000 resamples needed a pair never evaluated, so a share of them
    says nothing: no % is drawn; with a few unknown, the shares are of the resamples whose winner is known."""
    stability = {"method": "reselect", "n_resamples": 1000, "selected": "L1H0+L2H1", "selected_frequency": 0.059,
                 "upper": 0.664, "unknown": 605, "incomplete": 0.906,
                 "wins": [{"heads": "L1H0+L2H1", "frequency": 0.059}]}
    fig = plot_gain_heatmap(dict(hand.make(), selection_stability=stability))
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert "selected on" not in panel.hovertemplate and panel.text is None
    headings = [a.text for a in fig.layout.annotations if "subsets by discovery accuracy" in (a.text or "")]
    assert "no % shown: 906 of 1000 resamples' winners are not known" in headings[0]
    few = dict(stability, incomplete=0.2, unknown=100)
    fig = plot_gain_heatmap(dict(hand.make(), selection_stability=few))
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert "selected on %{customdata[3]:.0%} of bootstrap resamples of D_dist whose winner is known" in panel.hovertemplate
    assert panel.customdata[0][3] == pytest.approx(0.059 / 0.8)
    sure = dict(stability, incomplete=0.0, unknown=0, upper=0.059)
    panel = [t for t in plot_gain_heatmap(dict(hand.make(), selection_stability=sure)).data
             if t.type == "scatter" and t.xaxis == "x2"][0]
    assert "selected on %{customdata[3]:.0%}" in panel.hovertemplate

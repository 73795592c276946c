"""A grid's outputs from a hand-made table: every row (a failed one with its error), the side-effect
matrices as figures and text, the same bytes on every rebuild."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from cel_lens.stats import gain_bounds

from cel_lens.report.grid import grid_html, grid_markdown, write_grid_outputs
from cel_lens.report.grid_figures import ROW_HEADER, plot_grid_side_effects, plot_grid_summary, row_cells, short_model


def _row(model, task, heads, intact, ablated, p, p_holm, stability=None):
    return dict(
        model=model, task=task, status="ok", error=None, n_dist=100, n_test=200, dist_acc_intact=0.5,
        dist_acc_ablated=0.6, dist_gain=0.1, test_acc_intact=intact, test_acc_ablated=ablated,
        gain=ablated - intact, ci_low=ablated - intact - 0.02, ci_high=ablated - intact + 0.02, alpha=0.05,
        p_value=p, heads=heads, null_p=0.0, k=2, pool_size=4, scorer="exact", selection_stability=stability,
        run_dir=f"{model.replace('/', '-')}__{task}", p_holm=p_holm, selected_before_test=True,
    )


def _cell(source, target, heads, gain):
    return dict(ablated_for=source, evaluated_on=target, heads=heads, n=200, intact=0.5, ablated=0.5 + gain,
                gain=gain, ci_low=gain - 0.01, ci_high=gain + 0.01, p_value=0.03)


@pytest.fixture
def table():
    failed = dict(_row("two", "b", None, 0.0, 0.0, None, None), status="failed", error="RuntimeError: boom | x",
                  run_dir=None)
    failed.update({k: None for k in ("gain", "ci_low", "ci_high", "n_dist", "n_test", "test_acc_intact", "test_acc_ablated",
                                     "dist_acc_intact", "dist_acc_ablated", "dist_gain", "alpha", "null_p", "k",
                                     "pool_size", "scorer")})
    return {
        "grid": {"models": ["org/one", "two"], "tasks": {"org/one": ["a", "b"], "two": ["a", "b"]}, "config": {}},
        "rows": [
            _row("org/one", "a", "L1H0+L2H1", 0.50, 0.545, 0.02, 0.06, stability=0.5),
            _row("org/one", "b", "L0H2", 0.70, 0.72, 0.30, 0.30),
            _row("two", "a", "L3H2", 0.40, 0.50, 0.001, 0.003),
            failed,
        ],
        "holm": {"family": 3, "alpha": 0.05, "rejected": 1},
        "side_effects": {
            "org/one": {"tasks": ["a", "b"], "gain": [[0.045, -0.1], [0.02, 0.02]], "errors": {},
                        "cells": [_cell("a", "a", "L1H0+L2H1", 0.045), _cell("a", "b", "L1H0+L2H1", -0.1),
                                  _cell("b", "a", "L0H2", 0.02), _cell("b", "b", "L0H2", 0.02)]},
            "two": {"tasks": ["a", "b"], "gain": [[0.1, None], [None, None]], "errors": {"b": "RuntimeError: boom"},
                    "cells": [_cell("a", "a", "L3H2", 0.1)]},
        },
        "timings": {"grid wall time": {"seconds": 12.25, "calls": 1}, "load model/two": {"seconds": 3.5, "calls": 1}},
    }


def test_rows_as_text(table):
    ok, failed = row_cells(table["rows"][0]), row_cells(table["rows"][3])
    assert len(ok) == len(failed) == len(ROW_HEADER)
    assert ok == ["org/one", "a", "100", "200", "50.00%", "54.50%", "+4.50 pp [+2.50 pp, +6.50 pp]", "n/a", "0.02",
                  "0.06", "L1H0+L2H1", "50%"]
    assert failed[ROW_HEADER.index("Ŝ")] == "failed: RuntimeError: boom | x" and failed[4:9] == [""] * 5
    assert row_cells(table["rows"][0], short=True)[0] == "one" == short_model("org/one")
    assert row_cells(table["rows"][0], short=True)[6] == "+4.50 [+2.50, +6.50]"
    seal = ROW_HEADER.index("Ŝ")  # a row's seal: nothing when fixed, a warning when not, and never "fixed" by default
    assert row_cells({**table["rows"][0], "selected_before_test": False})[seal] == "L1H0+L2H1 (NOT fixed before D_test)"
    assert row_cells({**table["rows"][0], "selected_before_test": None})[seal].endswith("(not recorded whether fixed before D_test)")


def test_rows_show_the_calibrated_gain_beside_the_raw_one(table):
    column = ROW_HEADER.index("calibrated Δ (one-sided 95% bounds)")
    assert column == ROW_HEADER.index("Δ (95% CI)") + 1
    cal = {"applies": True, "answer_type": "multiple_choice", "gain_cal": 0.002, "ci_low_cal": -0.01, "ci_high_cal": 0.015,
           "survives": False, "gain_best": 0.01, "wins_cal": 3, "losses_cal": 1, "p_value_cal": 0.3125}
    row = {**table["rows"][0], "calibration": cal}
    low, high = gain_bounds(3, 1, row["n_test"])
    assert row_cells(row)[column] == f"+1.00 pp [{100 * low:+.2f} pp, {100 * high:+.2f} pp], not shown to survive"
    assert row_cells(row, short=True)[column] == f"+1.00 [{100 * low:+.2f}, {100 * high:+.2f}], not shown to survive"
    survived = {**row, "calibration": {**cal, "wins_cal": 9, "losses_cal": 0, "gain_best": 0.045, "survives": True}}
    assert row_cells(survived)[column].startswith("+4.50 pp [+") and row_cells(survived)[column].endswith(", survives")
    exact = {**row, "calibration": {"applies": False, "answer_type": "exact_match"}}
    assert row_cells(exact)[column] == "no fixed choices"
    assert "Calibrated Δ: calibrated accuracies give each model its best constant answer prior" in grid_markdown(table)


def test_markdown_has_every_row_the_side_effects_and_the_time(table):
    md = grid_markdown(table)
    lines = md.splitlines()
    pair_rows = [line for line in lines if line.startswith("| org/one") or line.startswith("| two")]
    assert len(pair_rows) == 4 and all(line.count(" | ") == len(ROW_HEADER) for line in pair_rows)
    assert "failed: RuntimeError: boom \\| x" in md  # escaped, the table keeps its columns
    assert "| Ŝ(a) = L1H0+L2H1 | +4.50 pp [+3.50 pp, +5.50 pp], p 0.03 | -10.00 pp [-11.00 pp, -9.00 pp], p 0.03 |" in md
    assert "- not measured on b: RuntimeError: boom" in md
    assert "| grid wall time | 12.2 | 1 |" in md and "(1 at ≤ 0.05)" in md


def test_side_effect_figure_holds_each_models_matrix(table):
    fig = plot_grid_side_effects(table)
    heat = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heat) == 2
    assert [list(r) for r in heat[0].z] == [[0.045, -0.1], [0.02, 0.02]]
    assert [list(r) for r in heat[1].z] == [[0.1, None]] and list(heat[1].y) == ["Ŝ(a)"]
    assert fig.layout.coloraxis.cmin == -0.1 and fig.layout.coloraxis.cmax == 0.1
    empty = dict(table, side_effects={m: dict(b, gain=[[None, None], [None, None]]) for m, b in table["side_effects"].items()})
    with pytest.raises(ValueError, match="no side-effect cell"):
        plot_grid_side_effects(empty)


def test_summary_figure_is_the_table_above_the_matrices(table):
    fig = plot_grid_summary(table)
    (tab,) = [t for t in fig.data if isinstance(t, go.Table)]
    assert list(tab.header.values) == [h.replace("Δ (", "Δ pp (") for h in ROW_HEADER]
    assert [list(col) for col in tab.cells.values] == [list(c) for c in zip(*[row_cells(r, short=True) for r in table["rows"]])]
    assert sum(isinstance(t, go.Heatmap) for t in fig.data) == 2


def test_html_is_deterministic_and_draws_every_finished_pairs_heatmap(table, hand):
    results = {r["run_dir"]: hand.make() for r in table["rows"] if r["status"] == "ok"}
    page = grid_html(table, results)
    assert page == grid_html(table, results)
    for name in results:
        assert f'id="heatmap-{name}"' in page
    assert 'id="side-effects"' in page and "<script src='plotly.min.js'>" in page
    assert "failed: RuntimeError: boom | x" in page and "<td class=err>" in page
    assert "https://" not in page.split("<body>")[0]  # nothing fetched from a network


def test_write_grid_outputs(table, hand, tmp_path):
    results = {table["rows"][0]["run_dir"]: hand.make()}
    written = write_grid_outputs(table, results, tmp_path, png=False)
    assert sorted(p.name for p in written) == ["plotly.min.js", "report.html", "table.json", "table.md"]
    assert json.loads((tmp_path / "table.json").read_text()) == table
    first = {p.name: p.read_bytes() for p in written}
    write_grid_outputs(table, results, tmp_path, png=False)
    assert {p.name: p.read_bytes() for p in written} == first


def test_the_seal_sentence_counts_only_recorded_seals_as_fixed():
    """A pair whose result never recorded the seal is neither counted as fixed nor as read first."""
    from cel_lens.report.grid import seal_sentence

    assert seal_sentence({"finished": 2, "unsealed": []}).startswith("In all 2 finished pairs")
    both = seal_sentence({"finished": 3, "unsealed": ["m × a"], "seal_not_recorded": ["m × b"]})
    assert both.startswith("Ŝ was fixed on D_dist before D_test was read in 1 of 3 finished pairs")
    assert "NOT in m × a" in both and "not recorded in m × b" in both

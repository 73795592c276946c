"""Figures of the theory lab."""

from __future__ import annotations

from cel_lens import theory as th


def test_theory_figures(table, tmp_path):
    paths = th.save_theory_figures(table, tmp_path, formats=("html",))
    assert sorted(p.name for p in paths) == ["theory_escape.html", "theory_trajectories.html"]
    assert all(p.stat().st_size > 1000 for p in paths)
    fig = th.plot_trajectories(table)
    assert len(fig.data) == 2 * 3 * 3  # two seeds, three features, three heads


def test_escape_log_axes_label_1_2_5_per_decade_without_minor_labels(table):
    """``theory_escape.png`` had crowded minor tick labels (2 3 4 5 6 7 8 9 in every decade)."""
    fig = th.plot_escape_order(table)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "log" and list(axis.tickvals[:6]) == [1, 2, 5, 10, 20, 50]
        assert list(axis.ticktext[3:6]) == ["10", "20", "50"] and axis.minor.showgrid is False

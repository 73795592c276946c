"""Figures of the theory lab."""

from __future__ import annotations

from cel_lens import theory as th


def test_theory_figures(table, tmp_path):
    paths = th.save_theory_figures(table, tmp_path, formats=("html",))
    assert sorted(p.name for p in paths) == ["theory_escape.html", "theory_trajectories.html"]
    assert all(p.stat().st_size > 1000 for p in paths)
    fig = th.plot_trajectories(table)
    assert len(fig.data) == 2 * 3 * 3  # two seeds, three features, three heads

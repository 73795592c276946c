"""Panels of a head set from a run's record, checked by hand on a tiny recorded run."""

from __future__ import annotations

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.report.explorer_data import head_set_panel, panel_keys, rounded, top_ranked
from cel_lens.report.explorer_render import panel_html
from cel_lens.runs import RunDir, load_run


@pytest.fixture
def tiny_run(tmp_path):
    """Intact and L0H1 recorded on D_dist (n=4, by hand: L0H1 fixes #0 and #1, breaks #3); no selection."""
    with RunDir.open(tmp_path / "run", {"model": {"id": "m"}, "task": {"name": "t"}, "options": {"scorer": "exact"}}) as rd:
        rd.record_event("search_started", n_layers=2, n_heads=2, options={"scorer": "exact"})
        rd.append_evaluations("dist", [HeadSet()], torch.tensor([[False, False, True, True]]), "intact")
        rd.append_evaluations("dist", [HeadSet.parse("L0H1")], torch.tensor([[True, True, True, False]]), "stage1")
    return load_run(tmp_path / "run")


def test_panel_by_hand(tiny_run):
    p = head_set_panel(tiny_run, "L0H1")
    assert p["dist"]["gain"] == 0.25 and p["dist"]["n_fixed"] == 2 and p["dist"]["n_broken"] == 1
    assert [e["index"] for e in p["dist"]["fixed"]] == [0, 1] and p["dist"]["broken"][0]["index"] == 3
    assert p["scores"] == {"L0H1": 0.25} and p["test"] is None
    html = panel_html(p)
    assert 'data-row="D_dist_gain"' in html and 'data-value="0.25"' in html


def test_unevaluated_set_says_so(tiny_run):
    p = head_set_panel(tiny_run, "L1H0")
    assert p["dist"] is None and "not evaluated" in panel_html(p)
    assert top_ranked(tiny_run.partial(), 3) == ["L0H1"]  # the only head scored so far
    assert panel_keys(tiny_run.partial()) == ["L0H1"]


def test_rounded_drops_nan():
    assert rounded({"a": [float("nan"), 0.123456789, 1.23456e-7]}) == {"a": [None, 0.1235, 1.235e-7]}
    assert rounded([0.123456, 1e-7], 3, decimals=True) == [0.123, 0.0]

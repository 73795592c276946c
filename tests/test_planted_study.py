"""Smoke test of the planted-effect study (``python -m benchmarks.planted_study``): each part runs on
a few seeds, and the report is written from its record alone."""

from __future__ import annotations

import warnings

from benchmarks import planted_report
from benchmarks.planted_bounds import coverage_cell
from benchmarks.planted_calibration import calibration_cell
from benchmarks.planted_study import decision_check, search_cell, stability_cell


def test_every_part_runs_and_the_report_is_written(tmp_path, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = search_cell(200, 0.05, 0.0, 2, adjusted=True)
        calibration = calibration_cell(4, "skewed", 60, 2, n_test=100)
        stability = stability_cell(200, 0.05, 1, n_resamples=5)
    decision = decision_check(n=100, most=12)
    cell = coverage_cell(100, 0.05, 0.05)  # the no-loss case
    bounds = {"cells": {"n=100 d=0.05 gain=no loss (+5.00 pp)": cell}, "worst": cell}
    assert cell["lower"] >= 0.95 and cell["upper"] >= 0.95 > cell["upper (conditional, before)"]
    assert 0 <= search["backward exact"] <= 1 and "absence fires" in search
    assert calibration["D_dist acc: new fit"] >= calibration["D_dist acc: best common offset"] - 1e-12
    assert decision["after: printed bound against the one-sided exact decision"] == 0
    assert stability["max |selected - its wins entry|"] == 0.0
    drawn = []
    monkeypatch.setattr(planted_report, "MD", tmp_path / "STUDY.md")
    monkeypatch.setattr(planted_report, "save_figure", lambda fig, path: drawn.append(path.name))
    planted_report.write_report({"searches": {"n=200 effect=+0.05 background=0.0": search},
                                 "calibration": {"4 choices skewed n_dist=60": calibration},
                                 "stability": {"n=200 effect=+0.05": stability}, "decision": decision,
                                 "bounds": bounds})
    text = (tmp_path / "STUDY.md").read_text()
    assert "| n=200 effect=+0.05 background=0.0 |" in text and "4 choices skewed n_dist=60" in text
    assert "| 100 | 5% |" in text
    assert drawn == ["planted_study_parsimony", "planted_study_calibration"]

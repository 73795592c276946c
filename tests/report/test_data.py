"""Figures read a result in every form it comes in: a ``Result``, a run record, a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cel_lens.report.data import result_dict, stage1_scores
from cel_lens.report.heatmap import plot_gain_heatmap
from cel_lens.runs import load_run
from cel_lens.selection.result import Result, format_result


def test_figures_accept_a_result_object_and_a_run_directory(tmp_path: Path, hand):
    r = hand.make()
    obj = Result.from_dict(r)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "result.json").write_text(json.dumps(obj.to_dict()))
    for source in (obj, load_run(run_dir), run_dir, str(run_dir)):
        fig = plot_gain_heatmap(source)
        heat = [t for t in fig.data if t.type == "heatmap"][0]
        assert np.array_equal(np.asarray(heat.z, dtype=float), np.asarray(hand.scores))
    # the one result formatter (two decimals; the old plots.format_result printed one)
    table = format_result(result_dict(obj))
    assert "L1H0+L2H1" in table and "+4.50 pp" in table and "[+1.00 pp, +8.00 pp]" in table


def test_unfinished_runs_and_missing_scores_are_errors(tmp_path: Path, hand):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="no result yet"):
        result_dict(run_dir)
    with pytest.raises(ValueError, match="no stage-1 scores"):
        stage1_scores(dict(hand.make(), scores=None))
    with pytest.raises(TypeError, match="expected a Result"):
        result_dict(3)

"""``cel-lens demo``: a run directory per set of options, and the same result block as ``report``."""

from __future__ import annotations

import json
from pathlib import Path

from cel_lens.cli import main
from cel_lens.organism.demo import demo_dir, run_demo
from cel_lens.selection import Result


def test_demo_directories_follow_the_options():
    assert demo_dir() == Path("runs/demo")
    assert demo_dir(n_dist=1000) == Path("runs/demo__n_dist-1000")
    assert demo_dir(n_dist=50, n_test=40, seed=2) == Path("runs/demo__n_dist-50__n_test-40__seed-2")


def test_a_demo_with_other_options_runs_beside_the_default_one(tmp_path, monkeypatch, capsys):
    """``cel-lens demo --n-dist 1000`` after ``cel-lens demo`` failed on runs/demo's manifest."""
    monkeypatch.chdir(tmp_path)
    first = run_demo(n_dist=40, n_test=40, figures=None, progress=False, verbose=False)
    assert main(["demo", "--n-dist", "50", "--n-test", "40", "--no-figures", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert Path(first["run_dir"]) == Path("runs/demo__n_dist-40__n_test-40")
    assert (tmp_path / "runs" / "demo__n_dist-50__n_test-40" / "result.json").is_file()
    # the demo prints the block str(result) and report print, then its own rows
    block = str(Result.from_dict(json.loads((tmp_path / "runs/demo__n_dist-50__n_test-40/result.json").read_text())))
    assert out.startswith(block + "\n")
    for row in ("ground truth (weights)", "side effect (organism_b)", "run directory"):
        assert f"\n  {row}" in out
    assert main(["report", "runs/demo__n_dist-50__n_test-40", "--no-figures"]) == 0
    assert capsys.readouterr().out.startswith(block + "\n")


def test_an_explicit_out_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = run_demo(out="mine", n_dist=30, n_test=30, figures=None, progress=False, verbose=False)
    assert summary["run_dir"] == "mine" and (tmp_path / "mine" / "result.json").is_file()

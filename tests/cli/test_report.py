"""``cel-lens report``: one run read the way ``str(result)`` and the demo print it, a file of the run
as its name, a reader that closes the pipe, an unfinished run, two runs compared, and the
examples the ablation fixes and breaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cel_lens.cli import main
from cel_lens.pipeline import search
from cel_lens.runs import RecordingOracle, RunDir, load_run
from cel_lens.selection import Result, run_search
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(n_dist=60, n_test=60, k=2, pool_size=4, n_null=3, n_boot=200, progress=False)


@pytest.fixture(scope="module")
def organism_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two small organism runs, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("runs")
    return tuple(search("organism", "organism_a", out=root / f"seed{s}", seed=s, **SMALL).path for s in (0, 1))


def test_report_prints_the_block_str_result_prints(capsys, organism_runs):
    """``demo``, ``report`` and ``str(result)`` used to summarise one run three ways."""
    run = organism_runs[0]
    assert main(["report", str(run), "--no-figures"]) == 0
    out = capsys.readouterr().out
    block = str(Result.from_dict(json.loads((run / "result.json").read_text())))
    assert out.startswith(block + "\n")
    assert out[len(block):].strip().split()[:2] == ["run", "directory"]


def test_report_takes_a_file_of_the_run(capsys, organism_runs):
    run = organism_runs[0]
    assert main(["report", str(run / "result.json"), "--no-figures", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["heads"] == load_run(run).result.heads


def test_a_reader_that_closes_the_pipe_gets_no_error(tmp_path, organism_runs):
    """``cel-lens report RUN --json | head`` ended in "Broken pipe": the output must exceed what a
    pipe holds, so the writer is still writing when the reader goes."""
    run = tmp_path / "big"
    run.mkdir()
    result = json.loads((organism_runs[0] / "result.json").read_text())
    result["null_gains"] = [0.0123456789] * 300_000  # ~5 MB of JSON
    (run / "result.json").write_text(json.dumps(result))
    (run / "manifest.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "cel_lens.cli", "report", str(run), "--json", "--no-figures"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert proc.stdout.read(100).startswith(b"{")
    proc.stdout.close()  # the reader goes, as head does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + 13  # SIGPIPE, as a command the signal stopped
    assert err == "", err


def _interrupted_run(path: Path, calls: int) -> Path:
    """A run directory whose search stopped after ``calls`` oracle calls (as a killed one does)."""

    class Stopping(SyntheticOracle):
        left = calls

        def evaluate(self, split, head_sets, *, stage=""):
            self.left -= 1
            if self.left < 0:
                raise KeyboardInterrupt
            return super().evaluate(split, head_sets, stage=stage)

    oracle = Stopping(6, 8, n_dist=200, n_test=200, effects={"L2H3": 0.05}, background_sd=0.01, seed=0)
    run = RunDir.open(path, {"model": {"id": "synthetic"}, "options": {"scorer": "exact"}})
    with pytest.raises(KeyboardInterrupt):
        run_search(
            RecordingOracle(oracle, run),
            config=SearchConfig(k=2, pool_size=4, n_null=5, n_boot=100, chunk=8),
            progress=False,
        )
    run.close()
    return path


def test_an_unfinished_run_reports_its_progress_and_heatmap(capsys, tmp_path):
    """``report`` refused a run without ``result.json``; now it says how far it got and draws it."""
    run = _interrupted_run(tmp_path / "run", calls=3)  # the intact model and two chunks of stage 1
    assert main(["report", str(run), "--out", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("unfinished run (stopped): stage 1: 16 of 48 heads scored")
    assert (tmp_path / "fig" / "gain_heatmap.html").is_file()


def test_two_runs_are_compared(capsys, organism_runs, tmp_path):
    assert main(["report", *map(str, organism_runs), "--out", str(tmp_path), "--json", "--label", "a"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["labels"] == ["a", "seed1"]
    heads = [load_run(r).result.head_set for r in organism_runs]
    both = [str(h) for h in heads[0].heads if h in heads[1]]
    assert cmp["selected"]["both"] == both
    assert any(f.endswith(".html") for f in cmp["figures"])


def test_flips_load_the_run_model_and_show_fixed_and_broken_examples(capsys, organism_runs, tmp_path):
    run = load_run(organism_runs[0])
    assert main(["report", str(run.path), "--flips", "--n-flips", "2", "--json", "--out", str(tmp_path)]) == 0
    flips = json.loads(capsys.readouterr().out)
    intact = [e for e in run.evaluations if e.split == "test" and not e.heads][0].correct
    ablated = [e for e in run.evaluations if e.split == "test" and e.heads == run.result.head_set][0].correct
    assert flips["n_fixed"] == int((~intact & ablated).sum()) and flips["n_broken"] == int((intact & ~ablated).sum())
    assert flips["n_fixed"] - flips["n_broken"] == round(run.result.gain * run.result.n_test)
    assert 0 < len(flips["examples"]) <= 4
    for e in flips["examples"]:
        right = e["ablated"] if e["kind"] == "fixed" else e["intact"]
        wrong = e["intact"] if e["kind"] == "fixed" else e["ablated"]
        assert right.strip() == e["answer"].strip() != wrong.strip()
    assert (tmp_path / "flips.html").is_file()


@pytest.mark.parametrize("text, problem", [('{"heads": ["L0H0"], "gain": }', "not valid JSON (Expecting value: line 1 column 29"),
                                           ("[1, 2]", "expected a JSON object, got list"),
                                           ('{"heads": 3}', "is corrupt: ")])
def test_a_corrupt_result_json_is_named(capsys, tmp_path, text, problem):
    """A corrupt ``result.json`` said only "Expecting value: line 1 column 27"; the error names the file."""
    path = tmp_path / "run"
    RunDir.open(path, {"model": {"id": "synthetic"}}).close()
    (path / "result.json").write_text(text)
    assert main(["report", str(path), "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cel-lens: error: {path / 'result.json'} is corrupt: ") and problem in err, err
    assert err.count("\n") == 1


def test_report_writes_the_explorer_page_with_model_panels(capsys, organism_runs, tmp_path):
    out = tmp_path / "figs"
    assert main(["report", str(organism_runs[0]), "--out", str(out), "--explorer-model", "--explorer-examples", "1",
                 "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["figures"]
    assert str(out / "explorer.html") in figures
    page = (out / "explorer.html").read_text()
    assert "model panels (attention intact vs ablated, direct logit effects) for" in page
    assert 'class=\\"cel-model-block\\"' in page or 'class="cel-model-block"' in page


def test_explorer_options_are_checked_before_anything_runs(capsys, organism_runs, tmp_path):
    out = tmp_path / "figs"
    assert main(["report", str(organism_runs[0]), "--out", str(out), "--explorer-model", "--explorer-examples", "0"]) == 2
    assert "--explorer-examples must lie in 1..8" in capsys.readouterr().err
    assert main(["report", str(organism_runs[0]), "--no-figures", "--explorer-model"]) == 2
    assert "--explorer-model adds model panels" in capsys.readouterr().err
    assert not out.exists()


def test_a_killed_run_reports_what_its_record_holds_not_one_status_line(capsys, tmp_path):
    """``cel-lens report`` on a killed run printed one status line while ``.partial()`` held the
    stage-1 scores and the pool; it now prints them, from the record alone."""
    from cel_lens.runs import load_run

    run = _interrupted_run(tmp_path / "run", calls=8)  # intact, stage 1 (48 heads in chunks of 8), stage 2 begun
    partial = load_run(run).partial()
    assert partial["pool"] and partial["subsets"]  # what the record holds
    assert main(["report", str(run), "--no-figures"]) == 0
    out = capsys.readouterr().out
    best = max(((v, f"L{l}H{h}") for l, row in enumerate(partial["scores"]) for h, v in enumerate(row)))
    assert out.startswith("unfinished run (stopped): stage 2:") and "S-hat (fixed" not in out
    assert f"stage-1 best (exact, 48 scored)  {best[1]} {100 * best[0]:+.2f} pp" in out
    assert f"pool (4 heads, each a candidate)  {', '.join(partial['pool'])}" in out
    assert "best subsets on D_dist so far" in out and "intact D_dist accuracy" in out

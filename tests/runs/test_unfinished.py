"""Unfinished runs read back: a killed search's record, a running one's (its lock held by another
process, a line half written), and one in a directory that cannot be written; what they know so
far (:mod:`cel_lens.runs.unfinished`) equals what the finished search reports."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cel_lens.config import SearchConfig
from cel_lens.runs import RecordingOracle, RunDir, load_run
from cel_lens.runs.lock import held_by
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = {"model": {"id": "synthetic"}, "options": {"scorer": "exact", "k": 2, "pool_size": 4}}
ORACLE = dict(n_layers=3, n_heads=4, n_dist=150, n_test=150, effects={"L1H2": 0.08, "L2H0": 0.04},
              background_sd=0.01, seed=1)
SEARCH = dict(k=2, pool_size=4, n_null=5, n_boot=100, chunk=4)


class Stopping(SyntheticOracle):
    """Raises KeyboardInterrupt (as a killed search stops) after ``left`` calls."""

    left = 0

    def evaluate(self, split, head_sets, *, stage=""):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        return super().evaluate(split, head_sets, stage=stage)


def _stopped(path: Path, calls: int) -> Path:
    oracle = Stopping(**ORACLE)
    oracle.left = calls
    with RunDir.open(path, MANIFEST) as run, pytest.raises(KeyboardInterrupt):
        run_search(RecordingOracle(oracle, run), SearchConfig(**SEARCH), progress=False)
    return path


def test_a_stopped_run_reads_back_what_it_recorded(tmp_path):
    run = _stopped(tmp_path / "run", calls=2)  # the intact model and the first 4 heads
    record = load_run(run)
    assert record.result is None and record.state == "stopped" and not record.finished
    partial = record.partial()
    assert partial["progress"]["status"] == "stage 1: 4 of 12 heads scored"
    assert (partial["n_layers"], partial["n_heads"]) == (3, 4) and partial["pool"] == [] and partial["heads"] is None
    # resume to the end: the scores the record had are the finished search's
    with RunDir.open(run, MANIFEST) as again:
        result = run_search(RecordingOracle(SyntheticOracle(**ORACLE), again), SearchConfig(**SEARCH), progress=False)
    scored = [(l, h) for l in range(3) for h in range(4) if not math.isnan(partial["scores"][l][h])]
    assert scored == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert all(partial["scores"][l][h] == pytest.approx(result.scores[l][h]) for l, h in scored)
    assert load_run(run).state == "finished"


def test_later_stages_carry_pool_subsets_and_selection(tmp_path):
    record = load_run(_stopped(tmp_path / "run", calls=7))  # stage 1 done, stage 2 evaluated, no test yet
    partial = record.partial()
    with RunDir.open(record.path, MANIFEST) as again:
        result = run_search(RecordingOracle(SyntheticOracle(**ORACLE), again), SearchConfig(**SEARCH), progress=False)
    assert partial["pool"] == result.pool and partial["heads"] == result.heads
    assert partial["scores"] == result.scores
    done = {s["heads"]: s["dist_acc"] for s in partial["subsets"]}
    assert done == {s["heads"]: s["dist_acc"] for s in result.subsets}
    assert partial["progress"]["status"].startswith(f"S-hat {result.heads} fixed on D_dist")


_HOLDER = """
import sys, time
from pathlib import Path
from cel_lens.runs import RunDir
run = RunDir.open(sys.argv[1], {"model": {"id": "synthetic"}, "options": {"scorer": "exact", "k": 2, "pool_size": 4}})
with open(run.evaluations_path, "ab") as f:
    f.write(b'{"type": "eval", "split": "dist", "hea')  # a line being written
print("ready", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.02)
"""


def test_a_running_run_is_read_without_its_lock(tmp_path):
    run = _stopped(tmp_path / "run", calls=2)
    script, go = tmp_path / "holder.py", tmp_path / "go"
    script.write_text(_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(run), str(go)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert held_by(run) is not None and f"process {proc.pid}" in held_by(run)
        record = load_run(run)  # neither waits for the lock nor trips on the half-written line
        assert record.state == "running" and record.partial()["progress"]["status"] == "stage 1: 4 of 12 heads scored"
    finally:
        go.touch()
        proc.wait(timeout=60)
    assert held_by(run) is None and load_run(run).state == "stopped"
    with RunDir.open(run, MANIFEST):  # this process holding it counts as running too
        assert load_run(run).state == "running"


def test_a_run_in_a_directory_nobody_may_write_is_read(tmp_path):
    """As a reader without write access: a mount namespace where the directory is read-only (root),
    or permission bits (anyone else)."""
    run = _stopped(tmp_path / "ro" / "run", calls=2)
    for p in [run, *run.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    code = ("import json, sys; from cel_lens.runs import load_run; r = load_run(sys.argv[1]); "
            "print(json.dumps([r.state, r.partial()['progress']['status']]))")
    prefix: list[str] = []
    if os.geteuid() == 0:
        unshare = shutil.which("unshare")
        prefix = [unshare or "unshare", "-m", "sh", "-c",
                  f'mount --bind "{run}" "{run}" && mount -o remount,bind,ro "{run}" && exec "$@"', "sh"]
        if not unshare or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
            pytest.skip("running as root without mount namespaces: no way to make a directory read-only")
    proc = subprocess.run([*prefix, sys.executable, "-c", code, str(run)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == ["stopped", "stage 1: 4 of 12 heads scored"]
    for p in [run, *run.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)

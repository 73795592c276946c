"""One writer per run directory: two searches into one directory at once cannot duplicate a line
(the second is refused naming the first, or waits for it and then evaluates nothing), and processes
creating the same directory at the same instant take turns instead of failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from cel_lens.config import SearchConfig
from cel_lens.runs import RunDir, load_run
from cel_lens.runs.lock import LOCK
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic"}, "task": {"name": "toy"}, "k": 2}
ORACLE = dict(n_layers=4, n_heads=4, n_dist=200, n_test=200, base_acc=0.5, effects={"L1H2": 0.08}, seed=0)
SEARCH = dict(k=2, pool_size=4, n_null=6, n_boot=200, chunk=2)

# A search into argv[1] over an oracle that sleeps argv[2] s per call, waiting up to argv[3] s for
# the directory. Unless argv[7] is "-", it touches argv[7] + ".ready" just before opening the directory and
# stops before its fifth evaluation until the file argv[7] exists. Prints
# {"heads", "gain", "calls"} on success, {"error", "type"} on failure.
_SEARCH_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from cel_lens.runs import RecordingOracle, RunDir
    from cel_lens.config import SearchConfig
    from cel_lens.selection import run_search
    from cel_lens.testing import SyntheticOracle
    oracle_kw, search_kw, manifest = (json.loads(a) for a in sys.argv[4:7])
    hold = sys.argv[7]

    class Held(SyntheticOracle):
        def evaluate(self, *args, **kwargs):
            if hold != "-" and len(self.calls) >= 4:
                while not Path(hold).exists():
                    time.sleep(0.01)
            return super().evaluate(*args, **kwargs)

    oracle = Held(**oracle_kw, delay=float(sys.argv[2]))
    if hold != "-":
        Path(hold + ".ready").touch()
    try:
        with RunDir.open(sys.argv[1], manifest, wait=float(sys.argv[3])) as run:
            result = run_search(RecordingOracle(oracle, run), SearchConfig(**search_kw), progress=False)
    except Exception as err:
        print(json.dumps({"error": str(err), "type": type(err).__name__}))
        sys.exit(2)
    print(json.dumps({"heads": result.heads, "gain": result.gain, "calls": len(oracle.calls)}))
    """
)

# Waits until the file argv[2] exists (a common start signal), then creates the run directory
# argv[1] and appends one event; prints {"ok": pid} or {"error", "type"}.
_CREATE_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from cel_lens.runs import RunDir
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.001)
    try:
        with RunDir.open(sys.argv[1], json.loads(sys.argv[3]), wait=float(sys.argv[4])) as run:
            run.record_event("hello", pid=os.getpid())
    except Exception as err:
        print(json.dumps({"error": str(err), "type": type(err).__name__}))
        sys.exit(2)
    print(json.dumps({"ok": os.getpid()}))
    """
)


def _spawn(script: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _report(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=300)
    lines = out.strip().splitlines()
    assert lines, f"child printed nothing (rc {proc.returncode}): {err[-2000:]}"
    return proc.returncode, json.loads(lines[-1])


def _eval_keys(path: Path) -> list[tuple[str, str]]:
    return [(e.split, str(e.heads)) for e in load_run(path).evaluations]


def _search_args(path: Path, delay: float, wait: float, hold: str = "-") -> list[str]:
    return [str(path), str(delay), str(wait), json.dumps(ORACLE), json.dumps(SEARCH), json.dumps(MANIFEST), hold]


def _wait_for(condition, what: str, procs=()) -> None:
    deadline = time.monotonic() + 180
    while not condition():
        assert all(p.poll() is None for p in procs), f"a child exited while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_second_opener_in_another_process_is_refused_naming_the_holder(tmp_path):
    run = RunDir.open(tmp_path / "run", MANIFEST)
    script = tmp_path / "create.py"
    script.write_text(_CREATE_CHILD)
    (tmp_path / "go").touch()
    code, out = _report(_spawn(script, str(run.path), str(tmp_path / "go"), json.dumps(MANIFEST), "0"))
    assert code == 2 and out["type"] == "RunBusyError"
    assert out["error"].startswith(f"run directory {run.path} is in use by process {os.getpid()} on ")
    assert "\n" not in out["error"]
    code, out = _report(_spawn(script, str(run.path), str(tmp_path / "go"), json.dumps(MANIFEST), "0.3"))
    assert code == 2 and out["type"] == "RunBusyError"  # still held: waiting a little does not help
    # the same process may open it again (one lock per process), and closing the last releases it
    again = RunDir.open(run.path, MANIFEST)
    again.close()
    run.close()
    code, out = _report(_spawn(script, str(run.path), str(tmp_path / "go"), json.dumps(MANIFEST), "0"))
    assert code == 0, out
    assert [e["pid"] for e in RunDir(run.path).events("hello")] == [out["ok"]]


@pytest.mark.slow  # two subprocesses importing torch, with a deliberately slow oracle: ~10 s
def test_two_searches_into_one_directory_at_once(tmp_path):
    """A second search started while the first runs is refused with one line naming the first's
    pid; once the first has finished it reruns from the record: same result, nothing evaluated
    again, every evaluation recorded once."""
    path = tmp_path / "run"
    script, hold = tmp_path / "search.py", tmp_path / "hold"
    script.write_text(_SEARCH_CHILD)
    first = _spawn(script, *_search_args(path, 0.0, 0, str(hold)))
    _wait_for(lambda: len(RunDir(path).evaluations()) >= 4 if (path / "evaluations.jsonl").exists() else False,
              "the first search to record evaluations", [first])
    code, out = _report(_spawn(script, *_search_args(path, 0.0, 0)))
    assert code == 2 and out["type"] == "RunBusyError"
    assert f"is in use by process {first.pid} on " in out["error"]
    hold.touch()
    code, done = _report(first)
    assert code == 0 and done["calls"] > 0
    code, rerun = _report(_spawn(script, *_search_args(path, 0.0, 0)))
    assert code == 0 and rerun["calls"] == 0 and rerun["heads"] == done["heads"] and rerun["gain"] == done["gain"]
    keys = _eval_keys(path)
    assert len(keys) == len(set(keys)) == done["calls"]
    reference = run_search(SyntheticOracle(**ORACLE), SearchConfig(**SEARCH), progress=False)
    assert (reference.heads, reference.gain) == (done["heads"], done["gain"])


@pytest.mark.slow  # two subprocesses importing torch, with a deliberately slow oracle: ~10 s
def test_two_waiting_searches_both_finish_with_one_set_of_lines(tmp_path):
    """Started together with ``wait``: one evaluates, the other waits for it and then answers
    everything from the record. Same result, no line twice."""
    path = tmp_path / "run"
    script = tmp_path / "search.py"
    script.write_text(_SEARCH_CHILD)
    held = RunDir.open(path, MANIFEST)  # both children start while the directory is held here
    procs = [_spawn(script, *_search_args(path, 0.02, 300, str(tmp_path / f"c{i}"))) for i in range(2)]
    for i in range(2):
        (tmp_path / f"c{i}").touch()  # no hold inside the search
    _wait_for(lambda: all((tmp_path / f"c{i}.ready").exists() for i in range(2)), "both children", procs)
    time.sleep(0.5)
    assert all(p.poll() is None for p in procs)  # both are waiting for the directory
    held.close()
    reports = [_report(p) for p in procs]
    assert all(code == 0 for code, _ in reports), reports
    (_, a), (_, b) = reports
    assert (a["heads"], a["gain"]) == (b["heads"], b["gain"])
    assert sorted([a["calls"], b["calls"]])[0] == 0  # the one that waited evaluated nothing
    keys = _eval_keys(path)
    assert len(keys) == len(set(keys)) == max(a["calls"], b["calls"])
    assert [k for k, c in Counter(e["event"] for e in RunDir(path).events()).items() if c > 1] == []


@pytest.mark.slow  # six subprocesses importing cel_lens (torch): ~10 s
@pytest.mark.parametrize("wait", [0.0, 60.0])
def test_processes_creating_one_directory_at_the_same_instant(tmp_path, wait):
    """Six processes released together create the same run directory: with ``wait`` every one
    succeeds in turn; without, each either succeeds or is told who holds the directory. Never a
    misleading "not empty" or a missing file, one manifest, no temporary file left."""
    path = tmp_path / "deep" / "run"
    script, go = tmp_path / "create.py", tmp_path / "go"
    script.write_text(_CREATE_CHILD)
    procs = [_spawn(script, str(path), str(go), json.dumps(MANIFEST), str(wait)) for _ in range(6)]
    time.sleep(3.0)  # let every child import and reach the start line
    go.touch()
    reports = [_report(p) for p in procs]
    ok = [out["ok"] for code, out in reports if code == 0]
    refused = [out for code, out in reports if code != 0]
    assert ok, reports
    assert all(r["type"] == "RunBusyError" and "is in use by process" in r["error"] for r in refused), refused
    if wait:
        assert not refused
    assert json.loads((path / "manifest.json").read_text()) == MANIFEST
    assert sorted(e["pid"] for e in RunDir(path).events("hello")) == sorted(ok)
    assert sorted(p.name for p in path.iterdir()) == sorted([LOCK, "evaluations.jsonl", "manifest.json"])

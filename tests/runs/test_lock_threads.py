"""One writer per run directory across the threads of one process too: a second thread waits for
(or is refused by) the first, naming it; temporary names are unique per thread; two searches in
two threads into one directory record every evaluation once and agree."""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from cel_lens.config import SearchConfig
from cel_lens.runs import RecordingOracle, RunBusyError, RunDir, load_run
from cel_lens.runs.journal_io import tmp_name
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic"}, "task": {"name": "toy"}, "k": 2}
ORACLE = dict(n_layers=4, n_heads=4, n_dist=200, n_test=200, base_acc=0.5, effects={"L1H2": 0.08}, seed=0)
SEARCH = dict(k=2, pool_size=4, n_null=6, n_boot=200, chunk=2)


def _in_thread(fn, name: str) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - reported to the test
            box["error"] = err

    t = threading.Thread(target=body, name=name)
    t.start()
    return t, box


def test_another_thread_is_refused_naming_the_holder_thread(tmp_path: Path) -> None:
    run = RunDir.open(tmp_path / "run", MANIFEST)
    try:
        t, box = _in_thread(lambda: RunDir.open(tmp_path / "run", MANIFEST), "second-search")
        t.join(30)
        err = box.get("error")
        assert isinstance(err, RunBusyError), box
        assert str(err).startswith(f"run directory {run.path} is in use by another thread (MainThread) of this process ({os.getpid()})")
        again = RunDir.open(tmp_path / "run", MANIFEST)  # the holder's own thread may open it again
        again.close()
    finally:
        run.close()
    t, box = _in_thread(lambda: RunDir.open(tmp_path / "run", MANIFEST).close(), "after")
    t.join(30)
    assert "error" not in box, box


def test_another_thread_waits_for_the_holder(tmp_path: Path) -> None:
    run = RunDir.open(tmp_path / "run", MANIFEST)
    t, box = _in_thread(lambda: RunDir.open(tmp_path / "run", MANIFEST, wait=math.inf), "waiter")
    t.join(0.3)
    assert t.is_alive(), "the second thread did not wait"
    run.record_event("first")
    run.close()
    t.join(30)
    assert not t.is_alive() and "error" not in box, box
    box["value"].record_event("second")
    box["value"].close()
    assert [e["event"] for e in RunDir(tmp_path / "run").events()] == ["first", "second"]


def test_temporary_names_differ_per_thread(tmp_path: Path) -> None:
    names = {tmp_name(tmp_path / "manifest.json")}
    t, box = _in_thread(lambda: tmp_name(tmp_path / "manifest.json"), "other")
    t.join(30)
    names.add(box["value"])
    assert len(names) == 2 and all(str(os.getpid()) in n.name for n in names)


def test_two_searches_in_two_threads_into_one_directory(tmp_path: Path) -> None:
    path = tmp_path / "run"
    barrier = threading.Barrier(2)

    def search() -> tuple:
        oracle = SyntheticOracle(**ORACLE, delay=0.002)
        barrier.wait()
        with RunDir.open(path, MANIFEST, wait=math.inf) as run:
            result = run_search(RecordingOracle(oracle, run), SearchConfig(**SEARCH), progress=False)
        return tuple(result.heads), result.gain, len(oracle.calls)

    threads = [_in_thread(search, f"search-{i}") for i in range(2)]
    for t, _ in threads:
        t.join(120)
    outcomes = [box.get("value", box.get("error")) for _, box in threads]
    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    assert outcomes[0][:2] == outcomes[1][:2]
    assert sorted(o[2] for o in outcomes)[0] == 0  # the second found every evaluation recorded
    keys = Counter((e.split, str(e.heads)) for e in load_run(path).evaluations)
    assert keys and max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("wait", [0.0, 0.2])
def test_a_refused_thread_leaves_no_reservation(tmp_path: Path, wait: float) -> None:
    run = RunDir.open(tmp_path / "run", MANIFEST)
    t, box = _in_thread(lambda: RunDir.open(tmp_path / "run", MANIFEST, wait=wait), "refused")
    t.join(30)
    assert isinstance(box.get("error"), RunBusyError)
    run.close()
    t, box = _in_thread(lambda: RunDir.open(tmp_path / "run", MANIFEST).close(), "next")
    t.join(30)
    assert "error" not in box, box

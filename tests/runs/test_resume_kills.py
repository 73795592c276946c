"""A search killed at any event boundary resumes to the result of one that ran through: every part
(the ablation controls included) recomputed or read back from the journal, none left ``null``."""

from __future__ import annotations

import json

import pytest

import cel_lens as cl
from cel_lens.runs.run_dir import RunDir
from cel_lens.testing.planted import planted_task

SMALL = dict(k=1, pool_size=2, n_null=2, n_boot=20, n_adjusted=0, progress=False, ablation="resample")
VOLATILE = ("timings",)  # seconds differ between any two runs


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (a BaseException, so no handler of the search catches it)."""


def _result(out) -> dict:
    stored = json.loads((out / "result.json").read_text())
    return {k: v for k, v in stored.items() if k not in VOLATILE}


def _kill_after(monkeypatch, n: int) -> list[str]:
    """Let the first ``n`` records (events and result.json writes) through, then kill the search."""
    done: list[str] = []
    real_event, real_result = RunDir.record_event, RunDir.write_result

    def gate(what: str) -> None:
        if len(done) >= n:
            raise Killed(what)
        done.append(what)

    def record_event(self, event, **data):
        gate(event)
        return real_event(self, event, **data)

    def write_result(self, result):
        gate("result.json")
        return real_result(self, result)

    monkeypatch.setattr(RunDir, "record_event", record_event)
    monkeypatch.setattr(RunDir, "write_result", write_result)
    return done


@pytest.mark.slow
def test_killed_at_each_event_boundary_resumes_to_the_same_result(tiny_model, tmp_path, monkeypatch):
    task = planted_task(tiny_model, n=8)
    whole = tmp_path / "whole"
    with monkeypatch.context() as m:
        records = _kill_after(m, 10 ** 6)
        cl.search(tiny_model, task, out=whole, **SMALL)
    expected = _result(whole)
    assert expected["ablation_controls"] is not None and expected["ablation"] == "resample"
    assert records[-3:] == ["ablation_controls", "result.json", "finished"]  # controls in the search, one result
    for n in range(len(records)):
        out = tmp_path / f"killed_{n}"
        with monkeypatch.context() as m:
            _kill_after(m, n)
            with pytest.raises(Killed):
                cl.search(tiny_model, task, out=out, **SMALL)
        resumed = cl.search(tiny_model, task, out=out, **SMALL)
        assert _result(out) == expected, f"killed after {records[:n]}"
        assert resumed.result.ablation_controls == expected["ablation_controls"]
        events = [e["event"] for e in RunDir(out).events()]
        assert events.count("ablation_controls") == 1 and "finished" in events

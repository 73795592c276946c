"""A run's ablation kind: learnt once, recorded, read back on resume (no refit); the controls too;
a run directory refuses another kind; resuming and export read the recorded ablation the same way."""

from __future__ import annotations

import pytest
import torch

import cel_lens as cl
from cel_lens.config import ABLATION_KINDS
from cel_lens.runs import load_run
from cel_lens.runs.ablation_record import recorded_ablation
from cel_lens.runs.export import run_ablation
from cel_lens.runs.run_dir import RunDir
from cel_lens.testing.planted import planted_task

SMALL = dict(k=1, pool_size=2, n_null=2, n_boot=20, progress=False)


def test_learnt_once_recorded_and_read_back(tiny_model, tmp_path, monkeypatch):
    task = planted_task(tiny_model, n=8)
    out = tmp_path / "run"
    first = cl.search(tiny_model, task, ablation="resample", out=out, **SMALL)
    events = RunDir(out).events()
    assert [e["kind"] for e in events if e["event"] == "ablation"] == ["resample"]
    controls = [e for e in events if e["event"] == "ablation_controls"]
    assert len(controls) == 1 and set(controls[0]["controls"]) == set(ABLATION_KINDS) - {"resample"}  # every other kind
    assert {"zero", "mean"} <= set(controls[0]["controls"])
    assert first.result.ablation_controls["zero"]["record"] == {"kind": "zero"}

    def no_fit(*args, **kwargs):
        raise AssertionError("a resumed run must not fit its ablation again")

    monkeypatch.setattr("cel_lens.runs.ablation_record.fit_ablation", no_fit)
    again = cl.search(tiny_model, task, ablation="resample", out=out, **SMALL)
    assert again.result == first.result
    with pytest.raises(ValueError, match="ablation"):
        cl.search(tiny_model, task, ablation="mean", out=out, **SMALL)


def test_non_zero_kinds_refuse_the_ray_backend_before_anything_runs(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="ablation='mean' runs on the local backend only"):
        cl.search(tiny_model, planted_task(tiny_model, n=4), ablation="mean", backend="ray", out=tmp_path / "r", **SMALL)
    assert not (tmp_path / "r").exists()


def test_resume_and_export_read_the_recorded_ablation_one_way(tiny_model, tmp_path):
    out = tmp_path / "run"
    cl.search(tiny_model, planted_task(tiny_model, n=8), ablation="mean", out=out, **SMALL)
    events = RunDir(out).events()
    read = recorded_ablation(events, "mean")
    assert read is not None and read.name == "mean"
    exported = run_ablation(load_run(out))
    assert type(exported) is type(read) and torch.equal(exported.table, read.table)
    recorded = next(e for e in events if e["event"] == "ablation")
    assert exported.record() == read.record() and read.record()["sha256"] == recorded["sha256"]
    assert recorded_ablation(events, "resample") is None and recorded_ablation([], "mean") is None


def _ledger_lines(ledger) -> int:
    return sum(len(p.read_text().splitlines()) for p in ledger.glob("*.jsonl"))


def test_a_finished_run_rerun_never_reads_the_test_split_again(tiny_model, tmp_path, isolated_ledger):
    """A finished directory whose result holds the controls but whose journal lacks their
    ``ablation_controls`` event (a result written before the event existed, or a journal cut there)
    is rerun from its result: the ledger of D_test reads stays as it was (before: 3 lines, then 5)."""
    task = planted_task(tiny_model, n=8)
    out = tmp_path / "run"
    first = cl.search(tiny_model, task, ablation="resample", out=out, **SMALL)
    assert first.result.ablation_controls is not None
    journal = out / "evaluations.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"ablation_controls"' not in line]
    assert len(kept) == len(lines) - 1
    journal.write_text("".join(kept))
    reads = _ledger_lines(isolated_ledger)
    assert reads > 0
    for _ in range(2):
        again = cl.search(tiny_model, task, ablation="resample", out=out, **SMALL)
        assert again.result.ablation_controls == first.result.ablation_controls
        assert _ledger_lines(isolated_ledger) == reads

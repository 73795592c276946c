"""``answer_type`` (formerly ``kind``): no alias lives on a class, and records that say ``kind``
(run manifests, evaluation files, task infos, the committed results) still load, through one reader."""

from __future__ import annotations

import copy

import json
import warnings
from pathlib import Path

import pytest
import torch

from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.heads import HeadSet
from cel_lens.runs.manifest import default_run_dir, upgrade_manifest
from cel_lens.runs.run_dir import RunConfigError, RunDir
from cel_lens.tasks.base import Example, Split, Task

ROOT = Path(__file__).resolve().parents[2]


def _task() -> Task:
    dist = Split("dist", (Example("t/0", "Question: 1 plus 1?\nAnswer:", target=" 2"),))
    test = Split("test", (Example("t/1", "Question: 2 plus 2?\nAnswer:", target=" 4"),))
    return Task("toy", "multiple_choice", dist, test)


def test_kind_is_no_alias_of_answer_type():
    task = _task()
    assert task.answer_type == task.dist.answer_type == "multiple_choice"
    res = EvalResult([HeadSet()], ["a"], torch.tensor([[True]]), torch.tensor([[0.5]]), answer_type="generation")
    for owner in (task, task.dist, task.test, res):
        assert not hasattr(owner, "kind")  # the former name: records only, read by current_names
    with pytest.raises(TypeError):
        Split("dist", (), kind="exact_match")  # type: ignore[call-arg]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repr(task).startswith("<Task 'toy': multiple_choice,")


def test_eval_result_reads_an_old_file_and_writes_answer_type():
    res = EvalResult([HeadSet()], ["a", "b"], torch.tensor([[True, False]]), torch.tensor([[0.5, -0.5]]),
                     answer_type="generation")
    data = res.to_dict()
    assert data["answer_type"] == "generation" and "kind" not in data
    old = {k: v for k, v in data.items() if k != "answer_type"} | {"kind": "generation"}
    back = EvalResult.from_dict(json.loads(json.dumps(old)))
    assert back.answer_type == "generation" and torch.equal(back.correct, res.correct)


def test_an_old_manifest_reads_with_answer_type_and_resumes(tmp_path):
    new = {"model": {"id": "m"}, "task": {"name": "toy", "answer_type": "exact_match", "metric": "acc", "options": {}},
           "splits": {}, "options": {"k": 3}}
    old = {**new, "task": {"name": "toy", "kind": "exact_match", "metric": "acc", "options": {}}}
    assert upgrade_manifest(old) == new and upgrade_manifest(new) == new
    assert list(upgrade_manifest(old)["task"]) == ["name", "answer_type", "metric", "options"]
    assert default_run_dir(old) == default_run_dir(new)  # the same command, the same directory
    RunDir.open(tmp_path / "run", old).close()
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["task"]["kind"] == "exact_match"
    with RunDir.open(tmp_path / "run", new) as run:  # a run written before the rename resumes
        assert run.manifest["task"]["answer_type"] == "exact_match"
    with pytest.raises(RunConfigError, match="answer_type"):
        RunDir.open(tmp_path / "run", {**new, "task": {**new["task"], "answer_type": "generation"}})


@pytest.mark.parametrize("row", ["arithmetic-exact", "boolq-exact-float32"])
def test_the_committed_manifests_load_with_answer_type(row):
    path = ROOT / "results" / "smollm2-135m" / row
    if not (path / "manifest.json").is_file():
        pytest.skip(f"{path} is not here")
    assert RunDir(path).manifest["task"]["answer_type"] in ("exact_match", "multiple_choice")


def test_a_registered_task_info_that_says_kind_reads_as_answer_type(monkeypatch):
    from cel_lens.tasks import registry

    monkeypatch.setattr(registry, "TASKS", copy.copy(registry.TASKS))  # leaves no trace in other tests
    registry.register_task("old_info_toy", lambda **kw: _task(), info={"kind": "generation"})
    info = registry.task_info("old_info_toy")
    assert info["answer_type"] == "generation" and "kind" not in info
    assert registry.task_info("arithmetic")["answer_type"] == "exact_match"

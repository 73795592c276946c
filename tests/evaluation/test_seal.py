"""The sealed test split: every read of D_test is in the ledger, and a later search says so."""

from __future__ import annotations

import json
import threading
import warnings

import pytest
import torch

import cel_lens as cl
from cel_lens.analysis import flipped_examples
from cel_lens.backends import LocalOracle
from cel_lens.evaluation import EvalContext
from cel_lens.evaluation.seal import SealReader, ledger_file, record_test_read, recorded_reads
from cel_lens.heads import HeadSet
from cel_lens.model.identity import model_id
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.result import format_result
from cel_lens.testing import planted_task

PLANTED = "L2H1"


@pytest.fixture(scope="module")
def task(tiny_model):
    return planted_task(tiny_model, heads=PLANTED)


def test_evaluate_on_test_records_the_read_and_warns_in_one_line(tiny_model, task):
    with pytest.warns(UserWarning, match="breaks its seal") as caught:
        cl.evaluate(tiny_model, task.test, [HeadSet(), HeadSet.parse("L0H0")], progress=False)
    assert len([w for w in caught if "seal" in str(w.message)]) == 1
    assert "\n" not in str(caught[0].message)
    reads = recorded_reads(model_id(tiny_model), task.test)
    assert len(reads) == 1
    assert reads[0]["head_sets"] == ["intact", "L0H0"] and reads[0]["entry"] == "evaluate"
    assert reads[0]["n"] == len(task.test)


def test_evaluate_on_dist_marks_nothing_of_the_test_split(tiny_model, task):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cl.evaluate(tiny_model, task.dist, [HeadSet()], progress=False)
        cl.evaluate(tiny_model, task.dist, [HeadSet.parse("L0H0")], progress=False)  # once per model and rows
    assert recorded_reads(model_id(tiny_model), task.test) == []
    reads = recorded_reads(tiny_model, task.dist)
    assert [(r["split_name"], r["head_sets"], r["n_head_sets"]) for r in reads] == [("dist", [], 1)]


def test_d_test_read_as_a_split_named_dist_unseals_a_later_search(tiny_model, task, tmp_path):
    """The split's name is not what the seal keys on: D_test's rows under the name "dist" are D_test."""
    from dataclasses import replace

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the name hides it from the warning, not from the ledger
        cl.evaluate(tiny_model, replace(task.test, name="dist"), [HeadSet()], progress=False)
    assert [r["split_name"] for r in recorded_reads(tiny_model, task.test)] == ["dist"]
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "s", progress=False)
    assert run.result.selected_before_test is False and run.result.seal["prior_test_reads"] == 1


def test_a_bf16_copy_of_the_model_reading_d_test_unseals_a_later_search(tiny_model, task, tmp_path):
    """A copied checkpoint loaded in bfloat16 has another id and weights hash, but the same weights."""
    import copy

    from cel_lens.evaluation.seal import weights_identity, weights_key
    from cel_lens.model.identity import tag_source

    twin = copy.deepcopy(tiny_model).to(torch.bfloat16)
    tag_source(twin, "/elsewhere/a-copied-checkpoint", "test", {})
    assert weights_key(twin) != weights_key(tiny_model) and weights_identity(twin) == weights_identity(tiny_model)
    record_test_read(twin, task.test, [HeadSet()], reader=SealReader("a notebook"))
    assert [r["model"] for r in recorded_reads(tiny_model, task.test)] == ["/elsewhere/a-copied-checkpoint"]
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "s", progress=False)
    assert run.result.selected_before_test is False
    other = copy.deepcopy(tiny_model)
    tag_source(other, "a-retrained-model", "test", {})
    with torch.no_grad():
        next(other.parameters()).mul_(1.5)  # retrained: another model
    assert weights_identity(other) != weights_identity(tiny_model) and recorded_reads(other, task.test) == []


def test_a_read_of_a_part_of_the_test_split_counts(tiny_model, task):
    cl.evaluate(tiny_model, task.test.subset(3), [HeadSet()], progress=False,
                context=EvalContext(reader=SealReader("a notebook")))
    reads = recorded_reads(model_id(tiny_model), task.test)
    assert [r["entry"] for r in reads] == ["a notebook"]
    assert recorded_reads("another model", task.test) == []


def test_search_after_a_test_read_is_not_selected_before_test(tiny_model, task, tmp_path):
    clean = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "a", progress=False)
    assert clean.result.selected_before_test is True
    assert clean.result.seal["prior_test_reads"] == 0
    # the search's own test reads are recorded, and owned (they are after its selection)
    assert any("search" in r["entry"] for r in recorded_reads(model_id(tiny_model), task.test))


def test_a_second_configuration_is_flagged_and_the_same_one_is_not(tiny_model, task, tmp_path):
    first = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "first", progress=False)
    assert first.result.selected_before_test is True
    # the same configuration elsewhere: its selection is a function of D_dist, the first's reads cannot change it
    same = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "same", progress=False)
    assert same.result.selected_before_test is True
    # another configuration, chosen after the first one's test statistics were seen: flagged
    other = cl.search(tiny_model, task, k=1, pool_size=4, n_null=4, out=tmp_path / "other", progress=False)
    assert other.result.selected_before_test is False and "search" in other.result.seal["reason"]


def test_flipped_examples_then_search_is_flagged_with_the_reason(tiny_model, task, tmp_path):
    with pytest.warns(UserWarning, match="breaks its seal"):
        flipped_examples(tiny_model, task, heads=PLANTED, split="test", progress=False)
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "b", progress=False)
    res = run.result
    assert res.selected_before_test is False
    assert res.seal["prior_test_reads"] >= 1
    assert "D_test was read" in res.seal["reason"]
    assert "NOT fixed before D_test was read: D_test was read" in format_result(res)
    selected = [json.loads(x) for x in (tmp_path / "b" / "evaluations.jsonl").read_text().splitlines()]
    event = next(x for x in selected if x.get("event") == "selected")
    assert event["selected_before_test"] is False and event["seal"]["prior_test_reads"] >= 1
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["test_seal"]["selected_before_test"] is False and "D_test was read" in manifest["test_seal"]["reason"]
    assert run.manifest["test_seal"] == manifest["test_seal"]
    # resuming keeps the flag the run recorded
    again = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "b", progress=False)
    assert again.result.selected_before_test is False


def test_unguarded_memo_oracle_over_a_model_reads_are_recorded(tiny_model, task):
    memo = MemoOracle(LocalOracle(tiny_model, task, progress=False), guard_test=False)
    with pytest.warns(UserWarning, match="breaks its seal"):
        memo.evaluate("test", [HeadSet.parse("L1H1")])
    reads = recorded_reads(model_id(tiny_model), task.test)
    assert len(reads) == 1 and reads[0]["head_sets"] == ["L1H1"]


def test_ledger_is_safe_across_threads(task):
    def write(i: int) -> None:
        for j in range(20):
            record_test_read("m", task.test, [HeadSet.parse(f"L0H{j % 4}")], reader=SealReader(f"thread {i}"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = ledger_file(task.test.task).read_text().splitlines()
    parsed = [json.loads(x) for x in lines]  # no interleaved, torn line
    assert sum(p["kind"] == "read" for p in parsed) == 80
    assert sum(p["kind"] == "split" for p in parsed) == 1
    assert len(recorded_reads("m", task.test)) == 80


def test_a_cut_tail_is_repaired_before_the_next_read_is_appended(task):
    record_test_read("m", task.test, [HeadSet.parse("L0H0")], reader=SealReader("first"))
    path = ledger_file(task.test.task)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a short write: the last line lost its end, no newline
    record_test_read("m", task.test, [HeadSet.parse("L0H1")], reader=SealReader("second"))
    assert path.read_bytes().endswith(b"\n")
    assert [r["entry"] for r in recorded_reads("m", task.test)] == ["second"]  # before: glued on, lost


def test_reads_are_matched_on_content_whatever_the_names(tiny_model, task):
    import copy
    from dataclasses import replace

    from cel_lens.model.identity import tag_source
    from cel_lens.tasks.base import Split

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl.evaluate(tiny_model, list(task.test)[:2], [HeadSet()], progress=False)  # a plain list of examples
        assert [r["split_name"] for r in recorded_reads(model_id(tiny_model), task.test)] == ["split"]
        renamed = replace(task.test.subset(2), name="heldout", task="elsewhere")  # a renamed copy, another task
        cl.evaluate(tiny_model, renamed, [HeadSet()], progress=False)
        cl.evaluate(tiny_model, Split("test", tuple(task.test)[2:4]), [HeadSet()], progress=False)  # no task
        twin = copy.deepcopy(tiny_model)  # the same weights under another name
        tag_source(twin, "a-renamed-copy", "test", {})
        cl.evaluate(twin, task.test.subset(1), [HeadSet()], progress=False)
    assert model_id(twin) == "a-renamed-copy"
    reads = recorded_reads(tiny_model, task.test)
    assert len(reads) == 4 and {r["model"] for r in reads} == {model_id(tiny_model), "a-renamed-copy"}
    assert len(recorded_reads(model_id(tiny_model), task.test)) == 3  # by name alone the copy is missed
    with torch.no_grad():
        next(twin.parameters()).add_(1.0)  # other weights: not the same model any more
    assert recorded_reads(twin, task.dist) == [] and len(recorded_reads(twin, task.test)) == 1


def test_an_export_verify_is_recorded_as_the_source_models_read(tiny_checkpoints, data_dir, tmp_path):
    from cel_lens.model.load import load_model
    from cel_lens.runs.export import verify_export

    model = load_model(tiny_checkpoints["qwen2"], device="cpu", loader="hooked")
    task = cl.load_task("boolq", n_dist=12, n_test=24, data_dir=data_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = cl.search(model, task, k=1, pool_size=2, n_null=2, n_boot=200, progress=False, out=tmp_path / "run")
        out = cl.export_model(run, tmp_path / "out")
        assert verify_export(out, run.path, data_dir=data_dir).ok
    reads = [r for r in recorded_reads(model, task.test) if r["entry"].startswith("export verify")]
    assert len(reads) == 1 and reads[0]["model"] == model_id(model)
    assert reads[0]["weights"] == run.manifest["model"]["weights_sha256"]  # the source's weights, not the export's

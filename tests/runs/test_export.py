"""Exporting a run's selected heads and verifying the export against the run's recorded decisions:
a search on a tiny checkpoint (real BoolQ validation rows) and on the model organism, exported,
reloaded with plain ``transformers`` (or, for the organism, as a native checkpoint without hooks)
and compared example by example; a wrong source, a tampered file and wrong heads are caught."""

from __future__ import annotations

import json

import pytest

import cel_lens
from cel_lens.model import load_model
from cel_lens.model.checkpoint_edit import PROVENANCE_FILE
from cel_lens.pipeline import search
from cel_lens.runs import load_run
from cel_lens.runs.export import export_model, run_task, verify_export

SEARCH = dict(k=1, pool_size=2, n_null=2, n_boot=200, progress=False)


@pytest.fixture(scope="module")
def qwen_run(tiny_checkpoints, data_dir, tmp_path_factory):
    model = load_model(tiny_checkpoints["qwen2"], device="cpu", loader="hooked")
    task = cel_lens.load_task("boolq", n_dist=12, n_test=24, data_dir=data_dir)
    return model, search(model, task, out=tmp_path_factory.mktemp("runs") / "qwen", **SEARCH)


def test_export_of_a_run_reproduces_every_test_decision(qwen_run, data_dir, tmp_path):
    _, run = qwen_run
    out = cel_lens.export_model(run, tmp_path / "out")
    record = json.loads((out / PROVENANCE_FILE).read_text())
    assert record["heads"] == run.result.heads and record["run"]["gain"] == run.result.gain
    used = run.manifest["model"]["bos"]["prepends_bos"]  # the BOS rule the run's prompts were encoded with
    assert record["evaluation"]["prepend_bos"] is used and record["evaluation"]["dtype"] == "torch.float32"
    report = verify_export(out, run.path, data_dir=data_dir)
    assert report.ok and report.n == 24 and report.matches == 24, str(report)
    assert report.files_ok == report.files_checked == len(record["files"]) + 1  # and the record itself
    assert 0 < report.exported_accuracy < 1 and report.exported_accuracy == pytest.approx(run.result.test_acc_ablated)
    assert "plain transformers" in report.mode
    # the same from a RunRecord, with the task given instead of loaded again
    task = run_task(load_run(run.path), data_dir=data_dir)
    assert verify_export(out, load_run(run.path), task=task).ok


def test_verify_catches_a_wrong_model_and_a_tampered_file(qwen_run, tiny_checkpoints, data_dir, tmp_path):
    _, run = qwen_run
    wrong = export_model(run.path, tmp_path / "wrong", source=str(tiny_checkpoints["llama"]))
    report = verify_export(wrong, run.path, data_dir=data_dir)
    assert not report.ok and report.matches < report.n and report.mismatched_ids
    out = export_model(run, tmp_path / "out")
    config = out / "generation_config.json"
    config.write_text(config.read_text() + " ")
    report = verify_export(out, run.path, data_dir=data_dir)
    assert report.matches == report.n and report.files_ok == report.files_checked - 1 and not report.ok


def test_refusals(qwen_run, tiny_checkpoints, data_dir, tmp_path):
    model, run = qwen_run
    with pytest.raises(ValueError, match="needs source="):
        export_model("L0H1", tmp_path / "a")
    other = load_model(tiny_checkpoints["llama"], device="cpu", loader="hooked")
    with pytest.raises(ValueError, match="not the one"):
        export_model(run, tmp_path / "b", source=other)
    heads_only = export_model("L0H1+L2H2", tmp_path / "c", source=model)
    assert json.loads((heads_only / PROVENANCE_FILE).read_text())["run"] is None
    with pytest.raises(ValueError, match="removes L0H1"):
        verify_export(heads_only, run.path, data_dir=data_dir)
    with pytest.raises(FileNotFoundError, match="neither a run directory nor a head set"):
        export_model("no/such/run", tmp_path / "d", source=model)


def test_organism_run_exports_natively_and_verifies(tmp_path):
    organism = load_model("organism", device="cpu")
    task = cel_lens.load_task("organism_a", n_dist=60, n_test=60)
    run = search(organism, task, out=tmp_path / "run", **SEARCH)
    out = export_model(run, tmp_path / "out")
    assert json.loads((out / PROVENANCE_FILE).read_text())["kind"] == "native"
    report = verify_export(out, run.path)
    assert report.ok and report.n == 60 and "native" in report.mode, str(report)


def test_verify_an_existing_export_from_the_command_line_and_refuse_relabelled_heads(tmp_path, capsys):
    """``cel-lens export RUN --out DIR --verify`` could not re-check an existing export; ``cel-lens
    verify DIR [RUN]`` does, and a record relabelled to other heads fails on the record's own hash
    and on the zeroed slices. The organism's card names the tensor edited and how it loads."""
    from cel_lens.cli import main
    from cel_lens.model.checkpoint_edit import PROVENANCE_HASH_FILE

    organism = load_model("organism", device="cpu")
    run = search(organism, cel_lens.load_task("organism_a", n_dist=60, n_test=60), out=tmp_path / "run", **SEARCH)
    out = export_model(run, tmp_path / "out")
    head = run.result.head_set.heads[0]
    card = (out / "README.md").read_text()
    assert f"`blocks.{head.layer}.attn.W_O[{head.head}]`" in card and "loads with `cl.load_model`" in card
    assert "cel-lens verify" in card and "o_proj" not in card
    assert main(["verify", str(out), "--no-progress"]) == 0  # RUN_DIR from the record
    assert capsys.readouterr().out.startswith("verified: 60/60")
    assert main(["verify", str(out), str(run.path), "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["zeroed_ok"] is True
    record = json.loads((out / PROVENANCE_FILE).read_text())
    other = f"L{head.layer}H{(head.head + 1) % 4}"
    record["heads"] = other
    for edit in record["edited_tensors"]:
        edit["heads"] = [other]
    (out / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    with pytest.raises(ValueError, match=f"removes {other} but"):  # relabelled: not the run's heads
        verify_export(out, run.path)
    from cel_lens.runs.export import heads_zeroed

    assert heads_zeroed(out, record) is False  # the weights zero the run's head, not the relabelled one
    record["heads"] = str(head)
    for edit in record["edited_tensors"]:
        edit["heads"] = [str(head)]
    record["created"] = "1970-01-01T00:00:00Z"  # any other edit of the record: its own hash no longer matches
    (out / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    assert heads_zeroed(out, record) is True
    report = verify_export(out, run.path)
    assert report.files_ok == report.files_checked - 1 and not report.ok
    (out / PROVENANCE_HASH_FILE).unlink()
    assert main(["verify", str(out), "--no-progress"]) == 1 and "FAILED" in capsys.readouterr().out


def test_run_task_loads_the_run_task_with_every_loader_option_it_recorded(data_dir, tmp_path):
    """A BoolQ run with D_dist drawn from validation and a split seed other than the search seed:
    the task is rebuilt with both (they used to be dropped), and a D_dist that is not the run's is
    refused, not only a wrong D_test."""
    from dataclasses import replace

    from cel_lens.runs.reader import RunRecord

    task = cel_lens.load_task("boolq", n_dist=10, n_test=20, seed=3, data_dir=data_dir, dist_from="validation")
    splits = {s: {"n": len(getattr(task, s)), "content_sha256": getattr(task, s).content_hash} for s in ("dist", "test")}
    manifest = {"task": {"name": "boolq", "options": dict(task.options)}, "splits": splits, "options": {"seed": 0}}
    record = RunRecord(tmp_path, manifest, [], [], None)
    again = run_task(record, data_dir=data_dir)
    assert again.dist.content_hash == task.dist.content_hash and again.test.content_hash == task.test.content_hash
    other = cel_lens.load_task("boolq", n_dist=10, n_test=20, seed=3, data_dir=data_dir)  # D_dist from train
    assert other.test.content_hash == task.test.content_hash and other.dist.content_hash != task.dist.content_hash
    with pytest.raises(ValueError, match="D_dist loaded for verification is not the run's"):
        run_task(record, other)
    test_only = cel_lens.load_task("boolq", n_test=20, seed=3, data_dir=data_dir, splits="test")
    assert run_task(record, test_only) is test_only  # holds no D_dist: only D_test is checked
    with pytest.raises(ValueError, match="D_test loaded for verification"):
        run_task(record, replace(task, test=other.dist))

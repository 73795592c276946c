"""A run on a cut Task (splits holding fewer examples than its loader drew) records what it
evaluated, ids and source files beside the content hashes, and verification rebuilds exactly that."""

from __future__ import annotations

import json
from dataclasses import replace

import cel_lens
from cel_lens.model import load_model
from cel_lens.pipeline import search
from cel_lens.runs import load_run
from cel_lens.runs.export import export_model, run_task, verify_export
from cel_lens.runs.manifest import build_manifest
from cel_lens.runs.reader import RunRecord
from cel_lens.tasks.io import sha256_file

SEARCH = dict(k=1, pool_size=2, n_null=2, n_boot=200, progress=False)


def test_a_cut_task_is_recorded_by_id_and_verifies_from_the_command_line(tmp_path, capsys):
    """A Task of 200 + 200 examples cut to 48 recorded n 48 but a loader size of 200; export
    --verify / verify loaded a fresh draw of 48 and refused it ("D_dist loaded for verification is
    not the run's")."""
    from cel_lens.cli import main

    organism = load_model("organism", device="cpu")
    task = cel_lens.load_task("organism_a", n_dist=200, n_test=200)
    cut = replace(task, dist=task.dist[::4][:48], test=task.test.subset(48))  # not even a prefix of D_dist
    run = search(organism, cut, out=tmp_path / "run", **SEARCH)
    record = load_run(run.path)
    assert record.manifest["splits"]["dist"]["n"] == 48 and record.example_ids("dist") == cut.dist.ids
    assert record.example_ids("test") == cut.test.ids
    again = run_task(record)
    assert again.dist.ids == cut.dist.ids and again.test.content_hash == cut.test.content_hash
    out = export_model(run, tmp_path / "out")
    assert verify_export(out, run.path).ok
    assert main(["verify", str(out), "--no-progress"]) == 0 and "48/48" in capsys.readouterr().out
    assert main(["export", str(run.path), "--out", str(tmp_path / "again"), "--verify", "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verify"]["n"] == 48


def test_a_manifest_without_ids_rebuilds_a_prefix_cut(tmp_path):
    """Runs recorded before the ids: a Task cut by ``search(..., n_dist=)`` holds its first examples."""
    task = cel_lens.load_task("organism_a", n_dist=100, n_test=100)
    cut = replace(task, dist=task.dist.subset(30), test=task.test.subset(20))
    manifest = build_manifest({}, cut, {"seed": 0})
    assert "examples" not in manifest
    again = run_task(RunRecord(tmp_path, manifest, [], [], None))
    assert (again.dist.ids, again.test.ids) == (cut.dist.ids, cut.test.ids)


def test_examples_name_the_source_files_sha256(data_dir, tmp_path):
    task = cel_lens.load_task("boolq", n_dist=10, n_test=20, seed=3, data_dir=data_dir, dist_from="validation")
    cut = replace(task, test=task.test[5:15])
    manifest = build_manifest({}, cut, {"seed": 0}, examples=True)
    record = RunRecord(tmp_path, manifest, [], [], None)
    assert record.example_ids("test") == cut.test.ids and record.example_ids("dist") == task.dist.ids
    [source] = manifest["examples"]["sources"]
    assert source["path"] == "boolq/dev.jsonl" and source["sha256"] == sha256_file(data_dir / "boolq" / "dev.jsonl")
    again = run_task(record, data_dir=str(data_dir))
    assert again.test.content_hash == cut.test.content_hash and again.dist.content_hash == task.dist.content_hash


def test_verification_finds_boolq_validation_in_a_search_dir(tmp_path, monkeypatch):
    """export --verify and the explorer rebuild a dist_from=validation run without --data-dir when
    ../shared/data holds boolq/dev.jsonl (they went to the hub)."""
    from cel_lens.model import hub
    from cel_lens.tasks import io

    shared = tmp_path / "shared" / "data"
    (shared / "boolq").mkdir(parents=True)
    rows = [json.dumps({"question": f"q{i}", "title": "t", "answer": i % 2 == 0, "passage": f"p{i}"}) for i in range(12)]
    (shared / "boolq" / "dev.jsonl").write_text("\n".join(rows) + "\n")
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    monkeypatch.setattr(io, "search_dirs", lambda: [tmp_path / "data", shared])
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: False)
    task = cel_lens.load_task("boolq", n_dist=4, n_test=4, data_dir=str(shared), dist_from="validation")
    record = RunRecord(tmp_path, build_manifest({}, task, {"seed": 0}, examples=True), [], [], None)
    again = run_task(record)
    assert (again.dist.content_hash, again.test.content_hash) == (task.dist.content_hash, task.test.content_hash)

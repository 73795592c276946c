"""BoolQ with D_dist drawn from the validation file (offline, no train file): disjoint, recorded,
D_test the same draw as with train; a missing train file names the option in one line."""

from __future__ import annotations

import pytest

from cel_lens.tasks import load_task
from cel_lens.tasks.io import DataNotFoundError


def test_dist_from_validation_is_disjoint_and_recorded(data_dir):
    task = load_task("boolq", n_dist=300, n_test=400, seed=3, data_dir=str(data_dir), dist_from="validation")
    assert (len(task.dist), len(task.test)) == (300, 400)
    assert all(e.id.startswith("boolq/validation/") for e in [*task.dist, *task.test])
    assert not {e.id for e in task.dist} & {e.id for e in task.test}
    assert not {e.content_hash for e in task.dist} & {e.content_hash for e in task.test}
    assert task.options["dist_from"] == "validation" and "train" in task.options["dist_protocol"]
    assert [s["path"] for s in task.options["sources"]] == ["boolq/dev.jsonl"]
    again = load_task("boolq", n_dist=300, n_test=400, seed=3, data_dir=str(data_dir), dist_from="validation")
    assert [e.id for e in again.dist] == [e.id for e in task.dist]  # seeded


def test_same_d_test_whichever_dist_source_and_split(data_dir):
    a = load_task("boolq", n_dist=50, n_test=200, data_dir=str(data_dir), dist_from="validation")
    b = load_task("boolq", n_test=200, data_dir=str(data_dir), splits="test")  # the train protocol's D_test
    c = load_task("boolq", n_dist=50, n_test=200, data_dir=str(data_dir), dist_from="validation", splits="test")
    assert [e.id for e in a.test] == [e.id for e in b.test] == [e.id for e in c.test]
    assert len(c.dist) == 0


def test_defaults_and_sizes(data_dir):
    task = load_task("boolq", data_dir=str(data_dir), dist_from="validation")
    assert (len(task.dist), len(task.test)) == (2000, 1000)
    with pytest.raises(ValueError, match="asked for 2300 BoolQ D_dist examples"):
        load_task("boolq", n_dist=2300, data_dir=str(data_dir), dist_from="validation")
    with pytest.raises(ValueError, match="dist_from must be one of train, validation"):
        load_task("boolq", data_dir=str(data_dir), dist_from="test")


def test_missing_train_names_the_option(tmp_path):
    (tmp_path / "boolq").mkdir()
    rows = [f'{{"question": "q{i}", "title": "t", "answer": {str(i % 2 == 0).lower()}, "passage": "p{i}"}}\n'
            for i in range(3)]  # the official schema, validation file only
    (tmp_path / "boolq" / "dev.jsonl").write_text("".join(rows))
    with pytest.raises(DataNotFoundError) as err:
        load_task("boolq", n_dist=2, n_test=2, data_dir=str(tmp_path))
    assert "\n" not in str(err.value) and "--task-option dist_from=validation" in str(err.value)
    task = load_task("boolq", n_dist=1, n_test=1, data_dir=str(tmp_path), dist_from="validation")
    assert len(task.dist) == len(task.test) == 1


def _validation_only(folder):
    (folder / "boolq").mkdir(parents=True)
    rows = [f'{{"question": "q{i}", "title": "t", "answer": {str(i % 2 == 0).lower()}, "passage": "p{i}"}}\n'
            for i in range(6)]
    (folder / "boolq" / "dev.jsonl").write_text("".join(rows))
    return folder


def test_dist_from_validation_finds_a_search_dir(tmp_path, monkeypatch):
    """``split_one_file`` resolved the data directory without naming its file, so a search dir
    holding ``boolq/dev.jsonl`` (``../shared/data``) was passed over for the hub."""
    from cel_lens.model import hub
    from cel_lens.tasks import io

    shared = _validation_only(tmp_path / "shared" / "data")
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    monkeypatch.setattr(io, "search_dirs", lambda: [tmp_path / "data", shared])
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: False)
    task = load_task("boolq", n_dist=2, n_test=2, dist_from="validation")
    assert task.options["sources"][0]["data_dir"] == str(shared)


def test_missing_train_names_the_folder_and_file_it_lacks(tmp_path, monkeypatch):
    """With only ``dev.jsonl`` in ``../shared/data`` and no hub, the error said "BoolQ validation not
    found ... ../shared/data lack it" (it holds it) and did not name ``dist_from``."""
    from cel_lens.model import hub
    from cel_lens.tasks import io

    shared = _validation_only(tmp_path / "shared" / "data")
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(io, "search_dirs", lambda: [tmp_path / "data", shared])
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: False)
    with pytest.raises(DataNotFoundError) as err:
        load_task("boolq", n_dist=2, n_test=2)
    message = str(err.value)
    assert f"BoolQ train not found in {shared}" in message and "boolq/train.jsonl" in message
    assert "BoolQ validation" not in message and "dist_from=validation" in message
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: True)  # a hub: it serves both files
    assert io.resolve_data_dir(None, needs=("boolq/dev.jsonl", "boolq/train.jsonl")) is None

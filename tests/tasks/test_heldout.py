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

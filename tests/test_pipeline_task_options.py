"""``cl.search`` / ``cl.plan`` take a task loader's own options (BoolQ's ``dist_from``), spelled as
the loader's errors suggest them, for a task given by name; a Task object refuses them by name."""

from __future__ import annotations

import pytest

import cel_lens as cl


@pytest.fixture
def short_boolq(tmp_path):
    """A BoolQ validation file of 16 short rows (the tiny model's context is 512 tokens)."""
    (tmp_path / "boolq").mkdir()
    rows = [f'{{"question": "is {i} even", "title": "n{i}", "answer": {str(i % 2 == 0).lower()}, "passage": "{i} is a number."}}\n'
            for i in range(16)]
    (tmp_path / "boolq" / "dev.jsonl").write_text("".join(rows))
    return str(tmp_path)


def test_plan_and_search_take_the_loaders_dist_from(tiny_model, short_boolq, tmp_path):
    """``search() got unknown option(s) dist_from`` although the BoolQ error names that spelling."""
    sizes = dict(n_dist=6, n_test=4, data_dir=short_boolq)
    plan = cl.plan(tiny_model, "boolq", dist_from="validation", k=1, pool_size=2, calibrate=False, **sizes)
    assert {(s.split, s.examples) for s in plan.stages} == {("dist", 6), ("test", 4)}
    run = cl.search(tiny_model, "boolq", dist_from="validation", k=1, pool_size=2, n_null=2,
                    n_adjusted=0, progress=False, out=tmp_path / "run", **sizes)
    assert run.manifest["task"]["options"]["dist_from"] == "validation"


def test_loader_options_are_refused_for_a_task_object_and_unknown_ones_everywhere(tiny_model, short_boolq):
    task = cl.load_task("boolq", n_dist=4, n_test=4, data_dir=short_boolq, dist_from="validation")
    with pytest.raises(TypeError, match="dist_from apply only to a task given by name"):
        cl.plan(tiny_model, task, dist_from="validation", calibrate=False)
    with pytest.raises(TypeError, match="unknown option.*dist_form"):
        cl.plan(tiny_model, "boolq", dist_form="validation", calibrate=False, data_dir=short_boolq)

"""The whole pipeline on real (tiny) models: a head whose ablation is beneficial by construction is
found, runs resume, configurations cannot be mixed, and D_test is read only after selection."""

from __future__ import annotations

import json

import pytest
import torch

import cel_lens as cl
from cel_lens.heads import HeadSet
from cel_lens.backends import LocalOracle as ModelOracle
from cel_lens.runs import default_run_dir
from cel_lens.runs import RunConfigError, load_run
from cel_lens.tasks import Task
from cel_lens.testing import planted_task

PLANTED = "L2H1"


@pytest.fixture(scope="module")
def task(tiny_model) -> Task:
    return planted_task(tiny_model, heads=PLANTED)


def test_model_oracle_matches_plain_evaluation(tiny_model, task):
    oracle = ModelOracle(tiny_model, task, batch_size=5, progress=False)
    sets = [HeadSet(), HeadSet.parse(PLANTED), HeadSet.parse("L0H0+L2H3")]
    got = oracle.evaluate("dist", sets)
    want = cl.evaluate(tiny_model, task.dist, sets, progress=False).correct
    assert torch.equal(got, want)
    assert got[1].all() and not got[0].all()  # the planted head helps, the test is not vacuous
    assert "test" not in oracle._stores  # the test split was never touched


def test_search_finds_the_planted_head_and_resumes(tiny_model, task, tmp_path):
    out = tmp_path / "run"
    run = cl.search(tiny_model, task, k=2, pool_size=4, n_null=8, out=out, progress=False)
    res = run.result
    assert res.heads == PLANTED
    assert res.dist_acc_ablated == 1.0 and res.test_acc_ablated == 1.0
    assert res.gain > 0 and res.ci_low > 0
    assert res.gain == pytest.approx(res.test_acc_ablated - res.test_acc_intact)
    # the record shows the selection before any test evaluation
    lines = [json.loads(x) for x in (out / "evaluations.jsonl").read_text().splitlines()]
    first_test = next(i for i, x in enumerate(lines) if x.get("type") == "eval" and x.get("split") == "test")
    selected = next(i for i, x in enumerate(lines) if x.get("event") == "selected")
    assert selected < first_test
    # the same call again evaluates nothing and returns the same result
    again = cl.search(tiny_model, task, k=2, pool_size=4, n_null=8, out=out, progress=False)
    assert again.oracle.misses == 0 and again.oracle.hits > 0
    assert again.result == res
    assert load_run(out).result == res
    # a different configuration in the same directory is refused, naming the field
    with pytest.raises(RunConfigError, match="pool_size"):
        cl.search(tiny_model, task, k=2, pool_size=5, n_null=8, out=out, progress=False)


def test_store_and_no_store_and_scorers_agree_on_the_selection(tiny_model, task, tmp_path):
    base = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "a", progress=False)
    plain = cl.search(
        tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "b", use_store=False, progress=False
    )
    assert plain.result.scores == base.result.scores
    assert plain.result.heads == base.result.heads == PLANTED
    for scorer in ("attribution", "compressed"):
        run = cl.search(
            tiny_model, task, k=1, pool_size=6, n_null=4, scorer=scorer, out=tmp_path / scorer,
            n_masks=24, sparsity=0.2, progress=False,
        )
        assert run.result.scorer == scorer
        assert PLANTED in run.result.pool, scorer  # the approximate scorer still pools the planted head
        assert run.result.heads == PLANTED


def test_default_run_dir_is_stable_and_config_specific(tiny_model, task):
    from cel_lens.runs import build_manifest

    m1 = build_manifest(tiny_model, task, {"k": 3})
    assert default_run_dir(m1) == default_run_dir(build_manifest(tiny_model, task, {"k": 3}))
    assert default_run_dir(m1) != default_run_dir(build_manifest(tiny_model, task, {"k": 2}))


def test_search_rejects_bad_options(tiny_model, task, tmp_path):
    with pytest.raises(ValueError, match="scorer"):
        cl.search(tiny_model, task, scorer="psychic", out=tmp_path / "x")


class _NeverOpened:
    """A backend standing in for the real one: validation must fail before it is opened."""

    name = "never"

    def open(self, *args, **kwargs):
        raise AssertionError("the backend was opened: the model would have been loaded before the check")


API_CASES = [
    (dict(k=0), "k must be >= 1, got 0"),
    (dict(k=1.5), "k must be an integer, got 1.5"),
    (dict(pool_size=0), "pool_size must be >= 1, got 0"),
    (dict(n_null=0), "n_null must be >= 1, got 0 (the random-subset null needs at least one head set)"),
    (dict(seed=-1), "seed must be >= 0, got -1"),
    (dict(batch_size=0), "batch_size must be >= 1, got 0"),
    (dict(n_masks=0, scorer="compressed"), "n_masks must be >= 1, got 0"),
    (dict(store_dtype="float17"), "unknown dtype 'float17'"),
    (dict(dtype="float17"), "unknown dtype 'float17'"),
    (dict(scorer="psychic"), "unknown scorer 'psychic'"),
    (dict(posthoc="no"), "posthoc must be True or False, got 'no'"),
    (dict(backend="spark"), "unknown backend 'spark'"),
    (dict(bogus=1), "search() got unknown option(s) bogus"),
    (dict(chat_template=True), "option(s) chat_template apply only to a task given by name, not to a Task object"),
    (dict(empty="dist"), "task 'planted' has an empty dist split (n_dist=0)"),
    (dict(empty="test"), "task 'planted' has an empty test split (n_test=0)"),
    (dict(task="arithmetic", n_dist=0), "n_dist must be >= 1, got 0 (the split would be empty)"),
    (dict(task="arithmetic", n_test=-1), "n_test must be >= 1, got -1 (the split would be empty)"),
    (dict(task="arithmetic", data_dir="bad-row"), "two_digit_addition.jsonl:2: missing field 'completion'"),
]


@pytest.mark.parametrize("kwargs, message", API_CASES, ids=[c[1][:40] for c in API_CASES])
def test_every_bad_input_fails_before_the_model_loads_and_writes_nothing(
    tiny_model, task, tmp_path, monkeypatch, data_dir, kwargs, message
):
    import dataclasses
    import shutil

    from cel_lens import pipeline

    monkeypatch.setattr(pipeline, "get_backend", lambda name: _NeverOpened())
    monkeypatch.chdir(tmp_path)  # where the default run directory (./runs/...) would go
    kwargs = dict(kwargs)
    the_task = kwargs.pop("task", task)
    if "empty" in kwargs:
        split = kwargs.pop("empty")
        the_task = dataclasses.replace(task, **{split: task.split(split)[:0]})
    if kwargs.get("data_dir") == "bad-row":
        root = tmp_path / "data"
        shutil.copytree(data_dir / "arithmetic", root / "arithmetic")
        path = root / "arithmetic" / "two_digit_addition.jsonl"
        lines = path.read_text().splitlines()
        path.unlink()
        path.write_text("\n".join([lines[0], '{"context": "Q: What is 1 plus 2?"}', *lines[2:]]) + "\n")
        kwargs["data_dir"] = str(root)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises((ValueError, TypeError)) as err:
        cl.search(tiny_model, the_task, out=tmp_path / "run", progress=False, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert sorted(tmp_path.rglob("*")) == before  # no run directory, not even an empty one


def test_corrected_rerun_after_a_bad_option_runs(tiny_model, task, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="n_null must be >= 1"):
        cl.search(tiny_model, task, k=1, pool_size=2, n_null=0, out=out, progress=False)
    assert not out.exists()
    assert cl.search(tiny_model, task, k=1, pool_size=2, n_null=2, out=out, progress=False).result.heads == PLANTED


def test_split_seed_moves_the_splits_and_leaves_the_statistics_seed(tmp_path):
    model = cl.load_model("organism")
    common = dict(n_dist=80, n_test=80, k=1, n_null=3, n_boot=200, progress=False)
    a = cl.search(model, "organism_a", out=tmp_path / "a", **common)
    b = cl.search(model, "organism_a", out=tmp_path / "b", split_seed=1, **common)
    c = cl.search(model, "organism_a", out=tmp_path / "c", seed=1, **common)
    assert "split_seed" not in a.manifest["options"] and b.manifest["options"]["split_seed"] == 1
    assert a.manifest["splits"] != b.manifest["splits"] == c.manifest["splits"]  # seed 1 splits both
    assert b.result.seed == a.result.seed == 0 and c.result.seed == 1
    assert b.manifest["task"]["options"]["seed"] == 1


def test_pipeline_refuses_recorded_scores_not_computed_on_dist(tiny_model, task, tmp_path):
    from cel_lens.oracle import TestSplitError

    out = tmp_path / "run"
    kw = dict(k=1, pool_size=3, n_null=2, scorer="compressed", n_masks=16, sparsity=0.2, progress=False)
    cl.search(tiny_model, task, out=out, **kw)
    import json

    from cel_lens.runs.journal_io import CHECK, encode_lines

    lines = [json.loads(x) for x in (out / "evaluations.jsonl").read_text().splitlines()]
    # a record whose stage-1 scores say another split (written with valid checksums, as by an older tool)
    changed = [dict(x, split="test") if x.get("event") == "stage1_scores" else x for x in lines]
    assert changed != lines
    (out / "evaluations.jsonl").write_bytes(encode_lines([{k: v for k, v in x.items() if k != CHECK} for x in changed]))
    with pytest.raises(TestSplitError, match="split 'test'"):
        cl.search(tiny_model, task, out=out, **kw)


def test_a_task_with_one_split_cannot_be_searched(data_dir):
    one = cl.load_task("boolq", n_test=20, data_dir=data_dir, splits="test")
    with pytest.raises(ValueError, match="loaded with its test split only"):
        cl.pipeline.check_task(one)


def test_search_prints_its_plan_before_stage_1_and_an_estimate_after_the_first_batch(tiny_model, task, tmp_path, capsys):
    """The README's defaults took 979 s on a toy model with no word of what was coming."""
    run = cl.search(tiny_model, task, k=2, pool_size=4, n_null=8, out=tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    plan_at, estimate_at = err.index("search plan: 3 layers x 4 heads"), err.index("estimate from the first timed batch")
    assert plan_at < estimate_at < err.index("stage2 (dist)")  # both before stage 2 runs
    assert "stage 1 (exact)  12 head sets" in err and "total" in err
    assert run.plan is not None and run.plan.seconds_per_unit > 0
    n_dist, n_test = len(task.dist), len(task.test)
    assert run.plan.stages[1].units == 12 * n_dist and run.plan.stages[-1].examples == n_test
    again = cl.search(tiny_model, task, k=2, pool_size=4, n_null=8, out=tmp_path / "run", progress=True)
    assert "search plan" not in capsys.readouterr().err and again.result == run.result  # finished: nothing to plan


def test_plan_evaluates_a_sample_and_writes_nothing(tiny_model, task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = cl.pipeline.plan(tiny_model, task, k=2, pool_size=4, n_null=8, calibration_examples=8)
    assert list(tmp_path.iterdir()) == []
    assert plan.seconds_per_unit > 0 and plan.seconds() > 0
    assert [s.head_sets for s in plan.stages][:3] == [1, 12, 6]  # intact, every head, C(4,2) pairs
    with pytest.raises(ValueError, match="larger than the model's 12 heads"):
        cl.pipeline.plan(tiny_model, task, k=13, pool_size=13, calibrate=False)


@pytest.mark.parametrize("n_layers, n_heads", [(30, 9), (28, 24), (8, 8), (4, 4), (2, 4), (1, 16), (36, 16)])
def test_plan_times_whole_layers_spread_evenly_over_depth(n_layers, n_heads):
    """A head's cost falls with its layer and a layer's heads share forwards, so the plan times whole
    layers whose mean is the mean layer: timing one head of many layers overestimated a SmolLM2
    scan 1.4x (its heads ran one per forward)."""
    from cel_lens.pipeline import calibration_layers

    layers = calibration_layers(n_layers, n_heads)
    assert layers == sorted(set(layers)) and all(0 <= l < n_layers for l in layers)
    assert abs(sum(layers) / len(layers) - (n_layers - 1) / 2) <= 0.5
    assert len(layers) == min(n_layers, max(2, round(32 / n_heads)))


def test_a_bos_rule_given_to_search_applies_to_a_model_object(tiny_checkpoints, tmp_path):
    """``search(model, task, bos=...)`` sets the rule on a model handed in as an object (not only
    on one loaded by name), and the run records it."""
    from cel_lens.model import bos_rule

    model = cl.load_model(str(tiny_checkpoints["llama"]), loader="hooked", device="cpu")
    planted = planted_task(model, n=8, heads="L1H2")
    before = bos_rule(model)["rule"]
    run = cl.search(model, planted, k=1, pool_size=2, n_null=2, n_boot=50, out=tmp_path / "run", progress=False,
                    bos="never" if before != "never" else "always")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["model"]["bos"]["rule"] == bos_rule(model)["rule"] != before
    assert run.result.heads


def test_plan_and_search_do_the_same_with_the_quick_preset_on_a_task_object(tiny_model, task, tmp_path):
    """``search(model, task, **cl.QUICK)`` raised on a Task object while ``plan`` planned something
    else; both now cut the task to ``n_dist``/``n_test`` and refuse loading options alike."""
    sizes = dict(n_dist=len(task.dist) - 3, n_test=len(task.test) - 2)
    plan = cl.plan(tiny_model, task, k=1, pool_size=2, n_null=2, calibrate=False, **sizes)
    assert plan.stages[0].examples == sizes["n_dist"] and plan.stages[-1].examples == sizes["n_test"]
    run = cl.search(tiny_model, task, k=1, pool_size=2, n_null=2, n_boot=50, out=tmp_path / "run", progress=False, **sizes)
    assert {s: run.manifest["splits"][s]["n"] for s in ("dist", "test")} == {"dist": sizes["n_dist"], "test": sizes["n_test"]}
    assert run.manifest["splits"]["dist"]["content_sha256"] == task.dist.subset(sizes["n_dist"]).content_hash
    for call in (cl.plan, cl.search):
        with pytest.raises(TypeError, match="data_dir apply only to a task given by name"):
            call(tiny_model, task, data_dir="somewhere", out=tmp_path / "x") if call is cl.search else call(
                tiny_model, task, data_dir="somewhere")
    quick = cl.plan(tiny_model, task, calibrate=False, **cl.QUICK)  # more than the task holds: all of it
    assert quick.stages[0].examples == len(task.dist)


def test_stage1_time_counts_a_scorer_that_runs_before_the_search(tiny_model, task, tmp_path, monkeypatch):
    """Attribution and compressed sensing score heads before the search starts; their time was left
    out of ``stage1_s`` (0.0004 s for 12 compressed-sensing masks over MBPP)."""
    import time

    from cel_lens import pipeline

    original = pipeline._stage1_scores

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_stage1_scores", slow)
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=2, scorer="attribution", out=tmp_path / "a", progress=False)
    assert run.result.timings["stage1_s"] >= 0.3
    assert json.loads((tmp_path / "a" / "result.json").read_text())["timings"]["stage1_s"] >= 0.3


def test_the_result_is_written_once_with_its_controls(tiny_model, task, tmp_path, monkeypatch):
    """The search writes ``result.json`` once, S-hat's gain under the other ablation kinds included
    (the pipeline no longer patches it afterwards)."""
    from cel_lens.runs.run_dir import RunDir

    writes = []
    original = RunDir.write_result
    monkeypatch.setattr(RunDir, "write_result", lambda self, result: writes.append(dict(result)) or original(self, result))
    run = cl.search(tiny_model, task, k=1, pool_size=2, n_null=2, n_boot=50, out=tmp_path / "run", progress=False)
    assert len(writes) == 1 and writes[0]["ablation"] == "zero"
    assert set(writes[0]["ablation_controls"]) == {"mean", "resample"} and run.result.controls.kinds == writes[0]["ablation_controls"]

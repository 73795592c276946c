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
    lines = (out / "evaluations.jsonl").read_text().splitlines()
    tampered = [x.replace('"split":"dist"', '"split":"test"') if '"event":"stage1_scores"' in x else x for x in lines]
    assert tampered != lines
    (out / "evaluations.jsonl").write_text("\n".join(tampered) + "\n")
    with pytest.raises(TestSplitError, match="split 'test'"):
        cl.search(tiny_model, task, out=out, **kw)

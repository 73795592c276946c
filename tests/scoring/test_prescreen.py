"""The pre-screen: kept heads scored exactly as exact stage 1, screened-out heads NaN and recorded,
its cost in the plan, and a search that selects the planted head and resumes."""

from __future__ import annotations

import math

import pytest
import torch

from cel_lens.config import SearchConfig
from cel_lens.heads import Head
from cel_lens.runs import RunDir
from cel_lens.scoring import exact_scores, get_scorer
from cel_lens.scoring.prescreen import PrescreenOptions, kept_count, prescreen_scores
from cel_lens.selection import candidate_pool
from cel_lens.selection.plan import plan_search
from cel_lens.testing import SyntheticOracle, planted_task


def test_kept_heads_carry_exact_scores_and_the_rest_are_nan():
    oracle = SyntheticOracle(4, 4, n_dist=60, effects={"L1H1": 0.3, "L2H3": 0.2}, noise=0.05, seed=1)
    out = prescreen_scores(oracle, PrescreenOptions("subsample", 0.25, 30, seed=0, pool_size=2))
    exact = exact_scores(oracle)
    assert len(out.kept) == 4 and len(out.screened_out) == 12
    for h in out.kept:
        assert out.scores[h.layer, h.head] == exact[h.layer, h.head]
    for h in out.screened_out:
        assert math.isnan(out.scores[h.layer, h.head])
    # strong planted effects survive a 30-example first pass: the pool is exact's
    assert candidate_pool(out.scores, 2) == candidate_pool(exact, 2) == [Head(1, 1), Head(2, 3)]
    assert out.first_units == 16 * 30 and out.exact_units == 4 * 60


def test_kept_count_covers_the_pool_and_never_exceeds_the_heads():
    assert kept_count(270, 0.25, 12) == 68
    assert kept_count(16, 0.1, 6) == 6
    assert kept_count(16, 1.0, None) == 16


def test_the_plan_counts_first_pass_and_kept_heads():
    plan = plan_search(30, 9, 200, 200, k=2, pool_size=6, config=SearchConfig(k=2, pool_size=6, scorer="prescreen"))
    stage1 = next(s for s in plan.stages if s.name.startswith("stage 1"))
    assert stage1.head_sets == 3 + 68 and "68 of 270" in stage1.note
    stage2 = next(s for s in plan.stages if s.name == "stage 2")
    assert stage2.head_sets == 15  # the pool's singles are the kept heads' exact evaluations
    sub = get_scorer("prescreen", prescreen_pass="subsample", prescreen_sample=50, prescreen_keep=0.5)
    assert sub.cost(30, 9, 200).head_sets == math.ceil(270 * 50 / 200) + 135


def test_bad_prescreen_options_fail_before_any_work():
    with pytest.raises(ValueError, match="prescreen_keep"):
        SearchConfig(scorer="prescreen", prescreen_keep=0.0).validate()
    with pytest.raises(ValueError, match="prescreen_pass"):
        SearchConfig(scorer="prescreen", prescreen_pass="guess").validate()


def test_a_search_with_the_prescreen_selects_the_planted_head_records_and_resumes(tiny_model, tmp_path):
    import cel_lens as cl

    task = planted_task(tiny_model, n=16, heads="L1H2", name="planted_l1h2")
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, scorer="prescreen", prescreen_keep=0.5,
                    out=tmp_path / "pre", progress=False)
    assert run.result.heads == "L1H2"
    events = RunDir(tmp_path / "pre").events("prescreen")
    assert len(events) == 1 and len(events[0]["kept"]) == 6 and len(events[0]["screened_out"]) == 6
    assert "L1H2" in events[0]["kept"]
    assert RunDir(tmp_path / "pre").manifest["options"]["prescreen"] == {"pass": "attribution", "keep": 0.5}
    again = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, scorer="prescreen", prescreen_keep=0.5,
                      out=tmp_path / "pre", progress=False)
    assert again.result.heads == run.result.heads
    assert torch.isnan(torch.tensor(run.result.scores)).sum() == 6

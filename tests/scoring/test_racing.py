"""Racing stage 1: hypergeometric bounds against scipy, subsplits, the pool against exact scoring,
records and resumption through a run directory, and decisions identical to a full pass on a model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import hypergeom

from cel_lens.backends.local import LocalOracle
from cel_lens.config import SearchConfig
from cel_lens.heads import Head, HeadSet
from cel_lens.splits import parse_subsplit, subsplit, subsplit_indices
from cel_lens.runs import RecordingOracle, RunDir
from cel_lens.scoring import RacingOptions, exact_scores, racing_cost, racing_scores, score_heads
from cel_lens.scoring.racing import count_bounds, racing_schedule
from cel_lens.selection import candidate_pool
from cel_lens.selection.plan import plan_search
from cel_lens.testing import SyntheticOracle, planted_task, realistic_oracle


@pytest.mark.parametrize("population,sample,alpha", [(50, 10, 0.01), (400, 60, 1e-6), (300, 299, 1e-3), (30, 1, 0.2)])
def test_count_bounds_match_scipy_hypergeometric_tails(population, sample, alpha):
    seen = np.arange(0, sample + 1)
    lo, hi = count_bounds(seen, sample, population, alpha)
    K = np.arange(population + 1)
    for x, l, h in zip(seen, lo, hi):
        inside_lo = K[hypergeom.sf(x - 1, population, K, sample) > alpha]
        inside_hi = K[hypergeom.cdf(x, population, K, sample) > alpha]
        assert (l, h) == (inside_lo[0], inside_hi[-1]), x
        assert x <= l <= h <= population - (sample - x)  # only counts the sample allows


def test_count_bounds_of_a_full_sample_are_the_count():
    lo, hi = count_bounds(np.array([0, 3, 7]), 10, 10, 1e-9)
    assert lo.tolist() == hi.tolist() == [0, 3, 7]


def test_subsplits_partition_dist_in_a_seeded_order():
    n = 37
    ends = racing_schedule(n, RacingOptions(first=5, growth=2.0))
    assert ends == [5, 10, 20, 37]
    parts = [subsplit_indices(subsplit(3, a, b), n) for a, b in zip([0, *ends[:-1]], ends)]
    assert sorted(torch.cat(parts).tolist()) == list(range(n))
    assert torch.equal(subsplit_indices(subsplit(3, 0, n), n), torch.cat(parts))
    assert not torch.equal(subsplit_indices(subsplit(4, 0, n), n), torch.cat(parts))
    assert parse_subsplit("dist@3[5:10]") == (3, 5, 10)
    assert parse_subsplit("dist") is None and parse_subsplit("test@3[5:10]") is None
    with pytest.raises(ValueError, match="reaches"):
        subsplit_indices("dist@0[0:40]", n)


def test_a_subsplit_of_the_synthetic_oracle_is_dist_at_its_positions():
    oracle = SyntheticOracle(3, 3, n_dist=50, effects={"L1H1": 0.2}, noise=0.1, seed=2)
    sets = [HeadSet(), HeadSet.parse("L1H1"), HeadSet.parse("L0H2+L2H0")]
    name = subsplit(7, 10, 30)
    assert torch.equal(oracle.evaluate(name, sets), oracle.evaluate("dist", sets)[:, subsplit_indices(name, 50)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_race_finds_exact_scorings_pool_on_realistic_effects(seed):
    oracle, _ = realistic_oracle(8, 8, seed)
    exact_pool = candidate_pool(exact_scores(oracle), 12)
    outcome = racing_scores(oracle, 12, RacingOptions(delta=0.05, seed=seed))
    assert outcome.pool == exact_pool  # ties broken alike
    assert candidate_pool(outcome.scores, 12) == outcome.pool
    full = outcome.seen == 2000
    exact = exact_scores(oracle)
    torch.testing.assert_close(outcome.scores[full], exact[full], rtol=0, atol=1e-12)
    assert 0 <= outcome.evaluations <= outcome.exact_evaluations == 64 * 2000


def test_the_race_stops_early_on_clearly_harmful_heads():
    effects = {Head(i // 8, i % 8): -0.2 for i in range(40)}
    effects.update({"L7H7": 0.1, "L7H6": 0.08})
    oracle = SyntheticOracle(8, 8, n_dist=1000, base_acc=0.6, effects=effects, noise=0.02, seed=0)
    outcome = racing_scores(oracle, 4, RacingOptions())
    assert outcome.pool == candidate_pool(exact_scores(oracle), 4)
    assert outcome.saved > 0.4
    assert outcome.status.count("out") >= 40
    assert max(outcome.seen.flatten()[:40].tolist()) < 1000  # every harmful head stopped before the end


def test_a_margin_saves_more_and_keeps_its_guarantee():
    oracle, _ = realistic_oracle(8, 8, 3)
    exact = exact_scores(oracle).flatten()
    pool = candidate_pool(exact.view(8, 8), 12)
    boundary = min(float(exact[h.layer * 8 + h.head]) for h in pool)
    outside = max(float(exact[i]) for i in range(64) if Head(i // 8, i % 8) not in pool)
    plain = racing_scores(oracle, 12, RacingOptions())
    loose = racing_scores(oracle, 12, RacingOptions(margin=0.05))
    assert loose.evaluations < plain.evaluations
    assert len(loose.pool) == 12
    for i, st in enumerate(loose.status):
        if st == "out":
            assert exact[i] < boundary + 0.05
        if st == "in":
            assert exact[i] > outside - 0.05


def test_racing_options_are_validated():
    oracle = SyntheticOracle(2, 2, n_dist=20)
    for bad in (dict(delta=0.0), dict(delta=1.0), dict(margin=-0.1), dict(first=0), dict(growth=1.0), dict(seed=-1)):
        with pytest.raises(ValueError):
            racing_scores(oracle, 2, RacingOptions(**bad))
    with pytest.raises(ValueError, match="pool_size"):
        score_heads("racing", oracle)
    assert score_heads("racing", oracle, pool_size=2).scorer == "racing"
    with pytest.raises(ValueError, match="delta"):
        SearchConfig(scorer="racing", delta=0.0).validate()
    with pytest.raises(ValueError, match="margin"):
        SearchConfig(scorer="racing", margin=-1.0).validate()


def test_the_manifest_and_plan_know_the_racing_scorer():
    assert SearchConfig(scorer="racing", delta=0.01).manifest_options()["racing"] == {"delta": 0.01, "margin": 0.0}
    assert "racing" not in SearchConfig().manifest_options()  # earlier run directories resume unchanged
    plan = plan_search(4, 4, 100, 50, k=2, pool_size=4, scorer="racing")
    stage = next(s for s in plan.stages if s.name == "stage 1 (racing)")
    assert (stage.units, stage.bound) == (racing_cost(16, 100)[0], True)


def test_the_race_is_recorded_and_resumes_without_evaluating(tmp_path):
    oracle, _ = realistic_oracle(4, 4, 5)
    manifest = {"model": "synthetic", "task": "planted"}
    with RunDir.open(tmp_path / "run", manifest) as run:
        first = racing_scores(RecordingOracle(oracle, run), 4, RacingOptions())
    splits = {ev.split for ev in RunDir(tmp_path / "run").evaluations()}
    assert "dist" in splits and all(s == "dist" or parse_subsplit(s) for s in splits)
    with RunDir.open(tmp_path / "run", manifest) as run:
        again = RecordingOracle(oracle, run)
        second = racing_scores(again, 4, RacingOptions())
    assert again.misses == 0 and again.hits > 0
    assert torch.equal(first.scores, second.scores) and first.pool == second.pool


def test_subsplit_evaluations_on_a_model_equal_the_full_pass(tiny_model):
    task = planted_task(tiny_model, n=16)
    oracle = LocalOracle(tiny_model, task, batch_size=4, progress=False)
    sets = [HeadSet(), HeadSet.parse("L0H1"), HeadSet.parse("L2H3")]
    full = oracle.evaluate("dist", sets)
    ends = [5, 11, 16]
    parts = [oracle.evaluate(subsplit(1, a, b), sets) for a, b in zip([0, 5, 11], ends)]
    order = subsplit_indices(subsplit(1, 0, 16), 16)
    assert torch.equal(torch.cat(parts, 1), full[:, order])
    race = racing_scores(oracle, 3, RacingOptions(first=4))
    assert race.pool == candidate_pool(exact_scores(oracle), 3)
    oracle.close()


def test_a_search_with_the_racing_scorer_selects_as_exact_and_resumes(tiny_model, tmp_path):
    import cel_lens as cl

    task = planted_task(tiny_model, n=16, heads="L1H2", name="planted_l1h2")
    exact = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, out=tmp_path / "exact", progress=False)
    racing = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, scorer="racing", delta=0.1,
                       out=tmp_path / "racing", progress=False)
    assert racing.result.heads == exact.result.heads == "L1H2"
    assert RunDir(tmp_path / "racing").manifest["options"]["racing"] == {"delta": 0.1, "margin": 0.0}
    again = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, scorer="racing", delta=0.1,
                      out=tmp_path / "racing", progress=False)
    assert again.oracle.misses == 0 and again.result == racing.result

"""Algorithm 1 over synthetic oracles with planted effects: recovery, interactions and the pool's
limit, tie-breaking, determinism, and the order of discovery and test evaluations."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
import torch

from cel_lens.config import SearchConfig
from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import Oracle, Stage1Scores, TestSplitError
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.result import NullTest
from cel_lens.scoring import exact_scores
from cel_lens.selection import (
    DEFAULT_POOL_SIZE,
    Result,
    candidate_pool,
    evaluate_subsets,
    fix_selection,
    run_search,
    select_best,
    stage1,
    stage2,
)
from cel_lens.selection import test_statistics as held_out_statistics  # an alias pytest does not collect
from cel_lens.testing import SyntheticOracle

PLANTED = "L1H3+L3H5+L4H0"
HARMFUL = ["L0H0", "L0H5", "L1H1", "L2H2", "L2H7", "L3H0", "L4H4", "L5H1", "L5H6", "L5H7"]


def planted_oracle(seed: int = 0, **kw) -> SyntheticOracle:
    """48 heads: three beneficial (+6 pp each), ten harmful (-5..-14 pp), the rest near-neutral
    (N(0, 0.5 pp)), 5% per-example label noise."""
    effects = {h: 0.06 for h in HeadSet.parse(PLANTED)}
    effects.update({h: -0.05 - 0.01 * i for i, h in enumerate(HARMFUL)})
    args = dict(n_dist=1000, n_test=1000, base_acc=0.5, effects=effects, background_sd=0.005, noise=0.05, seed=seed)
    args.update(kw)
    return SyntheticOracle(6, 8, **args)


class CountingOracle:
    """Wraps an oracle and logs every call as (split, number of head sets)."""

    def __init__(self, inner):
        self.inner = inner
        self.n_layers, self.n_heads = inner.n_layers, inner.n_heads
        self.log: list[tuple[str, list[HeadSet]]] = []

    def evaluate(self, split, head_sets):
        self.log.append((split, list(head_sets)))
        return self.inner.evaluate(split, head_sets)


# -- the oracle ------------------------------------------------------------------------------------


def test_synthetic_oracle_is_deterministic_and_follows_its_model():
    o1, o2 = planted_oracle(seed=3), planted_oracle(seed=3)
    sets = [HeadSet(), HeadSet.parse(PLANTED), HeadSet.parse("L0H0")]
    assert torch.equal(o1.evaluate("dist", sets), o2.evaluate("dist", sets))
    assert not torch.equal(o1.evaluate("dist", sets), planted_oracle(seed=4).evaluate("dist", sets))
    assert not torch.equal(o1.evaluate("dist", sets[:1]), o1.evaluate("test", sets[:1]))  # splits differ
    assert isinstance(o1, Oracle)
    # empirical accuracy tracks the population accuracy (n = 20000: sd < 0.004)
    big = SyntheticOracle(2, 2, n_dist=20000, base_acc=0.4, effects={"L1H0": 0.25}, noise=0.1)
    acc = big.evaluate("dist", [HeadSet(), HeadSet.parse("L1H0")]).double().mean(1)
    assert float(acc[0]) == pytest.approx(0.4 * 0.9 + 0.6 * 0.1, abs=0.015)
    assert float(acc[1]) == pytest.approx(0.65 * 0.9 + 0.35 * 0.1, abs=0.015)
    assert big.true_gain("L1H0") == pytest.approx(0.25 * 0.8)
    with pytest.raises(ValueError):
        big.evaluate("dist", [HeadSet.parse("L2H0")])  # out of range


def test_exact_scores_layout_and_signs():
    o = SyntheticOracle(3, 4, n_dist=500, effects={"L2H1": 0.2, "L0H3": -0.1})
    s = exact_scores(o, chunk=5)
    assert s.shape == (3, 4) and s.dtype == torch.float64
    assert tuple(divmod(int(s.argmax()), 4)) == (2, 1)
    assert tuple(divmod(int(s.argmin()), 4)) == (0, 3)
    assert s[2, 1] > 0.15 and s[0, 3] < -0.05
    others = s.clone()
    others[2, 1] = others[0, 3] = 0
    assert torch.count_nonzero(others) == 0  # neutral heads: exactly no change without noise
    # every single head and the intact model evaluated once on dist, nothing on test
    assert sorted(o.calls) == sorted([("dist", HeadSet())] + [("dist", HeadSet([Head(l, h)])) for l in range(3) for h in range(4)])


def test_candidate_pool_order_ties_and_nan():
    scores = torch.tensor([[0.1, 0.3, float("nan")], [0.3, -0.2, 0.1]])
    assert candidate_pool(scores, 3) == [Head(0, 1), Head(1, 0), Head(0, 0)]
    assert candidate_pool(scores, 10)[-1] == Head(0, 2)  # NaN last; m > heads keeps all
    assert len(candidate_pool(scores, 10)) == 6
    with pytest.raises(ValueError):
        candidate_pool(scores, 0)


def test_default_pool_size_gives_298_subsets():
    assert DEFAULT_POOL_SIZE == 12
    o = SyntheticOracle(3, 4, n_dist=50)
    subsets = evaluate_subsets(o, candidate_pool(exact_scores(o), DEFAULT_POOL_SIZE), 3)
    assert len(subsets) == 12 + 66 + 220 == 298
    assert len({s.heads for s in subsets}) == 298


# -- recovery ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_search_recovers_planted_subset(seed):
    oracle = planted_oracle(seed)
    r = run_search(oracle, config=SearchConfig(k=3, pool_size=12, n_null=50, n_boot=2000), progress=False)
    assert r.heads == PLANTED
    assert set(HeadSet.parse(PLANTED)) <= {Head.parse(h) for h in r.discovery.pool}
    assert not set(HARMFUL) & set(r.discovery.pool)
    assert r.discovery.gain > 0.12 and r.test.gain > 0.12
    assert r.test.ci_low > 0.08 and r.test.ci_high < 0.2 and r.test.ci_low <= r.test.gain <= r.test.ci_high
    assert r.test.p_value < 1e-6
    assert r.null.p < 0.05
    assert abs(r.test.gain - oracle.true_gain(PLANTED)) < 0.04
    assert r.test.acc_ablated - r.test.acc_intact == pytest.approx(r.test.gain)
    assert r.n_dist == r.n_test == 1000 and len(r.discovery.subsets) == 298


def _interaction_oracle() -> SyntheticOracle:
    """16 heads: A = L0H0 helps alone (+5 pp); B = L0H2 and C = L1H3 are neutral alone but +20 pp
    when ablated together; layers 2-3 are harmful; the rest neutral. No noise."""
    effects = {"L0H0": 0.05, **{f"L{l}H{h}": -0.1 for l in (2, 3) for h in range(4)}}
    return SyntheticOracle(4, 4, n_dist=600, n_test=600, effects=effects, interactions={"L0H2+L1H3": 0.2})


def test_interaction_found_when_both_heads_in_pool():
    oracle = _interaction_oracle()
    scores = exact_scores(oracle)
    assert scores[0, 2] == 0 and scores[1, 3] == 0  # invisible to stage 1
    given = Stage1Scores(scores, "dist", "exact")
    r2 = run_search(oracle, config=SearchConfig(k=2, pool_size=8, n_null=20), scores=given, progress=False)
    assert r2.heads == "L0H2+L1H3" and r2.gain > 0.15
    r3 = run_search(oracle, config=SearchConfig(k=3, pool_size=8, n_null=20), scores=given, progress=False)
    assert r3.heads == "L0H0+L0H2+L1H3"


def test_interaction_missed_when_pool_excludes_one_head():
    """The limit of a pool built from single-head effects: with m = 4 the pool is A plus the first
    neutral heads in canonical order (L0H1, L0H2, L0H3), so C = L1H3 is out and the pair is missed."""
    oracle = _interaction_oracle()
    r = run_search(oracle, config=SearchConfig(k=2, pool_size=4, n_null=20), progress=False)
    assert "L1H3" not in r.discovery.pool and "L0H2" in r.discovery.pool
    assert r.heads == "L0H0"
    assert r.test.gain < oracle.true_gain("L0H2+L1H3") - 0.1


# -- selection rules -------------------------------------------------------------------------------


def test_tie_prefers_fewer_heads():
    oracle = SyntheticOracle(3, 3, n_dist=300, effects={"L1H1": 0.1})  # every superset of {L1H1} ties
    r = run_search(oracle, config=SearchConfig(k=3, pool_size=9, n_null=5, posthoc=False), progress=False)
    assert r.heads == "L1H1"
    top = [s for s in r.discovery.subsets if s["dist_acc"] == r.discovery.acc_ablated]
    assert len(top) == 1 + 8 + 28  # the tie really is there


def test_tie_prefers_higher_summed_score_then_canonical_order():
    # L2H0 and L10H0 give identical per-example results; k = 1 makes them tie on discovery
    oracle = SyntheticOracle(11, 1, n_dist=200, effects={"L2H0": 0.1, "L10H0": 0.1})
    base = torch.zeros(11, 1, dtype=torch.float64)
    hi_10 = base.clone()
    hi_10[2, 0], hi_10[10, 0] = 0.1, 0.2
    hi_2 = base.clone()
    hi_2[2, 0], hi_2[10, 0] = 0.2, 0.1
    same = base.clone()
    same[2, 0] = same[10, 0] = 0.1
    pick = lambda s: run_search(
        oracle,
        config=SearchConfig(k=1, pool_size=3, n_null=1, posthoc=False),
        scores=Stage1Scores(s, "dist", "given"),
        progress=False,
    ).heads
    assert pick(hi_10) == "L10H0"
    assert pick(hi_2) == "L2H0"
    assert pick(same) == "L2H0"  # canonical (layer, head) order, not string order ("L10H0" < "L2H0")


def test_selection_independent_of_pool_order():
    oracle = planted_oracle(0, n_dist=300, n_test=100)
    scores = exact_scores(oracle)
    pool = candidate_pool(scores, 8)
    best = select_best(evaluate_subsets(oracle, pool, 3, scores=scores)).heads
    for perm in list(itertools.permutations(range(8)))[::5000]:
        shuffled = [pool[i] for i in perm]
        assert select_best(evaluate_subsets(oracle, shuffled, 3, scores=scores)).heads == best


def test_beam_search():
    oracle = planted_oracle(0)
    scores = exact_scores(oracle)
    pool = candidate_pool(scores, 20)
    beam = evaluate_subsets(oracle, pool, 3, strategy="beam", beam_width=4, scores=scores)
    assert select_best(beam).heads == HeadSet.parse(PLANTED)
    assert len(beam) < 20 + 190 + 1140
    small = candidate_pool(scores, 6)
    exhaustive = evaluate_subsets(oracle, small, 3, scores=scores)
    wide = evaluate_subsets(oracle, small, 3, strategy="beam", beam_width=100, scores=scores)
    assert {s.heads for s in wide} == {s.heads for s in exhaustive}
    assert select_best(wide) == select_best(exhaustive)
    r = run_search(
        oracle,
        config=SearchConfig(k=3, pool_size=20, strategy="beam", beam_width=4, n_null=10),
        progress=False,
    )
    assert r.heads == PLANTED and r.strategy == "beam" and r.beam_width == 4


# -- determinism, order, result ----------------------------------------------------------------------


def test_same_seed_same_result():
    a = run_search(
        planted_oracle(0, n_dist=400, n_test=400),
        config=SearchConfig(n_null=30, n_boot=500, seed=7),
        progress=False,
    )
    b = run_search(
        planted_oracle(0, n_dist=400, n_test=400),
        config=SearchConfig(n_null=30, n_boot=500, seed=7),
        progress=False,
    )
    assert a == b  # timings excluded from equality
    c = run_search(
        planted_oracle(0, n_dist=400, n_test=400),
        config=SearchConfig(n_null=30, n_boot=500, seed=8),
        progress=False,
    )
    assert c.heads == a.heads and c.test.gain == a.test.gain and c.null.gains != a.null.gains


def test_selection_fixed_before_any_test_evaluation():
    oracle = CountingOracle(planted_oracle(0, n_dist=200, n_test=200))
    r = run_search(oracle, config=SearchConfig(k=2, pool_size=6, n_null=10), progress=False)
    splits = [split for split, _ in oracle.log]
    first_test = splits.index("test")
    assert "test" not in splits[:first_test] and set(splits[first_test:]) == {"test"}
    assert oracle.log[first_test][1] == [HeadSet(), HeadSet.parse(r.heads)]


def test_given_scores_skip_stage_one():
    inner = planted_oracle(0, n_dist=200, n_test=200)
    scores = exact_scores(inner)
    oracle = CountingOracle(inner)
    given = Stage1Scores(scores, "dist", "compressed")
    r = run_search(oracle, config=SearchConfig(k=2, pool_size=5, n_null=1, posthoc=False), scores=given, progress=False)
    dist_sets = [s for split, sets in oracle.log if split == "dist" for s in sets]
    assert len(dist_sets) == 1 + 5 + 10  # intact + stage-2 subsets, no single-head sweep
    assert r.scorer == "compressed" and r.discovery.scores == scores.tolist() and r.discovery.scores_split == "dist"
    with pytest.raises(ValueError, match="shape"):
        run_search(inner, scores=Stage1Scores(torch.zeros(2, 2), "dist", "x"), progress=False)


def test_result_dict_roundtrip_and_display():
    r = run_search(
        planted_oracle(0, n_dist=200, n_test=200),
        config=SearchConfig(k=2, pool_size=5, n_null=10),
        progress=False,
    )
    d = json.loads(json.dumps(r.to_dict()))
    required = {
        "heads", "dist_acc_intact", "dist_acc_ablated", "test_acc_intact", "test_acc_ablated", "gain",
        "ci_low", "ci_high", "p_value", "null_gains", "null_p", "scores", "scorer", "pool", "subsets",
        "k", "pool_size", "n_dist", "n_test", "seed", "selected_before_test",
    }
    assert required <= set(d) and d["selected_before_test"] is True
    assert len(d["scores"]) == 6 and len(d["scores"][0]) == 8 and len(d["null_gains"]) == 10
    assert set(d["subsets"][0]) >= {"heads", "dist_acc", "dist_gain", "test_gain_posthoc"}
    assert Result.from_dict(d) == r
    assert r.head_set == HeadSet.parse(r.heads)
    text = str(r)
    assert r.heads in text and "McNemar" in text
    # post-hoc test gains of every subset are not measured or shown by default (choosing by them leaks
    # D_test); asked for, they are labelled exploratory
    assert "post-hoc" not in text and all(s["test_gain_posthoc"] is None for s in d["subsets"])
    shown = str(run_search(
        planted_oracle(0, n_dist=200, n_test=200),
        config=SearchConfig(k=2, pool_size=5, n_null=10, posthoc=True),
        progress=False,
    ))
    assert "exploratory post-hoc" in shown
    assert "<table>" in r._repr_html_()


def test_no_head_set_evaluated_twice_without_run_dir():
    """Stage 2 re-uses the stage-1 singles, the test phase re-uses S-hat: an in-memory cache."""
    inner = planted_oracle(0, n_dist=200, n_test=200)
    r = run_search(inner, config=SearchConfig(k=2, pool_size=6, n_null=30), progress=True)
    assert len(inner.calls) == len(set(inner.calls))
    assert len([c for c in inner.calls if c[0] == "dist"]) == 1 + 48 + 15  # intact, singles, new pairs
    assert r.heads in {s["heads"] for s in r.discovery.subsets}


# -- the test-split guard in every entry point --------------------------------------------------------


def test_scores_from_the_test_split_are_refused_before_any_evaluation():
    inner = planted_oracle(0, n_dist=200, n_test=200)
    leaked = exact_scores(MemoOracle(inner))  # as if computed on D_test
    oracle = CountingOracle(inner)
    with pytest.raises(TestSplitError, match="split 'test'"):
        run_search(oracle, scores=Stage1Scores(leaked, "test", "exact"), progress=False)
    with pytest.raises(TestSplitError, match="bare Tensor"):
        run_search(oracle, scores=leaked, progress=False)
    assert oracle.log == []  # refused before a single evaluation


def test_test_statistics_refuse_an_oracle_without_the_selection_fixed():
    oracle = planted_oracle(0, n_dist=200, n_test=200)
    memo = MemoOracle(oracle)
    intact, scores = stage1(memo)
    subsets, best = stage2(memo, candidate_pool(scores.values, 4), scores, intact, k=1)
    with pytest.raises(TestSplitError, match="fixed first"):
        held_out_statistics(oracle, best, subsets)  # the bare oracle: no guard, refused
    with pytest.raises(TestSplitError, match="fixed first"):
        held_out_statistics(memo, best, subsets)  # the guard, but nothing fixed yet
    with pytest.raises(TypeError, match="MemoOracle"):
        fix_selection(oracle, best)
    assert fix_selection(memo, best) is True
    held = held_out_statistics(memo, best, subsets, SearchConfig(n_null=5, n_boot=100))
    assert held.n_test == 200 and held.test.selected_before_test and held.test.seal["prior_test_reads"] == 0


def test_selected_before_test_is_computed_from_what_happened():
    fresh = run_search(planted_oracle(0, n_dist=200, n_test=200), config=SearchConfig(k=1, n_null=5), progress=False)
    assert fresh.test.selected_before_test is True
    memo = MemoOracle(planted_oracle(0, n_dist=200, n_test=200), guard_test=False)
    memo.evaluate("test", [HeadSet.parse("L1H3")])  # a peek at D_test before the search
    peeked = run_search(memo, config=SearchConfig(k=1, n_null=5), progress=False)
    assert peeked.test.selected_before_test is False
    assert "NOT fixed before D_test was read" in str(peeked)


def test_no_null_writes_no_nan():
    """A search refuses n_null=0 (the config's rule, checked before any evaluation); the test
    statistics computed without a null, and a result holding none, write no NaN and say so."""
    oracle = CountingOracle(planted_oracle(0, n_dist=200, n_test=200))
    with pytest.raises(ValueError, match="n_null must be >= 1"):
        run_search(oracle, config=SearchConfig(k=1, n_null=0), progress=False)
    assert oracle.log == []
    memo = MemoOracle(planted_oracle(0, n_dist=200, n_test=200))
    intact, scores = stage1(memo)
    subsets, best = stage2(memo, candidate_pool(scores.values, 4), scores, intact, k=1)
    fix_selection(memo, best)
    stats = held_out_statistics(memo, best, subsets, SearchConfig(k=1, n_null=0, n_boot=100))
    assert stats.null.gains == [] and stats.null.p is None and stats.null.min_p is None
    r = replace(run_search(
        planted_oracle(0, n_dist=200, n_test=200),
        config=SearchConfig(k=1, n_null=1),
        progress=False,
    ),
                null=NullTest(gains=[], p=None, min_p=None))
    json.dumps(r.to_dict(), allow_nan=False)  # strict JSON: raises on NaN
    assert "not computed" in str(r)


def test_the_interval_follows_the_config():
    """ci_method is read from the config in one place: each method gives its own interval, the
    bootstrap's depends on n_boot and seed, and an unknown one fails before any evaluation."""
    oracle = planted_oracle(0, n_dist=200, n_test=200)
    found = {m: run_search(
        oracle,
        config=SearchConfig(k=1, pool_size=4, n_null=5, n_boot=200, ci_method=m),
        progress=False,
    )
             for m in ("tango", "newcombe", "bootstrap")}
    assert {m: r.test.ci_method for m, r in found.items()} == {m: m for m in found}
    assert len({(r.test.ci_low, r.test.ci_high) for r in found.values()}) == 3
    assert all(r.test.ci_low <= r.test.gain <= r.test.ci_high for r in found.values())
    counting = CountingOracle(planted_oracle(0, n_dist=200, n_test=200))
    with pytest.raises(ValueError, match="unknown ci_method 'wald'"):
        run_search(counting, config=SearchConfig(k=1, ci_method="wald"), progress=False)
    assert counting.log == []


def test_a_search_whose_best_ablation_hurts_warns():
    harmful = {f"L{layer}H{head}": -0.05 for layer in (0, 1) for head in (0, 1)}
    oracle = SyntheticOracle(2, 2, n_dist=300, n_test=300, effects=harmful)
    with pytest.warns(UserWarning, match="least harmful"):
        r = run_search(oracle, config=SearchConfig(k=1, n_null=3), progress=False)
    assert r.discovery.gain < 0 and "least harmful" in str(r)

"""The one-standard-error rule drops heads that do nothing; the raw rule keeps them."""

from __future__ import annotations

import pytest
import torch

from cel_lens.heads import Head, HeadSet
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection import candidate_pool, run_search, select_best, select_parsimonious, stage1, stage2
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig


def _stage2(oracle):
    memo = MemoOracle(oracle)
    intact, scores = stage1(memo)
    subsets, best = stage2(memo, candidate_pool(scores.values, 6), scores, intact, k=3)
    return subsets, memo.evaluate("dist", [s.heads for s in subsets])


def test_padding_with_null_heads_is_dropped():
    # one real head; every other head only adds independent label noise, so some padded set wins raw
    oracle = SyntheticOracle(4, 4, n_dist=300, n_test=50, effects={"L1H2": 0.08}, noise=0.05, seed=3)
    subsets, bits = _stage2(oracle)
    raw = select_best(subsets)
    chosen, record = select_parsimonious(subsets, bits, "one_se")
    assert len(raw.heads) > 1 and Head.parse("L1H2") in raw.heads  # the raw rule pads (the failure before)
    assert chosen.heads == HeadSet.parse("L1H2")
    assert record["best"] == str(raw.heads) and record["chosen"] == "L1H2" and record["tolerance"] > 0
    assert select_parsimonious(subsets, bits, "best")[0] == raw


def test_the_rule_and_its_choice_are_recorded_in_the_result():
    oracle = SyntheticOracle(4, 4, n_dist=300, n_test=300, effects={"L1H2": 0.08}, noise=0.05, seed=3)
    r = run_search(oracle, config=SearchConfig(k=3, pool_size=6, n_null=5, parsimony="one_se"), progress=False)
    assert r.discovery.parsimony["rule"] == "one_se" and r.discovery.parsimony["chosen"] == r.heads == "L1H2"
    assert "within one standard error" in str(r)
    default = run_search(oracle, config=SearchConfig(k=3, pool_size=6, n_null=5), progress=False)
    assert default.discovery.parsimony["rule"] == "backward" and default.heads == "L1H2"
    assert "dropped from the most accurate" in str(default)
    raw = run_search(oracle, config=SearchConfig(k=3, pool_size=6, n_null=5, parsimony="best"), progress=False)
    assert raw.heads == r.discovery.parsimony["best"] and raw.discovery.parsimony["rule"] == "best"
    with pytest.raises(ValueError, match="parsimony"):
        run_search(oracle, config=SearchConfig(k=3, pool_size=6, parsimony="smallest"), progress=False)
    with pytest.raises(ValueError, match="shape"):
        select_parsimonious([], torch.zeros(1, 3, dtype=torch.bool))


def test_backward_elimination_drops_passengers_and_names_those_another_rule_keeps():
    oracle = SyntheticOracle(4, 4, n_dist=300, n_test=50, effects={"L1H2": 0.08}, noise=0.05, seed=3)
    subsets, bits = _stage2(oracle)
    raw = select_best(subsets)
    chosen, record = select_parsimonious(subsets, bits, "backward")
    assert chosen.heads == HeadSet.parse("L1H2") and record["passengers"] == []
    assert [d["from"] for d in record["dropped"]][0] == str(raw.heads)
    assert all(d["p"] > d["level"] for d in record["dropped"])
    _, kept = select_parsimonious(subsets, bits, "best")
    assert {p["head"] for p in kept["passengers"]} == {str(h) for h in raw.heads if h != Head.parse("L1H2")}


def test_two_real_heads_are_both_kept():
    oracle = SyntheticOracle(4, 4, n_dist=2000, n_test=50, effects={"L1H2": 0.08, "L3H0": 0.08}, noise=0.05, seed=1)
    subsets, bits = _stage2(oracle)
    chosen, record = select_parsimonious(subsets, bits, "backward")
    assert chosen.heads == HeadSet.parse("L1H2+L3H0") and record["passengers"] == []

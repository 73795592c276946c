"""The specificity comparison: stage 2 rerun on random pools (D_dist only, before the selection is
fixed), their winners' test gains against S-hat's, and the case where no other pool exists."""

from __future__ import annotations

import pytest

from cel_lens.heads import HeadSet
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig


class LoggingOracle:
    def __init__(self, inner):
        self.inner, self.n_layers, self.n_heads = inner, inner.n_layers, inner.n_heads
        self.log: list[tuple[str, str]] = []

    def evaluate(self, split, head_sets, *, stage=""):
        self.log += [(split, stage)] * len(head_sets)
        return self.inner.evaluate(split, head_sets)


def test_random_pool_winners_are_found_on_dist_and_compared_on_test():
    effects = {"L1H3": 0.12, "L2H1": -0.1, "L0H2": -0.08}
    oracle = LoggingOracle(SyntheticOracle(4, 4, n_dist=400, n_test=400, effects=effects, noise=0.05, seed=2))
    r = run_search(
        oracle,
        config=SearchConfig(k=2, pool_size=4, n_null=10, n_specificity=9, posthoc=False),
        progress=False,
    )
    sp = r.stability.specificity
    assert "L1H3" in HeadSet.parse(r.heads)
    assert sp["n_pools"] == 9 == len(sp["winners"]) == len(sp["test_gains"])
    # pools of 4 of 16 heads other than the search's pool: C(16, 4) - 1
    assert sp["n_possible"] == 1819 and sp["min_p"] == pytest.approx(0.1)
    pools_with_shat = sum("L1H3" in w for w in sp["winners"])
    beaten = sum(g >= r.test.gain - 1e-12 for g in sp["test_gains"])
    assert sp["p_value"] == pytest.approx((1 + beaten) / 10) and beaten <= pools_with_shat
    # stage 2 on the random pools ran before the selection was fixed, and only on D_dist
    stages = [stage for split, stage in oracle.log if split == "dist"]
    assert stages and all(split == "test" for split, _ in oracle.log[len(stages):])
    assert ("test", "specificity") in oracle.log
    assert "specificity" in str(r) and "random 4-head pools" in str(r)


def test_specificity_says_nothing_when_the_pool_is_every_head():
    oracle = SyntheticOracle(1, 4, n_dist=300, n_test=300, effects={"L0H0": 0.15})
    r = run_search(oracle, config=SearchConfig(k=2, pool_size=12, n_null=10, n_specificity=20), progress=False)
    assert r.heads == "L0H0" and r.stability.specificity["n_pools"] == 0 and r.stability.specificity["p_value"] is None
    assert "not applicable" in str(r)


def test_off_by_default():
    r = run_search(
        SyntheticOracle(2, 2, n_dist=100, n_test=100, effects={"L0H0": 0.2}),
        config=SearchConfig(n_null=2),
        progress=False,
    )
    assert r.stability.specificity is None and "specificity" not in str(r)
    assert HeadSet.parse(r.heads) == HeadSet.parse("L0H0")

"""The search plan counts what a search evaluates: checked against the evaluations a synthetic
oracle actually receives."""

from __future__ import annotations

import math

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection import run_search
from cel_lens.selection.plan import BatchTimer, plan_search, stage2_sets
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig

ORACLE = dict(n_dist=120, n_test=80, effects={"L1H2": 0.06, "L2H0": 0.04}, background_sd=0.01, seed=3)


def _calls(oracle: SyntheticOracle, split: str) -> int:
    return sum(1 for s, _ in oracle.calls if s == split)


@pytest.mark.parametrize("k, pool, strategy", [(2, 5, "exhaustive"), (3, 6, "exhaustive"), (3, 8, "beam")])
def test_plan_counts_the_evaluations_the_search_makes(k, pool, strategy):
    oracle = SyntheticOracle(4, 5, **ORACLE)
    plan = plan_search(4, 5, 120, 80, k=k, pool_size=pool, strategy=strategy, beam_width=3, n_null=10, posthoc=True)
    run_search(
        oracle,
        config=SearchConfig(k=k, pool_size=pool, strategy=strategy, beam_width=3, n_null=10, n_boot=100, posthoc=True),
        progress=False,
    )
    stages = {s.name: s for s in plan.stages}
    dist = stages["intact"].head_sets + stages["stage 1 (exact)"].head_sets + stages["stage 2"].head_sets
    if strategy == "exhaustive":
        assert _calls(oracle, "dist") == dist == 1 + 20 + sum(math.comb(pool, j) for j in range(2, k + 1))
    else:
        assert _calls(oracle, "dist") <= dist and stages["stage 2"].bound
    test = stages["test"].head_sets + stages["post-hoc"].head_sets
    assert stages["post-hoc"].head_sets + 2 <= _calls(oracle, "test") <= test
    assert all(s.examples == (120 if s.split == "dist" else 80) for s in plan.stages)
    assert plan.units == sum(s.head_sets * s.examples for s in plan.stages)


def test_stage2_counts_by_hand():
    assert stage2_sets(12, 3) == (12 + 66 + 220, False)  # the paper's default: 298 joint ablations
    assert stage2_sets(4, 3) == (4 + 6 + 4, False)
    assert stage2_sets(10, 3, "beam", 2) == (10 + 2 * 9 + 2 * 8, True)


def test_plan_notes_a_pool_larger_than_the_model_and_refuses_impossible_k():
    plan = plan_search(1, 4, 100, 100, k=3, pool_size=12)
    assert any("every one of the model's 4 heads" in n for n in plan.notes)
    with pytest.raises(ValueError, match="larger than the pool"):
        plan_search(4, 4, 100, 100, k=4, pool_size=3)
    with pytest.raises(ValueError, match="larger than the model's 4 heads"):
        plan_search(1, 4, 100, 100, k=5, pool_size=6)


def test_plan_estimates_from_a_rate_and_prints_each_stage():
    plan = plan_search(2, 3, 100, 50, k=2, pool_size=3, n_null=4)
    assert plan.seconds() is None and "no batch timed" in plan.estimate_line()
    timed = plan.timed(0.001)
    assert timed.seconds() == pytest.approx(plan.units * 0.001)
    assert timed.seconds(timed.stages[1]) == pytest.approx(6 * 100 * 0.001)
    text = str(timed)
    assert text.startswith("search plan: 2 layers x 3 heads") and "stage 1 (exact)" in text and "~" in text
    assert "<table>" in timed._repr_html_() and timed.to_dict()["units"] == plan.units
    resumed = timed.__class__(**{**timed.__dict__, "recorded": plan.units})
    assert resumed.seconds() == 0


class _Clock:
    """A fake ``(cpu, wall)`` clock: each reading advances by the next step."""

    def __init__(self, *steps: tuple[float, float]) -> None:
        self.now, self.steps = (0.0, 0.0), list(steps)

    def __call__(self) -> tuple[float, float]:
        if self.steps:
            d_cpu, d_wall = self.steps.pop(0)
            self.now = (self.now[0] + d_cpu, self.now[1] + d_wall)
        return self.now


def test_batch_timer_skips_intact_only_batches_and_fires_once():
    rates = []
    timer = BatchTimer(on_first=rates.append, clock=_Clock((0, 0), (5, 5), (2, 2), (9, 9)))
    timer([HeadSet()], torch.ones(1, 10, dtype=torch.bool), 5.0)
    assert timer.seconds_per_unit is None
    timer([HeadSet(), HeadSet.parse("L0H1")], torch.ones(2, 10, dtype=torch.bool), 2.0)
    timer([HeadSet.parse("L0H2")], torch.ones(1, 10, dtype=torch.bool), 9.0)
    assert rates == [pytest.approx(0.1)] and timer.seconds_per_unit == pytest.approx(0.1)


def test_batch_timer_rates_cpu_time_and_measures_the_cpu_share():
    """Under load a batch's wall time overstates its work: the rate is CPU seconds (the share of the
    window since the previous evaluation), and the share says what wall time to expect."""
    timer = BatchTimer(clock=_Clock((0, 0), (1.0, 4.0)))  # 1 CPU s in 4 wall s: a quarter of a core
    timer([HeadSet.parse("L0H0")], torch.ones(1, 10, dtype=torch.bool), 4.0)
    assert timer.cpu_share == pytest.approx(0.25) and timer.seconds_per_unit == pytest.approx(0.1)
    plan = plan_search(2, 3, 100, 50, k=2, pool_size=3, n_null=4).timed(timer.seconds_per_unit, timer.cpu_share)
    assert plan.wall_seconds() == pytest.approx(4 * plan.seconds())
    assert "0.25 CPU s per wall s" in plan.estimate_line() and "wall" in str(plan)
    line = plan.estimate_line()  # one rate: it says what it counts at that rate
    assert "units of head sets evaluated apart" in line and "whole-model passes are counted at this rate, untimed" in line
    assert "untimed" not in plan.timed(0.1, 0.25, 0.5, 0.2).estimate_line()  # every rate measured
    assert plan.to_dict()["wall_seconds"] == pytest.approx(plan.wall_seconds())


def test_batch_timer_scales_a_batch_to_an_average_head_by_the_layers_its_passes_run():
    """Exact stage 1's first batch holds the first layers' heads, whose passes run the most layers:
    its time per layer, scaled to a head at an average layer, is what a whole scan costs per head."""
    L = 10
    timer = BatchTimer(n_layers=L, clock=_Clock((0, 0), (3.8, 3.8)))
    # layers 0 and 1 (10 + 9 layers run) on 4 examples in 3.8 s: 0.05 s per layer per example
    timer([HeadSet.parse("L0H0"), HeadSet.parse("L1H3")], torch.ones(2, 4, dtype=torch.bool), 3.8)
    assert timer.seconds_per_unit == pytest.approx(0.05 * (L + 1) / 2)
    # a set resumes at its first ablated layer; the intact model runs them all
    other = BatchTimer(n_layers=L, clock=_Clock((0, 0), (1.8, 1.8)))
    other([HeadSet(), HeadSet.parse("L7H0+L2H1")], torch.ones(2, 1, dtype=torch.bool), 1.8)
    assert other.seconds_per_unit == pytest.approx(1.8 / (10 + 8) * (L + 1) / 2)


def test_a_memo_oracle_times_what_it_evaluates_not_what_it_remembers():
    seen = []
    memo = MemoOracle(SyntheticOracle(2, 2, n_dist=10, n_test=10))
    memo.timer = lambda sets, correct, seconds: seen.append((len(sets), tuple(correct.shape)))
    memo.evaluate("dist", ["L0H0", "L0H1"])
    memo.evaluate("dist", ["L0H0", "L1H1"])
    assert seen == [(2, (2, 10)), (1, (1, 10))]



def test_plan_charges_each_pass_at_its_own_rate():
    """Stage 1's scan at the layered rate, sets apart at theirs, whole-model passes per example:
    by hand, 2 layers x 3 heads, 10 D_dist and 5 D_test examples, k = 1, a pool of 2, a null of 1."""
    plan = plan_search(2, 3, 10, 5, k=1, pool_size=2, n_null=1)
    timed = plan.timed(1.0, 2.0, full_seconds_per_example=10.0, apart_seconds_per_unit=3.0)
    by_name = {s.name: timed.seconds(s) for s in plan.stages}
    assert by_name["intact"] == 10 * 10.0
    assert by_name["stage 1 (exact)"] == 6 * 10 * 1.0
    assert by_name["test"] == 5 * 10.0 + 2 * 5 * 3.0  # intact, S-hat and one null set on 5 examples
    assert by_name["controls (fit)"] == 2 * 10 * 10.0 and by_name["controls"] == 2 * 5 * 10.0 + 2 * 5 * 3.0
    assert timed.seconds() == pytest.approx(sum(by_name.values()))
    assert timed.wall_seconds() == pytest.approx(timed.seconds() / 2.0)
    plain = plan.timed(1.0)  # untimed kinds cost a unit
    assert plain.seconds() == plan.units * 1.0

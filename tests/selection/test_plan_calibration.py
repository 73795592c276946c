"""A plan's calibration (``cel_lens/selection/plan_calibration.py``): what it times, within its
budget, and the rates it measures."""

from __future__ import annotations

import pytest

from cel_lens.heads import HeadSet
from cel_lens.selection.plan import plan_search
from cel_lens.testing import SyntheticOracle


def test_plan_calibration_says_what_it_runs_first_and_keeps_to_its_budget(tiny_model, capsys):
    """``cl.plan`` on SmolLM2 BoolQ cost 343 CPU s and said nothing first: it now says what it will
    run, cuts the heads it times to its CPU budget, and reports what it spent and the CPU share."""
    import cel_lens as cl
    from cel_lens.testing import planted_task

    task = planted_task(tiny_model, n=16)
    plan = cl.plan(tiny_model, task, k=1, pool_size=3, n_null=4, calibration_examples=4, progress=True)
    err = capsys.readouterr().err
    assert "plan: calibrating" in err and "capped at 45 CPU s" in err
    assert 0 < plan.calibration_cpu_s < 45 and plan.cpu_share > 0
    assert plan.wall_seconds() == pytest.approx(plan.seconds() / plan.cpu_share)
    assert "its own calibration took" in str(plan)
    cut = cl.plan(tiny_model, task, k=1, pool_size=3, n_null=4, calibration_examples=4, calibration_budget_s=1e-9,
                  progress=True)
    assert "timing 1 heads (layers [1])" in capsys.readouterr().err and cut.seconds_per_unit > 0


def test_plan_rate_is_scaled_to_d_dist_mean_prompt_length(tiny_model):
    """A few examples are no average: the rate is scaled by D_dist's mean prompt tokens over the
    sample's (BoolQ passages vary several-fold)."""
    from cel_lens.selection.plan_calibration import mean_prompt_tokens
    from cel_lens.tasks.base import Example

    short = [Example("a", "one two"), Example("b", "one two")]
    long = short + [Example("c", "one two " * 20)]
    assert mean_prompt_tokens(tiny_model, long) > 2 * mean_prompt_tokens(tiny_model, short)
    assert mean_prompt_tokens(None, long) is None


def test_plan_calibration_measures_the_cpu_share_over_the_heads_it_times(monkeypatch):
    """The intact pass (with a search's one-off setup) may run at another CPU share than the heads'
    passes a search repeats: the plan's share is the heads' window's."""
    from cel_lens.selection import plan_calibration as module

    phase = {"now": (0.0, 0.0)}
    clock = {"cpu": 0.0, "wall": 0.0}

    def fake_clock() -> tuple[float, float]:
        d_cpu, d_wall = phase["now"]
        clock["cpu"] += d_cpu
        clock["wall"] += d_wall
        return clock["cpu"], clock["wall"]

    class Phased(SyntheticOracle):
        def evaluate(self, split, head_sets, *, stage=""):
            phase["now"] = (1.0, 1.0) if all(not hs for hs in map(HeadSet.parse, head_sets)) else (2.0, 1.0)
            return super().evaluate(split, head_sets, stage=stage)

    monkeypatch.setattr(module, "cpu_and_wall", fake_clock)
    oracle = Phased(3, 4, n_dist=8, n_test=8)
    plan = module.calibrate(plan_search(3, 4, 8, 8, k=1, pool_size=3, n_null=4), oracle, [], [], budget_s=1e9, show=False)
    assert plan.cpu_share == pytest.approx(2.0)  # the whole calibration ran at 1.5 CPU s per wall s
    assert plan.calibration_cpu_s == pytest.approx(clock["cpu"])


def test_calibration_sets_keep_to_the_budget_by_layers_then_by_heads():
    """Hand-computed: 30 layers x 9 heads, an intact pass of 12 CPU s and 45 s to spend: layers 7 and
    22 would cost 12 x (1 + 6.9 + 2.4) s, so the middle layer alone, and of it
    floor((45 - 12) / (12 x 16 / 30)) = 5 heads. With room, every head of both layers."""
    from cel_lens.selection.plan_calibration import calibration_sets

    cut = calibration_sets(30, 9, [7, 22], 12.0, 45.0)
    assert [str(hs) for hs in cut] == ["L14H0", "L14H1", "L14H2", "L14H3", "L14H4"]
    assert len(calibration_sets(30, 9, [7, 22], 0.1, 45.0)) == 18
    assert [str(hs) for hs in calibration_sets(30, 9, [7, 22], 100.0, 45.0)] == ["L14H0"]  # at least one head


def test_calibration_times_sets_apart_in_their_own_calls():
    """The sets apart are timed one call each after the stage-1 heads, and never heads the scan timed."""
    from cel_lens.selection.plan_calibration import apart_sets, calibrate

    calls = []

    class Seen(SyntheticOracle):
        def evaluate(self, split, head_sets, *, stage=""):
            calls.append([str(HeadSet.parse(hs)) for hs in head_sets])
            return super().evaluate(split, head_sets, stage=stage)

    assert [str(hs) for hs in apart_sets(30, 9)] == ["L5H8", "L14H7", "L24H6"]
    plan = calibrate(plan_search(4, 2, 8, 8, k=1, pool_size=2, n_null=2), Seen(4, 2, n_dist=8, n_test=8), [], [],
                     heads=4, budget_s=1e9, show=False)
    assert calls[0] == ["intact"] and calls[1] == ["L1H0", "L1H1", "L2H0", "L2H1"]
    assert [str(hs) for hs in apart_sets(4, 2)] == ["L0H1", "L2H0"]  # layers 0, 2 (rounded), heads from the last
    assert calls[2:] == [["L0H1"]]  # L2H0 was timed in the scan already
    assert plan.apart_seconds_per_unit is not None and plan.full_seconds_per_example is not None

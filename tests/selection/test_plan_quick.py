"""``--quick``'s budget: the cuts it takes, in order, priced at the calibrated rate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cel_lens.config import QUICK, SearchConfig
from cel_lens.selection.plan import plan_search
from cel_lens.selection.plan_quick import QUICK_CUTS, fit_quick, price_like

PRESET = replace(SearchConfig(), k=QUICK["k"], pool_size=QUICK["pool_size"], n_null=QUICK["n_null"])


def _plans(rate: float, share: float = 1.0, preset: SearchConfig = PRESET):
    """``preset``'s plan on a 30 x 9 model at 200/200 examples, timed at ``rate`` CPU s a unit, and
    the replan function ``fit_quick`` prices its cuts with."""
    def replan(changes):
        cut = replace(preset, **{k: v for k, v in changes.items() if k not in ("n_dist", "n_test")})
        return plan_search(30, 9, changes.get("n_dist", 200), changes.get("n_test", 200), config=cut)

    return replan({}).timed(rate, share), replan


def test_a_plan_within_the_budget_takes_no_cut():
    timed, replan = _plans(rate=1e-4)
    fit = fit_quick(timed, replan, budget_s=600)
    assert fit.changes == {} and fit.gave_up == () and fit.fits
    assert "nothing given up" in fit.lines()[0]


def test_cuts_are_taken_in_order_until_the_estimate_fits():
    timed, replan = _plans(rate=0.01)  # 64,000 units at 0.01 s: ~10.7 min; the pre-screen alone: far less
    before = timed.wall_seconds()
    fit = fit_quick(timed, replan, budget_s=before / 3)
    assert fit.changes == dict(QUICK_CUTS[0].changes) and fit.gave_up == (QUICK_CUTS[0].gives_up,)
    assert fit.after_s < fit.budget_s < fit.before_s == pytest.approx(before)
    # the estimate after is the replanned search's, priced by hand at the same rate
    assert fit.after_s == pytest.approx(replan(fit.changes).units * 0.01, rel=0.01)


def test_an_impossible_budget_takes_every_cut_and_says_it_does_not_fit():
    timed, replan = _plans(rate=1.0, share=2.0)
    fit = fit_quick(timed, replan, budget_s=1.0)
    assert len(fit.gave_up) == len(QUICK_CUTS) and not fit.fits
    assert fit.changes["n_dist"] == 50 and fit.changes["prescreen_keep"] == 0.05 and fit.changes["n_null"] == 10
    assert fit.changes["pool_size"] == 4 and fit.changes["n_test"] == 50
    assert "still does not fit" in fit.lines()[0]
    assert fit.to_dict()["fits"] is False and fit.to_dict()["gave_up"] == list(fit.gave_up)


def test_a_cut_never_overrides_an_option_the_user_set():
    timed, replan = _plans(rate=1.0)
    fit = fit_quick(timed, replan, explicit={"n_dist", "scorer"}, budget_s=1.0)
    assert "n_dist" not in fit.changes and "scorer" not in fit.changes
    assert fit.changes["n_test"] == 50  # the later cut of D_test replaces the earlier one


def test_an_untimed_plan_changes_nothing():
    _, replan = _plans(rate=1.0)
    fit = fit_quick(replan({}), replan, budget_s=1.0)
    assert fit.changes == {} and fit.fits is None and "could not be timed" in fit.lines()[0]
    assert fit.to_dict()["fits"] is None


def test_each_cut_lowers_the_estimate():
    """Every cut, taken after the ones before it, makes the priced plan cheaper (a cut that cost
    nothing would only give something up)."""
    timed, replan = _plans(rate=1.0)
    changes: dict = {}
    last = timed.wall_seconds()
    for cut in QUICK_CUTS:
        changes.update(cut.changes)
        now = price_like(replan(dict(changes)), timed).wall_seconds()
        assert now < last, cut.gives_up
        last = now


def test_the_pre_screened_heads_are_priced_as_whole_passes():
    """Their layers are known only after the first pass: priced at the whole model's rate (an
    upper bound), as the attribution pass itself, so a kept set of layer-0 heads cannot overrun."""
    plan = plan_search(30, 9, 100, 100, config=replace(PRESET, scorer="prescreen", prescreen_keep=0.05))
    stage1 = plan.stages[1]
    assert stage1.bound and stage1.full == stage1.head_sets == 3 + 14
    timed = plan.timed(0.01, 1.0, full_seconds_per_example=0.03)
    assert timed.seconds(stage1) == pytest.approx(17 * 100 * 0.03)


def test_a_cut_the_other_options_cannot_run_with_is_skipped():
    """A pool of 4 cannot hold the user's k of 5: that cut is skipped, the others are taken."""
    timed, replan = _plans(rate=1.0, preset=replace(PRESET, k=5))
    fit = fit_quick(timed, replan, explicit={"k"}, budget_s=1.0)
    assert "pool_size" not in fit.changes and fit.changes["n_null"] == 10
    assert len(fit.gave_up) == len(QUICK_CUTS) - 1


def test_a_cut_that_saves_nothing_is_not_said_to_be_given_up():
    """With exact stage 1 chosen by the user, the pre-screen's 5 % share changes nothing: it is
    neither applied nor listed among what was given up."""
    timed, replan = _plans(rate=1.0)
    fit = fit_quick(timed, replan, explicit={"scorer"}, budget_s=1.0)
    assert "prescreen_keep" not in fit.changes and "scorer" not in fit.changes
    assert not any("pre-screen" in text for text in fit.gave_up)

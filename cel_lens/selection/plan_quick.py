"""``--quick`` as a first look within a time budget: the preset, then measured cuts until it fits.

:data:`~cel_lens.config.QUICK` fixes the sizes of a first look (200 examples a split, a pool of 6,
k 2, a null of 20). On short prompts (Arithmetic, ~21 tokens) that is minutes; on long ones (BoolQ's
passages, ~150 tokens) exact stage 1 alone is hours on a CPU. So ``--quick`` first calibrates the
plan (:func:`cel_lens.pipeline.plan`: the intact model and a few heads timed on D_dist, at most 45 CPU
seconds), then applies the cuts of :data:`QUICK_CUTS` in order, each only where the user did not set
its options, until the plan's wall-time estimate at the measured rate fits :data:`QUICK_SEARCH_S`.
What it gave up is said in words (:attr:`QuickFit.gave_up`), printed, and written beside the run.

The budget is measured, not promised: the estimate is the plan's, at the rate and CPU share of its
calibration; the search's own timer prints its estimate again after its first batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

from cel_lens.selection.plan import SearchPlan

__all__ = ["QUICK_BUDGET_S", "QUICK_SEARCH_S", "QuickCut", "QUICK_CUTS", "QuickFit", "fit_quick", "price_like"]

QUICK_BUDGET_S = 15 * 60.0
"""The wall time a ``--quick`` command aims at, all of it (load, plan calibration, search)."""
QUICK_SEARCH_S = 12 * 60.0
"""The search's share of :data:`QUICK_BUDGET_S`: the rest is left for loading the model and the
plan's calibration (on SmolLM2, about a minute together)."""


@dataclass(frozen=True)
class QuickCut:
    """One step ``--quick`` may take to fit its budget: option ``changes`` and what they give up."""

    changes: Mapping[str, Any]
    gives_up: str


QUICK_CUTS: tuple[QuickCut, ...] = (
    QuickCut({"scorer": "prescreen", "prescreen_pass": "attribution", "prescreen_keep": 0.1},
             "exact stage 1 on every head: an attribution pass ranks every head and exact stage 1 scores its best "
             "10 % only (the ranking's recall of exact's pool is measured, not guaranteed: 1.00 on SmolLM2 BoolQ, "
             "0.67 on Arithmetic, benchmarks/RESULTS.md)"),
    QuickCut({"n_dist": 100}, "half of D_dist (100 examples): stages 1 and 2 rank noisier gains"),
    QuickCut({"n_test": 100}, "half of D_test (100 examples): intervals about 1.4 times as wide as at 200"),
    QuickCut({"prescreen_keep": 0.05}, "the pre-screen keeps its best 5 % only (at least the pool; its recall at "
             "that share is not measured)"),
    QuickCut({"pool_size": 4}, "a pool of 4 heads (stage 2 tries 10 subsets instead of 21)"),
    QuickCut({"n_dist": 50}, "a quarter of D_dist (50 examples): a stage-1 gain of one example is 2 pp"),
    QuickCut({"n_test": 50}, "a quarter of D_test (50 examples): intervals about twice as wide as at 200"),
    QuickCut({"n_null": 10}, "a null of 10 head sets: its smallest p-value is 1/11 = 0.09, so the random-subset "
             "null cannot reject at 0.05 (the exact test and the interval of the test gain are unchanged)"),
)
"""The cuts, in the order ``--quick`` applies them: first the pre-screen (it keeps exact gains on
the heads it keeps), then fewer examples (they widen every interval), then a narrower pre-screen
and pool, fewer examples again, and last a null too small to reject at 0.05."""


@dataclass(frozen=True)
class QuickFit:
    """What ``--quick`` chose: the option ``changes`` on top of the preset, the cuts' words, the
    calibrated estimate before and after (wall seconds of the search), and whether it fits."""

    changes: dict[str, Any] = field(default_factory=dict)
    gave_up: tuple[str, ...] = ()
    before_s: Optional[float] = None
    after_s: Optional[float] = None
    budget_s: float = QUICK_SEARCH_S

    @property
    def fits(self) -> Optional[bool]:
        """Whether the chosen search's estimate is within the budget (``None`` when none was timed:
        nothing was measured, so nothing is claimed)."""
        return None if self.after_s is None else self.after_s <= self.budget_s

    def lines(self) -> list[str]:
        """The choice in words, one line each (what the CLI prints and the run records)."""
        if self.after_s is None:
            return ["--quick: the plan could not be timed; the preset runs as it is"]
        head = (f"--quick: the preset's search was estimated at {self.before_s / 60:.1f} min of wall time "
                f"(budget {self.budget_s / 60:.0f} min for the search)")
        if not self.gave_up:
            return [head + ": it fits, nothing given up"]
        tail = "fits" if self.fits else "still does not fit (every cut taken)"
        return [head + f"; after the cuts {self.after_s / 60:.1f} min, which {tail}. Given up:",
                *(f"  - {text}" for text in self.gave_up)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record of the choice."""
        return {"changes": dict(self.changes), "gave_up": list(self.gave_up), "estimate_before_s": self.before_s,
                "estimate_after_s": self.after_s, "budget_s": self.budget_s, "fits": self.fits}


def price_like(plan: SearchPlan, timed: SearchPlan) -> SearchPlan:
    """``plan`` priced at ``timed``'s measured rates (per unit, whole passes, sets apart) and CPU
    share, with ``timed``'s memory plan and calibration cost: another search on the same model and task."""
    return replace(plan.timed(timed.seconds_per_unit, timed.cpu_share, timed.full_seconds_per_example,
                              timed.apart_seconds_per_unit), memory=timed.memory, calibration_cpu_s=timed.calibration_cpu_s)


def fit_quick(
    timed: SearchPlan, replan: Callable[[Mapping[str, Any]], SearchPlan], explicit: set[str] = frozenset(),
    budget_s: float = QUICK_SEARCH_S, cuts: tuple[QuickCut, ...] = QUICK_CUTS,
) -> QuickFit:
    """The cuts (of ``cuts``, in order) that bring ``timed``'s wall estimate within ``budget_s``.

    ``timed``: the preset's plan, calibrated; ``replan(changes)``: the untimed plan of the preset
    with ``changes`` (every earlier cut's included), priced here at ``timed``'s measured rates; a cut
    touching an option in ``explicit`` (set by the user), one ``replan`` refuses (``ValueError``:
    e.g. a pool smaller than the user's ``k``), or one that would not lower the estimate (the
    pre-screen's share where the user chose exact stage 1) is skipped: nothing is said to be
    given up that was not. Stops at the first fit; when
    none fits, every applicable cut is taken and :attr:`QuickFit.fits` says so."""
    before = timed.wall_seconds()
    if before is None:
        return QuickFit(budget_s=budget_s)
    changes: dict[str, Any] = {}
    gave_up: list[str] = []
    after = before
    for cut in cuts:
        if after <= budget_s:
            break
        if explicit & set(cut.changes):
            continue
        try:
            cheaper = price_like(replan({**changes, **cut.changes}), timed).wall_seconds()
        except ValueError:  # the cut cannot run with the other options (a pool below the user's k)
            continue
        if cheaper >= after:  # it saves nothing here (a pre-screen share without the pre-screen): not given up
            continue
        changes.update(cut.changes)
        gave_up.append(cut.gives_up)
        after = cheaper
    return QuickFit(changes, tuple(gave_up), before, after, budget_s)

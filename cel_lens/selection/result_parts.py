"""The typed parts of a :class:`~cel_lens.selection.result.Result`, each rendering its own rows.

A result is what one search found on each split and what each check says of it:

* :class:`Discovery` — D_dist, where S-hat was chosen: stage-1 scores, the pool, every stage-2
  subset, the parsimony rule's choice and the selection-adjusted test of "any ablation helps";
* :class:`TestOutcome` — D_test, read once S-hat was fixed: accuracies, gain, its interval, the
  exact McNemar p-values, the one decision, and whether the selection came before any test read;
* :class:`NullTest` — S-hat against random head sets of its size on D_test;
* :class:`Stability` — the selection redone on resamples and halves of D_dist, and against the
  winners of random pools;
* :class:`Controls` — each head's leave-one-out contribution and S-hat under the other ablation kinds;
* the calibration record (:class:`~cel_lens.selection.records.CalibrationRecord`, rendered by
  :func:`~cel_lens.selection.calibration.calibration_rows`).

Each part renders its rows as ``(label, value)`` pairs; :meth:`Result.rows` lays them out in the one
order every summary uses. The number formats (:func:`pp`, :func:`format_p`) live here too, so the
figures' captions and every block read the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from cel_lens.config import PARSIMONY_RULES, RANK_RULES, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.guardrails import adjusted_verdict
from cel_lens.selection.records import (
    AdjustedTest,
    ControlGain,
    Decision,
    LeaveOneOut,
    ParsimonyChoice,
    SealRecord,
    SpecificityRecord,
    SplitHalf,
    StabilityRecord,
    SubsetRecord,
)
from cel_lens.selection.stability import MOSTLY_UNKNOWN, known_share
from cel_lens.stats import gain_bounds, null_min_p, null_p_value

__all__ = [
    "Discovery", "TestOutcome", "NullTest", "Stability", "Controls", "Row", "CI_NAMES", "pp", "format_p",
    "nonpositive_gain_warning", "decision_text", "decision_bounds", "split_half_text", "known_share", "MOSTLY_UNKNOWN",
]

Row = tuple[str, str]
"""One labelled row of a result's text block."""

CI_NAMES = {"tango": "Tango score", "newcombe": "Newcombe paired", "bootstrap": "paired bootstrap"}
"""The interval methods' names in a CI row's label (anything else reads as the paired bootstrap)."""


def pp(x: Any, signed: bool = True) -> str:
    """A fraction in percentage points (``+4.25 pp``), or a percentage (``84.10%``) when not
    ``signed``; ``n/a`` for ``None`` or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * float(x):+.2f} pp" if signed else f"{100 * float(x):.2f}%"


def format_p(p: Any) -> str:
    """A p-value with three significant digits (``n/a`` when missing)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    return f"{float(p):.3g}"


def _cal(rank_by: str) -> str:
    """What a discovery gain is called under rule ``rank_by`` (:class:`~cel_lens.selection.ranking.RankRule`)."""
    return RANK_RULES.resolve(rank_by).gain_words


def nonpositive_gain_warning(dist_gain: float, rank_by: str = SearchConfig.rank_by) -> str:
    """The one line shown when the selected subset does not raise discovery accuracy (at each head
    set's best constant prior on D_dist when ``rank_by`` is ``"calibrated"``)."""
    return (f"the selected subset's {_cal(rank_by)}discovery gain is {pp(dist_gain)} (<= 0): no evaluated ablation "
            f"raised D_dist {RANK_RULES.resolve(rank_by).accuracy_words}accuracy, so the search picked the least harmful "
            "one; this is not an enhancement")


def decision_bounds(dec: Mapping[str, Any]) -> tuple[Any, Any]:
    """The decision's printed ``(lower, upper)`` bounds: :func:`~cel_lens.stats.gain_bounds` of its
    counts (a record written when the bounds were conditional on the observed discordance is
    re-bounded from its counts), else the recorded ones."""
    wins, losses, n = dec.get("wins"), dec.get("losses"), dec.get("n")
    if isinstance(wins, int) and isinstance(losses, int) and isinstance(n, int) and n > 0:
        return gain_bounds(wins, losses, n, float(dec.get("alpha", 0.05)))
    return dec.get("bound"), dec.get("upper")


def decision_text(dec: Decision) -> str:
    """The one decision in words: verdict, the exact test's p, the one-sided bounds that never
    contradict it (each covering the gain whatever the discordance, :func:`decision_bounds`), and,
    when it does not reject, the effect it detects at 80 % power at the observed discordance."""
    alpha = float(dec["alpha"])
    verdict = "yes" if dec["helps"] else "not shown"
    lower, upper = decision_bounds(dec)
    text = (f"{verdict}: {dec['test']} p = {format_p(dec['p'])} "
            f"({dec['wins']} examples gained, {dec['losses']} lost; α = {alpha:g}); one-sided "
            f"{1 - alpha:.0%} bounds: gain >= {pp(lower)}, <= {pp(upper)}")
    if not dec["helps"]:
        mde, m, n = dec["mde"], (dec["wins"] or 0) + (dec["losses"] or 0), dec["n"]
        where = f"at n = {n} and the observed discordance ({m} of {n} examples)"
        text += (f"; {where} the test detects a gain of {pp(mde)} with 80% power" if mde is not None
                 else f"; {where} too few discordant examples to detect any gain with 80% power")
    return text


@dataclass
class Discovery:
    """D_dist, where S-hat was selected: its intact and ablated accuracy and the ``gain`` between
    them (selection-biased: S-hat was chosen for it, the winner's curse); the stage-1 ``scores``
    (``[layer][head]``, computed on ``scores_split``), the candidate ``pool``, every stage-2 subset
    with its discovery gain (and its post-hoc test gain when measured: for plots only, choosing by
    it would leak the test split); ``parsimony`` the stage-2 rule and its choice
    (:mod:`~cel_lens.selection.parsimony`); ``adjusted`` the selection-adjusted test of "no head set
    helps" (:mod:`~cel_lens.selection.guardrails`); ``rank_by`` the rule that ranked (``"calibrated"``: every
    accuracy and gain of this part is at each head set's best prior on D_dist, :mod:`~cel_lens.selection.ranking`)."""

    acc_intact: float
    acc_ablated: float
    gain: float
    scores: list[list[float]]
    pool: list[str]
    subsets: list[SubsetRecord]
    scores_split: str = "dist"
    parsimony: Optional[ParsimonyChoice] = None
    adjusted: Optional[AdjustedTest] = None
    rank_by: str = SearchConfig.rank_by

    def parsimony_text(self) -> str:
        """What the parsimony rule did, to follow S-hat in the selected-heads row: the most accurate
        subset when the rule chose a smaller one, and the passengers it kept."""
        par, text = self.parsimony, ""
        if par and par["best"] != par["chosen"]:
            rule = PARSIMONY_RULES.get_resolved(par["rule"])
            dist = f"D_dist{' (best-prior answers)' if _cal(self.rank_by) else ''}"
            text += rule.departure(par, pp, dist) if rule is not None else ""
        passengers = (par or {}).get("passengers") or []
        if passengers:
            text += ("; passengers kept (their own D_dist leave-one-out test does not support them): "
                     + ", ".join(f"{x['head']} (p = {format_p(x['p'])} > {format_p(x['level'])})" for x in passengers))
        return text

    def warning_rows(self) -> list[Row]:
        """The one warning when S-hat does not raise discovery accuracy (none otherwise)."""
        if self.gain is not None and float(self.gain) <= 0:
            return [("warning", nonpositive_gain_warning(float(self.gain), self.rank_by))]
        return []

    def pool_text(self, asked: Any) -> str:
        """The pool size ``asked`` for, and that the pool is every head when the model has fewer."""
        pool = self.pool or []
        if isinstance(asked, int) and pool and len(pool) < asked:
            return f"{len(pool)} (every head; {asked} asked)"
        return str(asked)

    def rows(self, n_dist: Any) -> list[Row]:
        """The D_dist accuracies and gain (labelled selection-biased; calibrated when it ranked)."""
        cal = "calibrated (each at its best constant prior fitted on D_dist): " if _cal(self.rank_by) else ""
        return [(f"D_dist (n={n_dist})", f"{cal}intact {pp(self.acc_intact, False)} -> ablated {pp(self.acc_ablated, False)}, "
                                         f"gain {pp(self.gain)} (selection-biased: Ŝ was chosen for it)")]

    def adjusted_rows(self) -> list[Row]:
        """Whether any ablation helps, by the selection-adjusted test (none for results without it)."""
        adj = self.adjusted
        if not adj:
            return []
        bound = ""
        if "upper" in adj:
            mde = f", 80%-power effect of one exact test {pp(adj['mde'])}" if adj.get("mde") is not None else ""
            bound = f"; gains up to {pp(adj['upper'])} not ruled out (stated effect {pp(adj['min_effect'])}{mde})"
        return [("any ablation helps?", f"{adjusted_verdict(adj)}: best {_cal(self.rank_by)}discovery gain {pp(adj['observed'])} vs the "
                 f"best of {adj['n_sets']} head sets with no effect (sign-flip max statistic, {adj['n_permutations']} "
                 f"permutations): selection-adjusted p = {format_p(adj['p_value'])}" + bound)]

    def subset_rows(self, n: int = 5) -> list[Row]:
        """The ``n`` best stage-2 subsets by discovery accuracy (ties: fewer heads, then higher
        score), with their post-hoc test gains only when measured, labelled exploratory."""
        top = sorted(self.subsets or [], key=lambda s: (-s["dist_acc"], s["size"], -s.get("score_sum", 0.0)))[:n]
        text = "; ".join(
            f"{s['heads']} {pp(s['dist_gain'])}"
            + (f" (test {pp(s['test_gain_posthoc'])}, exploratory post-hoc)" if s.get("test_gain_posthoc") is not None else "")
            for s in top
        )
        return [("top stage-2 subsets", f"{_cal(self.rank_by)}discovery gain (selection-biased): " + text)]


@dataclass
class TestOutcome:
    """D_test, read only after S-hat was fixed: intact and ablated accuracy, ``gain`` =
    ``acc_ablated - acc_intact`` (not selection-biased), its interval ``[ci_low, ci_high]`` by
    ``ci_method`` (``"tango"``, ``"newcombe"`` or ``"bootstrap"``; descriptive, kept in ``result.json`` and not
    printed beside the decision, which it can contradict),
    the two-sided exact McNemar ``p_value``, the one-sided ``p_enhance`` of "ablation helps", the one
    ``decision`` (:func:`~cel_lens.selection.paired.enhancement_decision`); ``selected_before_test``
    whether S-hat was fixed before any read of D_test (``None``: not recorded, a result written
    before the seal existed: never read as "fixed"), and ``seal`` what the test split's ledger
    held before the selection (:mod:`cel_lens.evaluation.seal`; not compared between results)."""

    __test__ = False  # a result part, not a pytest class

    acc_intact: float
    acc_ablated: float
    gain: float
    ci_low: float
    ci_high: float
    p_value: float
    ci_method: str = SearchConfig.ci_method
    p_enhance: Optional[float] = None
    decision: Optional[Decision] = None
    selected_before_test: Optional[bool] = None
    seal: Optional[SealRecord] = field(default=None, compare=False)

    def selection_sentence(self) -> str:
        """Whether S-hat was fixed before D_test was read, and, when it was not, the recorded reason;
        a result that did not record it says so (nothing certifies what was not checked)."""
        if self.selected_before_test is None:
            return "not recorded whether it was fixed before D_test was read: a result written before the test-split seal"
        if self.selected_before_test:
            return "fixed on D_dist before D_test was read"
        reason = (self.seal or {}).get("reason") or "the test split was read first"
        return f"NOT fixed before D_test was read: {reason}"

    def rows(self, n_test: Any, alpha: float) -> list[Row]:
        """The D_test accuracies and gain. With a decision, nothing else: its interval and the
        two-sided McNemar p (descriptive, and able to exclude 0 against the one-sided decision) stay
        in ``result.json``; the decision row prints the bounds that agree with it. A result written
        before the decision prints its interval and p, which were then its only inference."""
        rows = [(f"D_test (n={n_test})", f"intact {pp(self.acc_intact, False)} -> ablated {pp(self.acc_ablated, False)}, "
                                         f"gain {pp(self.gain)}")]
        if self.decision:
            return rows
        return rows + [(f"{1 - alpha:.0%} {CI_NAMES.get(self.ci_method, 'paired bootstrap')} CI",
                        f"[{pp(self.ci_low)}, {pp(self.ci_high)}]"), ("McNemar exact p", format_p(self.p_value))]

    def decision_rows(self) -> list[Row]:
        """The one decision "ablation helps" (or, in results written before it, the one-sided p)."""
        if self.decision:
            return [("ablation helps? (D_test)", decision_text(self.decision))]
        if self.p_enhance is not None:
            return [("one-sided McNemar p", f"{format_p(self.p_enhance)} (ablation raises D_test accuracy)")]
        return []


@dataclass
class NullTest:
    """S-hat's D_test gain against ``gains`` of up to ``n_null`` distinct random head sets of its
    size other than S-hat (every such set when ``exhaustive``; it asks "better than random heads?",
    not "better than intact?"): ``p`` = ``(1 + b) / (1 + R)`` for the ``b`` of ``R`` sets with gain
    >= S-hat's, ``min_p`` = ``1 / (1 + R)`` the smallest it can be (both ``None`` without a null;
    ``min_p`` also in results written before the null excluded S-hat)."""

    gains: list[float]
    p: Optional[float]
    min_p: Optional[float] = None
    exhaustive: bool = False
    n_null: int = SearchConfig.n_null

    def rows(self, size: int, gain: float, alpha: float) -> list[Row]:
        """The null's spread and p beside its smallest possible value (one line instead of a p when
        that is above ``alpha``); ``size`` = |S-hat|, ``gain`` its D_test gain."""
        null = [float(g) for g in (self.gains or [])]
        if not null:
            return [("random-subset null", "not computed")]
        R = len(null)
        legacy = self.min_p is None  # written before the null excluded S-hat: its sets were merely random
        which = f"all {R} other" if self.exhaustive else f"{R} random" if legacy else f"{R} random other"
        spread = (
            f"better than random heads? (not: than intact) {which} {size}-head sets on D_test: mean {pp(np.mean(null))}, "
            f"95% range [{pp(np.quantile(null, 0.025))}, {pp(np.quantile(null, 0.975))}]"
        )
        smallest = null_min_p(R)
        if smallest is not None and smallest > alpha:
            text = f"{spread}; too few sets for this null: its smallest possible p is 1/{R + 1} = {smallest:.3g} > α = {alpha:g}"
        else:
            text = f"{spread}; p = {format_p(null_p_value(null, float(gain)))} (smallest possible {format_p(smallest)})"
        return [("random-subset null", text)]


def split_half_text(half: SplitHalf) -> str:
    """The split-half agreement as a clause: over the splits whose two selections are known (a half
    may need a subset never evaluated), and not estimated when most are not known."""
    unknown, n = float(half.get("unknown") or 0.0), half["n_splits"]
    share = known_share(half["agree"], unknown)
    if share is None:
        return (f"; whether selections on two halves of D_dist agree is not estimated ({unknown:.0%} of {n} splits "
                "needed a subset never evaluated)")
    known = f" of the {round(n * (1 - unknown))} of {n} splits whose selections are known" if unknown else f" of {n} splits"
    return f"; selections on two halves of D_dist agree in {share:.1%}{known}"


def _reselect_share(st: StabilityRecord, heads: str) -> str:
    """How often the redone selection picks S-hat: of every resample, of those whose selection is known
    (some needed a subset never evaluated), or not estimated when most are not known."""
    n, incomplete = st["n_resamples"], float(st.get("incomplete") or 0.0)
    if not st.get("unknown") and not incomplete:
        return f"picks {heads} {st['selected_frequency']:.1%}"
    share, known = known_share(st["selected_frequency"], incomplete), round(n * (1 - incomplete))
    if share is None:
        return (f"cannot estimate how often it picks {heads}: {n - known} resamples needed a subset that was never "
                f"evaluated (of the {known} whose selection is known, {round(st['selected_frequency'] * n)} pick it)")
    return (f"picks {heads} in {share:.1%} of the {known} resamples whose selection is known ({n - known} needed a "
            "subset that was never evaluated)")


@dataclass
class Stability:
    """How firmly the data pick S-hat: ``selection`` how often the selection picks each subset on
    bootstrap resamples of D_dist (:func:`~cel_lens.selection.stability.selection_stability`, or the
    whole selection redone, :func:`~cel_lens.selection.reselect.reselecting_stability`),
    ``split_half`` the agreement of selections on two halves of D_dist
    (:func:`~cel_lens.selection.reselect.split_half_agreement`), ``specificity`` the optional
    comparison with random pools' winners on D_test (:mod:`~cel_lens.selection.specificity`)."""

    selection: Optional[StabilityRecord] = None
    split_half: Optional[SplitHalf] = None
    specificity: Optional[SpecificityRecord] = None

    def rows(self, heads: str, pool_size: int, alpha: float) -> list[Row]:
        """The selection-stability row, and the specificity row when that comparison ran
        (``pool_size``: the heads in S-hat's pool, the size of each random pool)."""
        rows = [("selection stability", self._stability_text(heads))]
        sp = self.specificity
        if sp:
            rows.append(("specificity", self._specificity_text(sp, pool_size, alpha)))
        return rows

    def _stability_text(self, heads: str) -> str:
        st = self.selection
        if not st:
            return "not computed"
        others = [w for w in st["wins"] if w["heads"] != heads][:3]
        incomplete = float(st.get("incomplete") or 0.0)
        shares = [(w["heads"], known_share(w["frequency"], incomplete)) for w in others]
        rest = "; ".join(f"{h} {x:.1%}" if x is not None else f"{h} {round(w['frequency'] * st['n_resamples'])}"
                         for (h, x), w in zip(shares, others)) or "none"
        ties = ""
        if st.get("selected_by_tie_break"):
            ties = f", {st['selected_by_tie_break']:.1%} of them only by the tie-break (another subset as many correct)"
        if st.get("identical_subsets"):
            ties += (f"; {st['identical_subsets']} other subset(s) give the same answer on every D_dist example, "
                     "so the data cannot tell them apart")
        if st["method"] == "reselect":
            text = (f"the whole selection (pool and stage 2) redone on {st['n_resamples']} bootstrap resamples of D_dist "
                    f"{_reselect_share(st, heads)}{ties}")
        else:
            text = f"{heads} wins {st['selected_frequency']:.1%} of {st['n_resamples']} bootstrap resamples of D_dist{ties} (pool fixed)"
        if self.split_half:
            text += split_half_text(self.split_half)
        label = "other winners, in resamples whose selection is known" if known_share(0.0, incomplete) is None else "other winners"
        return f"{text} ({label}: {rest})"

    @staticmethod
    def _specificity_text(sp: SpecificityRecord, m: int, alpha: float) -> str:
        if not sp["test_gains"]:
            return f"not applicable: no other pool of {m} heads exists"
        gains = sp["test_gains"]
        head = f"winners of {len(gains)} random {m}-head pools (stage 2 on D_dist): test gain mean {pp(np.mean(gains))}"
        if sp["min_p"] > alpha:
            return f"{head}; too few pools: smallest possible p {sp['min_p']:.3g} > α = {alpha:g}"
        return f"{head}; p = {format_p(sp['p_value'])} (smallest possible {format_p(sp['min_p'])})"


@dataclass
class Controls:
    """What S-hat's gain is made of and what it rests on: ``leave_one_out`` each head's D_test
    contribution with the others ablated (:func:`~cel_lens.selection.paired.leave_one_out`), and
    ``kinds`` S-hat's D_test gain under each ablation kind the search did not use
    (:func:`~cel_lens.runs.ablation_record.ablation_controls`: removing the heads' information, or
    only shifting their mean?)."""

    leave_one_out: Optional[LeaveOneOut] = None
    kinds: Optional[dict[str, ControlGain]] = None

    def leave_one_out_rows(self) -> list[Row]:
        """Which heads of S-hat the data support (Holm over their one-sided exact tests): each head's
        gain and Holm p (its interval, descriptive and not Holm-adjusted, stays in ``result.json``)."""
        loo = self.leave_one_out
        if not loo:
            return []
        parts = "; ".join(f"{h['head']} {pp(h['gain'])}, Holm p {format_p(h['p_holm'])}" for h in loo["heads"])
        supported = ", ".join(loo["supported"]) or "none"
        return [("each head (leave-one-out)", f"data support {supported} at α = {loo['alpha']:g} (Holm over the "
                 f"one-sided exact tests): {parts}")]

    def kind_rows(self, searched_with: str, gain: float) -> list[Row]:
        """S-hat's D_test gain under the other ablation kinds beside the one ``searched_with``."""
        if not self.kinds:
            return []
        parts = [f"{kind}: {pp(c['gain'])} [{pp(c['ci_low'])}, {pp(c['ci_high'])}]" for kind, c in self.kinds.items()]
        return [("ablation kinds (control)",
                 f"Ŝ's D_test gain under {'; '.join(parts)} (searched with {searched_with}: {pp(gain)})")]

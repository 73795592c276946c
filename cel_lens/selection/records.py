"""The shapes of the records a :class:`~cel_lens.selection.result.Result` keeps inside its parts.

Each record is what one check writes (the function named on it) and ``result.json`` holds it as a
JSON object, so each is a :class:`~typing.TypedDict`: a plain dict at run time (a result is written
and read back byte for byte), with its keys and their types named for the reader and the type
checker. Every class is ``total=False`` because results written by earlier versions lack keys that
later ones added (``upper`` of the selection-adjusted test, ``bound_cal`` of the calibration, ...);
the renderers read such keys with ``.get``.
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict

__all__ = [
    "SubsetRecord", "ParsimonyChoice", "DroppedHead", "Passenger", "AdjustedTest", "Decision", "HeadContribution",
    "LeaveOneOut", "SubsetWins", "StabilityRecord", "SplitHalf", "SpecificityRecord", "SealRecord", "ControlGain",
    "CalibrationRecord",
]


class SubsetRecord(TypedDict, total=False):
    """One stage-2 subset (:meth:`cel_lens.selection.subsets.SubsetScore.to_dict`), with its post-hoc
    D_test gain when it was measured (exploratory)."""

    heads: str
    size: int
    dist_acc: float
    dist_gain: float
    score_sum: float
    test_gain_posthoc: float


class DroppedHead(TypedDict, total=False):
    """One step of the backward rule: the head dropped, its p and the level (the record also holds
    ``from``, the subset it was dropped from: a Python keyword, so not declared here)."""

    dropped: str
    p: float
    level: float


class Passenger(TypedDict, total=False):
    """A head kept in S-hat whose own D_dist leave-one-out test does not support it."""

    head: str
    p: float
    level: float


class ParsimonyChoice(TypedDict, total=False):
    """The stage-2 rule and its choice (:func:`cel_lens.selection.parsimony.select_parsimonious`)."""

    rule: str
    best: str
    best_dist_gain: float
    tolerance: float
    chosen: str
    candidates: list[Any]
    dropped: list[DroppedHead]
    passengers: list[Passenger]
    alpha: float
    stand_ins: int


class AdjustedTest(TypedDict, total=False):
    """The selection-adjusted test of "no head set helps" on D_dist
    (:func:`cel_lens.selection.guardrails.selection_adjusted_test`)."""

    observed: float
    p_value: float
    min_p: float
    n_permutations: int
    n_sets: int
    null_mean: float
    null_quantile: float
    rejects: bool
    upper: float
    min_effect: float
    mde: Optional[float]
    absence: bool


class Decision(TypedDict, total=False):
    """The one decision "ablation helps" on D_test (:func:`cel_lens.selection.paired.enhancement_decision`)."""

    test: str
    alpha: float
    wins: int
    losses: int
    n: int
    p: float
    helps: bool
    bound: float
    upper: float
    bounds: str
    mde: Optional[float]


class HeadContribution(TypedDict, total=False):
    """One head of S-hat without the others' help: its D_test gain, interval and Holm-adjusted p."""

    head: str
    without: str
    gain: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    supported: bool


class LeaveOneOut(TypedDict, total=False):
    """Each head's leave-one-out contribution (:func:`cel_lens.selection.paired.leave_one_out`)."""

    alpha: float
    heads: list[HeadContribution]
    supported: list[str]


class SubsetWins(TypedDict, total=False):
    """How often one subset won the resampled selections."""

    heads: str
    frequency: float


class StabilityRecord(TypedDict, total=False):
    """How often the selection picks each subset on bootstrap resamples of D_dist: ``method``
    ``"fixed pool"`` (:func:`cel_lens.selection.stability.selection_stability`) or ``"reselect"``
    (:func:`cel_lens.selection.reselect.reselecting_stability`, with ``upper``/``unknown`` when some
    resamples needed a subset never evaluated)."""

    method: str
    n_resamples: int
    rule: str
    selected: str
    selected_frequency: float
    selected_by_tie_break: float
    identical_subsets: int
    wins: list[SubsetWins]
    upper: float
    unknown: int
    incomplete: float
    fixed_pool_frequency: float


class SplitHalf(TypedDict, total=False):
    """Selections on two halves of D_dist (:func:`cel_lens.selection.reselect.split_half_agreement`)."""

    n_splits: int
    agree: float
    agree_upper: float
    unknown: float


class SpecificityRecord(TypedDict, total=False):
    """S-hat's D_test gain against random pools' winners
    (:func:`cel_lens.selection.specificity.specificity_statistics`)."""

    n_pools: int
    n_possible: int
    winners: list[str]
    dist_gains: list[float]
    test_gains: list[float]
    p_value: Optional[float]
    min_p: Optional[float]


class SealRecord(TypedDict, total=False):
    """What the test split's ledger held before the selection (:func:`cel_lens.selection.algorithm.seal_record`)."""

    prior_test_reads: int
    reads: list[dict[str, Any]]
    reason: Optional[str]


class ControlGain(TypedDict, total=False):
    """S-hat's D_test gain under one ablation kind the search did not use
    (:func:`cel_lens.runs.ablation_record.ablation_controls`; ``record`` is that kind's state)."""

    acc_ablated: float
    gain: float
    ci_low: float
    ci_high: float
    record: dict[str, Any]


class CalibrationRecord(TypedDict, total=False):
    """The answer-prior control (:func:`cel_lens.selection.calibration.calibration_statistics`):
    always the task's answer type (``answer_type``; ``kind`` in older records), ``names``,
    ``applies`` and the majority answer; ``reason`` when it does not apply; the calibrated
    accuracies, gain and verdict when it does."""

    answer_type: str
    kind: str
    names: list[str]
    applies: bool
    majority_answer: Optional[str]
    majority_rate: Optional[float]
    reason: str
    method: str
    tie_rule: str
    bias_intact: list[float]
    bias_ablated: list[float]
    test_acc_intact_cal: float
    test_acc_ablated_cal: float
    ci_intact_cal: list[float]
    ci_ablated_cal: list[float]
    gain_cal: float
    ci_low_cal: float
    ci_high_cal: float
    gain_cal_range: list[float]
    test_acc_intact_best: float
    test_acc_ablated_best: float
    gain_best: float
    bias_intact_best: list[float]
    bias_ablated_best: list[float]
    p_value_cal: float
    bound_cal: float
    survives: bool
    decision_cal: str
    shares_intact: list[float]
    shares_ablated: list[float]
    shares_intact_cal: list[float]
    shares_ablated_cal: list[float]

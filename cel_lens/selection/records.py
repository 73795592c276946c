"""The shapes of the records a :class:`~cel_lens.selection.result.Result` keeps inside its parts.

Each record is what one check writes (the function named on it) and ``result.json`` holds it as a
JSON object, so each is a :class:`~typing.TypedDict`: a plain dict at run time (a result is written
and read back byte for byte), with its keys and their types named for the reader and the type
checker. A key its writer always writes and every committed record holds (``results/**/result.json``
and the records of ``tests/selection/result_render_cases.json``) is required, and readers index it;
a key that results written by earlier versions lack, or that a writer adds only sometimes (``upper``
of the selection-adjusted test, ``bound_cal`` of the calibration, ``reason`` of a seal, ...), is
:data:`~typing.NotRequired`, and readers ``.get`` it.
"""

from __future__ import annotations

from typing import Any, NotRequired, Optional, TypedDict

__all__ = [
    "SubsetRecord", "ParsimonyChoice", "DroppedHead", "Passenger", "AdjustedTest", "Decision", "HeadContribution",
    "LeaveOneOut", "SubsetWins", "StabilityRecord", "SplitHalf", "SpecificityRecord", "SealRecord", "ControlGain",
    "CalibrationRecord",
]


class SubsetRecord(TypedDict):
    """One stage-2 subset (:meth:`cel_lens.selection.subsets.SubsetScore.to_dict`), with its post-hoc
    D_test gain when it was measured (exploratory)."""

    heads: str
    size: int
    dist_acc: float
    dist_gain: float
    score_sum: float
    test_gain_posthoc: NotRequired[float]


class DroppedHead(TypedDict):
    """One step of the backward rule: the head dropped, its p and the level (the record also holds
    ``from``, the subset it was dropped from: a Python keyword, so not declared here)."""

    dropped: str
    p: float
    level: float


class Passenger(TypedDict):
    """A head kept in S-hat whose own D_dist leave-one-out test does not support it."""

    head: str
    p: float
    level: float


class ParsimonyChoice(TypedDict):
    """The stage-2 rule and its choice (:func:`cel_lens.selection.parsimony.select_parsimonious`)."""

    rule: str
    best: str
    best_dist_gain: float
    tolerance: float
    chosen: str
    candidates: list[Any]
    dropped: NotRequired[list[DroppedHead]]
    passengers: NotRequired[list[Passenger]]
    alpha: NotRequired[float]
    stand_ins: NotRequired[int]


class AdjustedTest(TypedDict):
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
    upper: NotRequired[float]
    min_effect: NotRequired[float]
    mde: NotRequired[Optional[float]]
    absence: NotRequired[bool]


class Decision(TypedDict):
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
    bounds: NotRequired[str]
    mde: Optional[float]


class HeadContribution(TypedDict):
    """One head of S-hat without the others' help: its D_test gain, interval and Holm-adjusted p."""

    head: str
    without: str
    gain: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    supported: bool


class LeaveOneOut(TypedDict):
    """Each head's leave-one-out contribution (:func:`cel_lens.selection.paired.leave_one_out`)."""

    alpha: float
    heads: list[HeadContribution]
    supported: list[str]


class SubsetWins(TypedDict):
    """How often one subset won the resampled selections."""

    heads: str
    frequency: float


class StabilityRecord(TypedDict):
    """How often the selection picks each subset on bootstrap resamples of D_dist: ``method``
    ``"fixed pool"`` (:func:`cel_lens.selection.stability.selection_stability`) or ``"reselect"``
    (:func:`cel_lens.selection.reselect.reselecting_stability`, with ``upper``/``unknown`` when some
    resamples needed a subset never evaluated)."""

    method: str
    n_resamples: int
    rule: NotRequired[str]
    selected: str
    selected_frequency: float
    selected_by_tie_break: NotRequired[float]
    identical_subsets: NotRequired[int]
    wins: list[SubsetWins]
    upper: NotRequired[float]
    unknown: NotRequired[int]
    incomplete: NotRequired[float]
    fixed_pool_frequency: NotRequired[float]


class SplitHalf(TypedDict):
    """Selections on two halves of D_dist (:func:`cel_lens.selection.reselect.split_half_agreement`)."""

    n_splits: int
    agree: float
    agree_upper: float
    unknown: float


class SpecificityRecord(TypedDict):
    """S-hat's D_test gain against random pools' winners
    (:func:`cel_lens.selection.specificity.specificity_statistics`)."""

    n_pools: int
    n_possible: int
    winners: list[str]
    dist_gains: list[float]
    test_gains: list[float]
    p_value: Optional[float]
    min_p: Optional[float]


class SealRecord(TypedDict):
    """What the test split's ledger held before the selection (:func:`cel_lens.selection.algorithm.seal_record`)."""

    prior_test_reads: int
    reads: list[dict[str, Any]]
    reason: NotRequired[Optional[str]]


class ControlGain(TypedDict):
    """S-hat's D_test gain under one ablation kind the search did not use
    (:func:`cel_lens.runs.ablation_record.ablation_controls`; ``record`` is that kind's state)."""

    acc_ablated: NotRequired[float]
    gain: float
    ci_low: float
    ci_high: float
    record: NotRequired[dict[str, Any]]


class CalibrationRecord(TypedDict):
    """The answer-prior control (:func:`cel_lens.selection.calibration.calibration_statistics`):
    always the task's answer type (``answer_type``; ``kind`` in older records), ``names``,
    ``applies`` and the majority answer; ``reason`` when it does not apply; the calibrated
    accuracies, gain and verdict when it does."""

    answer_type: NotRequired[str]
    kind: NotRequired[str]
    names: NotRequired[list[str]]
    applies: bool
    majority_answer: Optional[str]
    majority_rate: NotRequired[Optional[float]]
    reason: NotRequired[str]
    method: NotRequired[str]
    tie_rule: NotRequired[str]
    bias_intact: NotRequired[list[float]]
    bias_ablated: NotRequired[list[float]]
    test_acc_intact_cal: NotRequired[float]
    test_acc_ablated_cal: NotRequired[float]
    ci_intact_cal: NotRequired[list[float]]
    ci_ablated_cal: NotRequired[list[float]]
    gain_cal: NotRequired[float]
    ci_low_cal: NotRequired[float]
    ci_high_cal: NotRequired[float]
    gain_cal_range: NotRequired[list[float]]
    test_acc_intact_best: NotRequired[float]
    test_acc_ablated_best: NotRequired[float]
    gain_best: NotRequired[float]
    bias_intact_best: NotRequired[list[float]]
    bias_ablated_best: NotRequired[list[float]]
    p_value_cal: NotRequired[float]
    bound_cal: NotRequired[float]
    survives: NotRequired[bool]
    decision_cal: NotRequired[str]
    shares_intact: NotRequired[list[float]]
    shares_ablated: NotRequired[list[float]]
    shares_intact_cal: NotRequired[list[float]]
    shares_ablated_cal: NotRequired[list[float]]

"""Capability or answer prior? A calibration baseline for every choice-task result.

An ablation can raise a choice task's accuracy without adding any capability: it only has to move
the model's *answer prior* (say "yes" more often on a task whose labels are mostly "yes"). To tell
the two apart, each model (intact, and with Ŝ ablated) gets its own **per-choice additive bias**,
fitted on its own D_dist choice scores, and applied to its D_test scores: the calibrated prediction
is ``argmax_j(s_j + b_j)``. A prior shift is a change of ``b``, so it is undone by the refit; a
capability (which examples the model gets right) is not. Whether the gain survives is decided on
D_test itself, each model at its best constant prior there (:func:`_survival`, the one decision rule,
with bounds that agree with it); beside it a threshold-free test of the answer margins and a test of
the prior shift itself (:mod:`cel_lens.selection.prior_tests`). The D_dist-refit accuracies and their
paired bootstrap interval are recorded but not printed (a second comparison, which could contradict
the verdict). How the block reads: :mod:`cel_lens.selection.calibration_text`.

Why this calibration and not contextual calibration (Zhao et al. 2021): contextual calibration
multiplies the choice probabilities by ``diag(p_cf)^-1``, which on the log scale is the same family,
an additive per-choice bias, but it estimates the bias from content-free prompts ("N/A"), which
cost extra forward passes, must be invented per task, and do not exist for tasks whose choices
differ per example (HellaSwag). Here the bias is fitted on D_dist's labelled scores that the search
recorded anyway (:class:`~cel_lens.selection.memo.MemoOracle` keeps them; run directories store them), so
the baseline costs no forward pass, reads no D_test label to fit, and applies to every choice task.
The bias is the one with the highest D_dist accuracy, so a calibrated accuracy is the model's
accuracy at its best constant answer prior: an ablation that only shifts the prior leaves it
unchanged (the refit takes the shift back exactly), and one that fixes examples raises it. A
likelihood fit (``softmax(a s + c)``) would estimate the bias that best explains the labels, not the
one a prior shift cannot beat.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.config import SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.paired import DECISION_TEST
from cel_lens.oracle import DIST_SPLIT, TEST_SPLIT, AnswerKey
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.prior_tests import margin_auc_test, prior_shift_test
from cel_lens.stats import gain_bounds, minimum_detectable_effect, paired_bootstrap_ci, sign_test_p, wilson_interval
from cel_lens.tasks.answer_types import answer_type_entry

__all__ = [
    "fit_choice_bias",
    "calibrated_predictions",
    "prediction_shares",
    "majority_rate",
    "calibration_statistics",
]

def _valid(scores: Tensor) -> Tensor:
    return ~torch.isnan(scores)


def _offset_scores(t: Tensor, wins_above: Tensor, wins_below: Tensor) -> tuple[Tensor, Tensor]:
    """Every interval between sorted thresholds ``t``: how many examples are right for ``b`` in it
    (``#{wins_above: t < b} + #{wins_below: t > b}``; -1 for empty intervals between tied
    thresholds, which hold no ``b``) and its midpoint."""
    order = torch.argsort(t)
    t, above, below = t[order], wins_above[order].double(), wins_below[order].double()
    score = torch.cat([torch.zeros(1, dtype=torch.float64), above.cumsum(0)])
    score = score + torch.cat([below.flip(0).cumsum(0).flip(0), torch.zeros(1, dtype=torch.float64)])
    edges = torch.cat([t[:1] - 1.0, t, t[-1:] + 1.0])
    mids = (edges[:-1] + edges[1:]) / 2
    distinct = torch.cat([torch.ones(1, dtype=torch.bool), t[1:] > t[:-1], torch.ones(1, dtype=torch.bool)])
    return score.masked_fill(~distinct, -1.0), mids


def _best_offset(t: Tensor, wins_above: Tensor, wins_below: Tensor, current: Optional[float] = None) -> float:
    """The ``b`` maximising ``#{wins_above: t < b} + #{wins_below: t > b}``. Among equally good
    intervals: ``current`` when it already lies in one (a coordinate search never moves sideways),
    else the middle one in order (the lower middle of an even count) at its midpoint. The middle
    rule moves with the scores: shifting every score of a choice by a constant shifts the chosen
    bias by the same constant, so a pure prior shift is taken back exactly, ties or not."""
    score, mids = _offset_scores(t, wins_above, wins_below)
    ties = torch.nonzero(score == score.max())[:, 0]
    if current is not None:
        pos = int(torch.searchsorted(torch.sort(t).values, torch.tensor(current, dtype=t.dtype), right=False))
        on_edge = bool((t == current).any())
        if not on_edge and bool((ties == pos).any()):
            return float(current)
    return float(mids[ties[(len(ties) - 1) // 2]])


def _coordinate(s: Tensor, y: Tensor, bias: Tensor, j: int) -> Optional[tuple[Tensor, Tensor, Tensor]]:
    """Choice ``j``'s thresholds against the best other choice under ``bias``, and which examples
    are right above / below them (``None`` when no example has both)."""
    others = (s + bias[None, :]).clone()
    others[:, j] = float("-inf")
    best_other, pred_other = others.max(1)
    ok = torch.isfinite(s[:, j]) & torch.isfinite(best_other)
    if not bool(ok.any()):
        return None
    return (best_other - s[:, j])[ok], (y == j)[ok], ((y != j) & (pred_other == y))[ok]


def _ascend(s: Tensor, y: Tensor, bias: Tensor, max_sweeps: int) -> Tensor:
    """Coordinate ascent from ``bias``: each coordinate (the reference choice 0 too, which is the
    common offset of all the others) set to its exact optimum in turn, until none moves."""
    bias = bias.clone()
    for _ in range(max_sweeps):
        moved = False
        for j in range(s.shape[1]):
            parts = _coordinate(s, y, bias, j)
            if parts is None:
                continue
            new = _best_offset(*parts, current=float(bias[j]))
            moved |= new != float(bias[j])
            bias[j] = new
        if not moved:
            break
    return bias - bias[0]


def _accuracy(s: Tensor, y: Tensor, bias: Tensor) -> int:
    return int(((s + bias[None, :]).argmax(1) == y).sum())


def optimal_biases(
    scores: Float[Tensor, "example choice"], labels: Int[Tensor, " example"], *, max_sweeps: int = 50
) -> list[Float[Tensor, " choice"]]:
    """Every bias found at the best D_dist accuracy, the chosen one (:func:`fit_choice_bias`) first.
    Two choices: the midpoint of every equally good interval (exact). More: the optima of coordinate
    ascent started from no bias, from the exact best common offset (all choices against the first)
    and from each choice's exact best offset alone; the distinct ones reaching the best count."""
    s = scores.detach().to(torch.float64).cpu()
    y = labels.detach().long().cpu()
    n, m = s.shape
    if m < 2 or n == 0:
        return [torch.zeros(m, dtype=torch.float64)]
    s = torch.where(_valid(s), s, torch.full_like(s, float("-inf")))
    zero = torch.zeros(m, dtype=torch.float64)
    if m == 2:
        parts = _coordinate(s, y, zero, 1)
        if parts is None:
            return [zero]
        score, mids = _offset_scores(*parts)
        ties = torch.nonzero(score == score.max())[:, 0]
        chosen = _best_offset(*parts)
        others = [float(mids[i]) for i in ties if float(mids[i]) != chosen]
        return [torch.tensor([0.0, b], dtype=torch.float64) for b in [chosen, *others]]
    starts = [zero]
    for j in range(m):
        parts = _coordinate(s, y, zero, j)
        if parts is not None:
            start = zero.clone()
            start[j] = _best_offset(*parts)
            starts.append(start)
    found = [_ascend(s, y, b, max_sweeps) for b in starts]
    counts = [_accuracy(s, y, b) for b in found]
    top = max(counts)
    out: list[Tensor] = []
    for b, c in zip(found, counts):
        if c == top and not any(torch.equal(b, o) for o in out):
            out.append(b)
    return out


def fit_choice_bias(
    scores: Float[Tensor, "example choice"], labels: Int[Tensor, " example"], *, max_sweeps: int = 50
) -> Float[Tensor, " choice"]:
    """The per-choice additive bias ``b`` (``b[0] = 0``) under which ``argmax_j(s_j + b_j)`` is right
    on the most examples: the model's accuracy at its best constant answer prior. Exact for two
    choices (every interval between thresholds scored); for more, coordinate ascent with each
    coordinate's exact optimum, from several starts including the best common offset, keeping the
    best (:func:`optimal_biases`; measured against brute force in the tests and at the optimum in
    ``python -m benchmarks.planted_study``). The tie rule is stated in :func:`_best_offset` (the
    middle of equally good intervals; among starts, the first in the order above). NaN scores
    (choices an example does not have) never win; deterministic."""
    return optimal_biases(scores, labels, max_sweeps=max_sweeps)[0]


def calibrated_predictions(
    scores: Float[Tensor, "example choice"], bias: Optional[Float[Tensor, " choice"]] = None
) -> Int[Tensor, " example"]:
    """``argmax_j(s_j + b_j)`` over each example's choices (NaN choices never win; no bias: the raw
    decision)."""
    s = scores.detach().to(torch.float64).cpu()
    if bias is not None:
        s = s + bias.to(torch.float64)[None, :]
    return torch.where(_valid(s), s, torch.full_like(s, float("-inf"))).argmax(1)


def prediction_shares(predictions: Int[Tensor, " example"], n_choices: int) -> list[float]:
    """The share of examples answered with each choice."""
    n = max(int(predictions.numel()), 1)
    return [float(c) / n for c in torch.bincount(predictions.long(), minlength=n_choices)[:n_choices]]


def majority_rate(key: Optional[AnswerKey]) -> Optional[tuple[str, float]]:
    """The most common gold answer of ``key`` and its share of the examples: the accuracy of always
    giving it (``None`` without labels)."""
    if key is None or key.labels is None or key.labels.numel() == 0:
        return None
    counts = torch.bincount(key.labels, minlength=len(key.names))
    top = int(counts.argmax())
    return (key.names[top] if top < len(key.names) else f"answer {top}"), float(counts[top]) / int(key.labels.numel())


def _not_applicable(key: AnswerKey) -> str:
    """Why no calibration is computed for a task of this answer type (said in the result; the
    answer type's entry words it, :meth:`~cel_lens.tasks.answer_types.AnswerTypeEntry.calibration_note`)."""
    return answer_type_entry(key.answer_type).calibration_note(key.labels is not None)


def _scores(memo: MemoOracle, split: str, heads: HeadSet) -> Optional[Tensor]:
    return memo.choice_scores(split, heads)


def calibration_statistics(
    memo: MemoOracle, heads: HeadSet, *, n_boot: int = SearchConfig.n_boot, alpha: float = 0.05, seed: int = 0
) -> Optional[dict[str, Any]]:
    """The calibration block of a result (no forward pass: from the recorded choice scores of the
    intact model and of ``heads`` on both splits); ``None`` when the oracle has no answer key."""
    key_test, key_dist = memo.answer_key(TEST_SPLIT), memo.answer_key(DIST_SPLIT)
    if key_test is None:
        return None
    majority = majority_rate(key_test)
    out: dict[str, Any] = {"answer_type": key_test.answer_type, "names": list(key_test.names), "applies": False,
                           "majority_answer": majority[0] if majority else None,
                           "majority_rate": majority[1] if majority else None}
    tables = {(sp, h): _scores(memo, sp, h) for sp in (DIST_SPLIT, TEST_SPLIT) for h in (HeadSet(), heads)}
    missing = key_dist is None or key_dist.labels is None or key_test.labels is None
    if missing or not answer_type_entry(key_test.answer_type).calibrates or any(t is None for t in tables.values()):
        return {**out, "reason": _not_applicable(key_test)}
    m = max(len(key_test.names), tables[(TEST_SPLIT, HeadSet())].shape[1])
    fits = {h: optimal_biases(tables[(DIST_SPLIT, h)], key_dist.labels) for h in (HeadSet(), heads)}
    raw = {h: calibrated_predictions(tables[(TEST_SPLIT, h)]) for h in fits}
    cal = {h: calibrated_predictions(tables[(TEST_SPLIT, h)], fits[h][0]) for h in fits}
    right: dict[HeadSet, Bool[Tensor, " example"]] = {h: cal[h] == key_test.labels for h in fits}
    intact, ablated = right[HeadSet()], right[heads]
    n = int(intact.numel())
    low, high = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, alpha=alpha, seed=seed)
    return {
        **out, "applies": True,
        "method": "per-choice additive bias fitted on D_dist (each model its own)", "tie_rule": TIE_RULE,
        "bias_intact": fits[HeadSet()][0].tolist(), "bias_ablated": fits[heads][0].tolist(),
        "test_acc_intact_cal": float(intact.double().mean()), "test_acc_ablated_cal": float(ablated.double().mean()),
        "ci_intact_cal": list(wilson_interval(int(intact.sum()), n, alpha)),
        "ci_ablated_cal": list(wilson_interval(int(ablated.sum()), n, alpha)),
        "gain_cal": (int(ablated.sum()) - int(intact.sum())) / n, "ci_low_cal": low, "ci_high_cal": high,
        "gain_cal_range": _tie_range(tables[(TEST_SPLIT, HeadSet())], tables[(TEST_SPLIT, heads)], fits, heads,
                                     key_test.labels),
        **_survival(tables[(TEST_SPLIT, HeadSet())], tables[(TEST_SPLIT, heads)], key_test.labels, alpha),
        **prior_shift_test(tables[(TEST_SPLIT, HeadSet())], tables[(TEST_SPLIT, heads)], key_test.labels, alpha),
        **margin_auc_test(tables[(TEST_SPLIT, HeadSet())], tables[(TEST_SPLIT, heads)], key_test.labels, alpha, seed=seed),
        "shares_intact": prediction_shares(raw[HeadSet()], m), "shares_ablated": prediction_shares(raw[heads], m),
        "shares_intact_cal": prediction_shares(cal[HeadSet()], m), "shares_ablated_cal": prediction_shares(cal[heads], m),
    }


TIE_RULE = ("among equally good biases on D_dist, the middle interval in order (two choices; it moves with a "
            "prior shift), else the first optimum in the order: no bias, best common offset, each choice alone")
"""The stated rule that picks one bias among equally good ones (issue: the calibrated Δ must not depend
on an unstated tie-break); the range over all of them is reported beside it."""


def _tie_range(test_intact: Tensor, test_ablated: Tensor, fits: Mapping[HeadSet, list[Tensor]], heads: HeadSet,
               labels: Tensor) -> list[float]:
    """The calibrated gain's range over every equally good bias of either model: ``[low, high]``."""
    def accs(table: Tensor, biases: list[Tensor]) -> list[float]:
        return [float((calibrated_predictions(table, b) == labels).double().mean()) for b in biases]

    a, b = accs(test_intact, fits[HeadSet()]), accs(test_ablated, fits[heads])
    return [min(b) - max(a), max(b) - min(a)]


def _survival(test_intact: Tensor, test_ablated: Tensor, labels: Tensor, alpha: float) -> dict[str, Any]:
    """Whether the gain survives calibration, by the one decision rule: the one-sided exact McNemar
    test of the ablated model against the intact model, *each at its best constant prior on D_test
    itself* (the bias under which it answers the most D_test examples right). A pure prior shift can
    never pass: the best accuracy over all biases does not change when every score of a choice
    moves by a constant, so the two answer alike; only a change of which examples a model can get
    right moves it. Unlike a bias fitted on D_dist, this does not depend on the size of D_dist (a
    small D_dist gives a noisy fit, and the difference of two noisy fits is not a prior-free gain)."""
    best_intact, best_ablated = fit_choice_bias(test_intact, labels), fit_choice_bias(test_ablated, labels)
    intact = calibrated_predictions(test_intact, best_intact) == labels
    ablated = calibrated_predictions(test_ablated, best_ablated) == labels
    _, wins, losses, _ = _counts(intact, ablated)
    n = int(ablated.numel())
    p = sign_test_p(wins, losses)
    lower, upper = gain_bounds(wins, losses, n, alpha)
    return {"test_acc_intact_best": float(intact.double().mean()), "test_acc_ablated_best": float(ablated.double().mean()),
            "gain_best": (wins - losses) / n, "bias_intact_best": best_intact.tolist(),
            "bias_ablated_best": best_ablated.tolist(), "p_value_cal": p, "bound_cal": lower, "upper_cal": upper,
            "wins_cal": wins, "losses_cal": losses, "mde_cal": minimum_detectable_effect(n, (wins + losses) / n, alpha),
            "survives": bool(p <= alpha),
            "decision_cal": f"{DECISION_TEST}: each model at its best constant prior on D_test"}


def _counts(a: Tensor, b: Tensor) -> tuple[int, int, int, int]:
    a, b = a.bool(), b.bool()
    return int((a & b).sum()), int((b & ~a).sum()), int((a & ~b).sum()), int((~a & ~b).sum())

"""Paired comparisons of two head sets on the same examples: a one-sided exact McNemar test for
"ablating raises accuracy", Newcombe's interval for a paired difference of accuracies, and the
leave-one-out contribution of each head of S-hat.

* :func:`mcnemar_enhancement_p` — the paper asks whether ablation *helps*: under "no change" each
  discordant example goes either way with probability 1/2, and the p-value is the upper tail
  ``P(X >= b)`` for the ``b`` examples only the ablated model gets right. A harmful S-hat gets a
  p-value near 1, never a discovery.
* :func:`tango_paired_ci` — Tango's (1998) score interval for the difference of two paired
  proportions (the default): it never collapses to ``[0, 0]`` and keeps its coverage when few
  pairs are discordant, where the paired bootstrap and :func:`newcombe_paired_ci` (Newcombe's
  method 10, from Wilson limits and the phi correlation) do not (``python -m benchmarks.evidence
  --only claims``: n = 200, Δ = +1 pp, 1% discordant: 0.985 against 0.87 and 0.87).
* :func:`leave_one_out` — for each head ``h`` of S-hat, S-hat against S-hat without ``h`` on the
  same examples: gain, interval, one-sided McNemar p, Holm across the heads. A head is *supported*
  when its Holm-adjusted p is at most ``alpha``.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import CI_METHODS, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.records import Decision, LeaveOneOut
from cel_lens.stats import (
    paired_bootstrap_ci,
    holm_adjust,
    gain_bounds,
    minimum_detectable_effect,
    sign_test_p,
    wilson_interval,
)

__all__ = ["CI_METHODS", "tango_interval", "newcombe_interval", "bootstrap_interval", "discordant_counts",
           "mcnemar_enhancement_p", "newcombe_paired_ci", "tango_paired_ci", "paired_interval", "leave_one_out", "enhancement_decision", "DECISION_TEST",
           "BOUNDS_METHOD"]


def discordant_counts(intact: Any, ablated: Any) -> tuple[int, int, int, int]:
    """``(both right, ablated only, intact only, both wrong)`` counts of two paired 0/1 vectors."""
    a = np.asarray(intact, dtype=bool).reshape(-1)
    b = np.asarray(ablated, dtype=bool).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"paired vectors differ in length: {a.size} and {b.size}")
    return int((a & b).sum()), int((b & ~a).sum()), int((a & ~b).sum()), int((~a & ~b).sum())


def mcnemar_enhancement_p(intact: Any, ablated: Any) -> float:
    """One-sided exact McNemar p-value for "ablating raises accuracy": ``P(X >= b)`` with
    ``X ~ Binomial(b + c, 1/2)``, ``b`` the examples only the ablated model gets right and ``c``
    those only the intact one does (1 without discordant pairs). Exact rational arithmetic."""
    _, b, c, _ = discordant_counts(intact, ablated)
    return sign_test_p(b, c)


DECISION_TEST = "one-sided exact McNemar (sign test on the discordant examples)"
"""The one test behind every "helps", "significant" and "survives" a result prints."""


BOUNDS_METHOD = "unconditional"
"""How a decision's ``bound``/``upper`` were computed (:func:`cel_lens.stats.gain_bounds`); records
without the key hold the bounds conditional on the observed discordance, and are re-rendered with
the unconditional ones from their counts."""


def enhancement_decision(intact: Any, ablated: Any, alpha: float = 0.05) -> Decision:
    """The decision "ablating raises accuracy" on paired 0/1 outcomes, by the one rule
    (:func:`cel_lens.stats.sign_test_p` at most ``alpha``), with the exact one-sided bound that
    never contradicts it and the largest gain it does not rule out (:func:`cel_lens.stats.gain_bounds`,
    each covering the true gain at level ``1 - alpha`` whatever the discordance), and the smallest
    gain it detects at 80 % power at this ``n`` and the observed discordance: ``{"test", "alpha",
    "wins", "losses", "n", "p", "helps", "bound", "upper", "bounds", "mde"}``."""
    _, b, c, _ = discordant_counts(intact, ablated)
    n = len(np.asarray(intact).reshape(-1))
    p = sign_test_p(b, c)
    lower, upper = gain_bounds(b, c, n, alpha)
    return {"test": DECISION_TEST, "alpha": alpha, "wins": b, "losses": c, "n": n, "p": p, "helps": bool(p <= alpha),
            "bound": lower, "upper": upper, "bounds": BOUNDS_METHOD,
            "mde": minimum_detectable_effect(n, (b + c) / n, alpha) if n else None}


def newcombe_paired_ci(intact: Any, ablated: Any, alpha: float = 0.05) -> tuple[float, float]:
    """Newcombe's method-10 interval at level ``1 - alpha`` for ``mean(ablated) - mean(intact)``
    on paired 0/1 outcomes (Wilson score limits of each accuracy, combined with the phi
    correlation of the paired table)."""
    both, only_ablated, only_intact, neither = discordant_counts(intact, ablated)
    n = both + only_ablated + only_intact + neither
    if n == 0:
        raise ValueError("no examples")
    p1, p2 = (both + only_ablated) / n, (both + only_intact) / n
    l1, u1 = wilson_interval(both + only_ablated, n, alpha)
    l2, u2 = wilson_interval(both + only_intact, n, alpha)
    denom = (both + only_ablated) * (only_intact + neither) * (both + only_intact) * (only_ablated + neither)
    phi = (both * neither - only_ablated * only_intact) / math.sqrt(denom) if denom > 0 else 0.0
    theta = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    eps = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, theta - delta), min(1.0, theta + eps)


def _tango_statistic(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic of ``p_b - p_c = delta`` (restricted maximum-likelihood variance)."""
    r = n - b - c
    lin = b * (1 - delta) + c * (1 - 3 * delta) - 2 * r * delta
    pc = max(0.0, (lin + math.sqrt(max(0.0, lin * lin + 8 * n * c * delta * (1 - delta)))) / (4 * n))
    var = n * (2 * pc + delta - delta * delta)
    diff = b - c - n * delta
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def tango_paired_ci(intact: Any, ablated: Any, alpha: float = 0.05) -> tuple[float, float]:
    """Tango's (1998) score interval at level ``1 - alpha`` for ``mean(ablated) - mean(intact)`` on
    paired 0/1 outcomes: every difference the score test does not reject. With no discordant pair
    it is ``[-d, d]`` for the largest discordance ``d`` the data allow, never ``[0, 0]``."""
    _, b, c, _ = discordant_counts(intact, ablated)
    n = len(np.asarray(intact).reshape(-1))
    if n == 0:
        raise ValueError("no examples")
    z = float(NormalDist().inv_cdf(1 - alpha / 2))
    est = (b - c) / n

    def bound(lo: float, hi: float, inside_at_lo: bool, test) -> float:
        for _ in range(100):  # bisection to well below any reported digit
            mid = (lo + hi) / 2
            if test(mid) == inside_at_lo:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    edge = 1.0 - 1e-12
    lower = -1.0 if _tango_statistic(b, c, n, -edge) <= z else bound(-edge, est, False, lambda d: _tango_statistic(b, c, n, d) <= z)
    upper = 1.0 if _tango_statistic(b, c, n, edge) >= -z else bound(est, edge, True, lambda d: _tango_statistic(b, c, n, d) >= -z)
    return max(-1.0, lower), min(1.0, upper)


def paired_interval(
    intact: Any, ablated: Any, alpha: float, method: str = SearchConfig.ci_method, *,
    n_boot: int = SearchConfig.n_boot, seed: int = 0,
) -> tuple[float, float]:
    """The test gain's interval at level ``1 - alpha`` by ``method``, one of
    :data:`~cel_lens.config.CI_METHODS` (``SearchConfig.ci_method``'s choices, where the default
    is): ``"tango"``, ``"newcombe"``, or ``"bootstrap"`` (``n_boot`` resamples drawn with ``seed``,
    :func:`cel_lens.stats.paired_bootstrap_ci`)."""
    return CI_METHODS.resolve(method)(intact, ablated, alpha, n_boot=n_boot, seed=seed)


def tango_interval(intact: Any, ablated: Any, alpha: float, *, n_boot: int = 0, seed: int = 0) -> tuple[float, float]:
    """The ``"tango"`` entry of :data:`~cel_lens.config.CI_METHODS`: :func:`tango_paired_ci`
    (``n_boot`` and ``seed`` unused)."""
    return tango_paired_ci(intact, ablated, alpha)


def newcombe_interval(intact: Any, ablated: Any, alpha: float, *, n_boot: int = 0, seed: int = 0) -> tuple[float, float]:
    """The ``"newcombe"`` entry of :data:`~cel_lens.config.CI_METHODS`: :func:`newcombe_paired_ci`
    (``n_boot`` and ``seed`` unused)."""
    return newcombe_paired_ci(intact, ablated, alpha)


def bootstrap_interval(intact: Any, ablated: Any, alpha: float, *, n_boot: int = SearchConfig.n_boot,
                       seed: int = 0) -> tuple[float, float]:
    """The ``"bootstrap"`` entry of :data:`~cel_lens.config.CI_METHODS`: ``n_boot`` paired
    bootstrap resamples drawn with ``seed`` (:func:`cel_lens.stats.paired_bootstrap_ci`)."""
    return paired_bootstrap_ci(intact, ablated, n_boot=n_boot, alpha=alpha, seed=seed)


def leave_one_out(
    evaluate: Callable[[list[HeadSet]], Bool[Tensor, "variant example"]],
    heads: HeadSet,
    ablated: Bool[Tensor, " example"],
    *,
    alpha: float = 0.05,
) -> LeaveOneOut:
    """Each head's contribution to S-hat on the examples ``ablated`` (S-hat's correctness) is
    measured on: ``evaluate(head_sets)`` gives the correctness of S-hat without each head (the
    intact model for a one-head S-hat). Returns ``{"alpha", "heads": [{"head", "without",
    "gain", "ci_low", "ci_high", "p_value", "p_holm", "supported"}], "supported": [...]}``."""
    heads = HeadSet.parse(heads)
    rest = [HeadSet([g for g in heads if g != h]) for h in heads]
    correct = evaluate(rest)
    rows, ps = [], []
    n = int(ablated.shape[0])
    for h, without, c in zip(heads, rest, correct):
        low, high = tango_paired_ci(c, ablated, alpha)
        p = mcnemar_enhancement_p(c, ablated)
        ps.append(p)
        rows.append({"head": str(h), "without": str(without), "gain": (int(ablated.sum()) - int(c.sum())) / n,
                     "ci_low": low, "ci_high": high, "p_value": p})
    for row, adjusted in zip(rows, holm_adjust(ps)):
        row["p_holm"] = float(adjusted)
        row["supported"] = bool(adjusted <= alpha)
    return {"alpha": alpha, "heads": rows, "supported": [r["head"] for r in rows if r["supported"]]}


def holm_enhancement(p_values: Sequence[float], family: int) -> list[float]:
    """Holm-adjusted one-sided p-values over a family declared as ``family`` hypotheses: missing
    ones (failed or unfinished pairs, fewer than ``family`` given) count as p = 1, so a failure
    cannot shrink the family."""
    if family < len(p_values):
        raise ValueError(f"family of {family} is smaller than the {len(p_values)} p-values given")
    padded = [*map(float, p_values), *([1.0] * (family - len(p_values)))]
    return [float(x) for x in holm_adjust(padded)[: len(p_values)]]


__all__ += ["holm_enhancement"]

"""Two tests of a choice task's calibrated result that need no threshold: did the ablation move the
answer prior, and did it make the answer margins separate the right answers better?

* :func:`prior_shift_test` — a prior shift is a change of each choice's score that does not depend on
  which answer is right. With ``δ_ij`` the change of choice ``j``'s score (centred over the example's
  choices) from intact to ablated, a pure capability change moves the right answer's score by some
  ``u`` and every wrong answer's alike, so ``δ_ij = u (1[y_i = j] - 1/m)``; a prior shift adds a
  constant ``c_j``. The estimate ``ĉ_j = (1 - 1/m) mean(δ_ij | y_i != j) + (1/m) mean(δ_ij | y_i =
  j)`` is 0 under any such capability change and ``c_j`` under a shift; each is a two-sided z-test
  (Welch variance), Holm over the choices (one for two choices, where the centred scores are ``±``
  each other). "The ablation moves the answer prior" is said only when this rejects.
* :func:`margin_auc_test` — the threshold-free calibrated test: the macro average over choices of the
  one-vs-rest AUC of the centred score (how well choice ``j``'s score tells the examples whose answer is
  ``j`` from the others). A per-choice additive bias moves every example's centred score of ``j`` by the
  same constant, so the AUC is invariant to any answer prior: no refit, no threshold. One-sided paired
  sign-flip permutation test of "ablating raises it" (the two models' scores swapped per example, each
  model's per-choice mean removed first so a prior shift cannot enter the swap), with the effect it
  detects at 80 % power (normal approximation from the permutation spread).
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Optional

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.stats import holm_adjust

__all__ = ["prior_shift_test", "margin_auc_test", "centred_scores"]


def centred_scores(scores: Float[Tensor, "example choice"]) -> Float[np.ndarray, "example choice"]:
    """Each example's choice scores minus their mean over its choices (NaN where a choice is missing)."""
    s = scores.detach().to(torch.float64).cpu().numpy()
    return s - np.nanmean(s, axis=1, keepdims=True)


def prior_shift_test(
    intact: Float[Tensor, "example choice"], ablated: Float[Tensor, "example choice"], labels: Int[Tensor, " example"],
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Whether the ablation moved the answer prior on these examples (module docstring):
    ``{"shift_prior": [ĉ_j], "p_prior": smallest Holm-adjusted p, "moves_prior": p_prior <= alpha,
    "test_prior": name}``; ``ĉ_j`` is ``None`` where a choice lacks examples on a side, ``p_prior``
    is 1 when no choice has examples on both sides."""
    delta = centred_scores(ablated) - centred_scores(intact)
    y = labels.detach().long().cpu().numpy()
    m = delta.shape[1]
    tol = 1e-9 * max(1.0, float(np.nanmax(np.abs(delta))) if np.isfinite(delta).any() else 1.0)
    shifts: list[Optional[float]] = []
    ps: list[float] = []
    for j in range(1 if m == 2 else 0, m):
        ok = ~np.isnan(delta[:, j])
        right, wrong = delta[ok & (y == j), j], delta[ok & (y != j), j]
        if len(right) < 2 or len(wrong) < 2:
            shifts.append(None)  # not estimable (JSON-safe, and equal to itself when a run is read back)
            continue
        est = (1 - 1 / m) * wrong.mean() + (1 / m) * right.mean()
        var = (1 - 1 / m) ** 2 * wrong.var(ddof=1) / len(wrong) + (1 / m) ** 2 * right.var(ddof=1) / len(right)
        shifts.append(float(est))
        z = 0.0 if abs(est) <= tol else est / np.sqrt(var) if var > 0 else np.inf  # rounding is no shift
        ps.append(2 * (1 - NormalDist().cdf(abs(float(z)))))
    p = float(holm_adjust(ps).min()) if ps else 1.0
    return {"shift_prior": shifts, "p_prior": p, "moves_prior": bool(p <= alpha),
            "test_prior": "per-choice score change balanced over the right answer, two-sided z-test, Holm over choices"}


def _macro_auc(cs: np.ndarray, y: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Macro one-vs-rest AUC of centred scores ``cs`` (``[..., example, choice]``; ``valid``: which
    ``[example, choice]`` exist), over the choices with examples on both sides (ties count one half)."""
    from scipy.stats import rankdata

    m, aucs = cs.shape[-1], []
    for j in range(1 if m == 2 else 0, m):
        ok = valid[:, j]
        pos = (y == j)[ok]
        n1, n0 = int(pos.sum()), int((~pos).sum())
        if n1 == 0 or n0 == 0:
            continue
        ranks = rankdata(cs[..., ok, j], axis=-1)
        aucs.append((ranks[..., pos].sum(-1) - n1 * (n1 + 1) / 2) / (n1 * n0))
    return np.mean(aucs, axis=0) if aucs else np.full(cs.shape[:-2], np.nan)


def margin_auc_test(
    intact: Float[Tensor, "example choice"], ablated: Float[Tensor, "example choice"], labels: Int[Tensor, " example"],
    alpha: float = 0.05, n_permutations: int = 2000, seed: int = 0, power: float = 0.8,
) -> dict[str, Any]:
    """The threshold-free calibrated test (module docstring): ``{"auc_intact", "auc_ablated", "p_auc",
    "auc_mde", "n_permutations_auc", "test_auc"}``; ``p_auc`` is ``(1 + b) / (1 + R)`` for the ``b``
    of ``R`` sign flips whose AUC gain is at least the observed one, ``auc_mde`` the AUC gain it
    detects with probability ``power`` (``z_{1-α} + z_power`` permutation standard deviations); all
    ``None`` when no choice has examples on both sides."""
    a, b = centred_scores(intact), centred_scores(ablated)
    a, b = a - np.nanmean(a, axis=0), b - np.nanmean(b, axis=0)  # each model's prior removed
    y = labels.detach().long().cpu().numpy()
    valid = ~(np.isnan(a) | np.isnan(b))
    auc_a, auc_b = float(_macro_auc(a, y, valid)), float(_macro_auc(b, y, valid))
    name = "macro one-vs-rest AUC of the centred choice scores, one-sided paired sign-flip permutation test"
    if not (np.isfinite(auc_a) and np.isfinite(auc_b)):  # no choice has examples on both sides
        return {"auc_intact": None, "auc_ablated": None, "p_auc": None, "auc_mde": None,
                "n_permutations_auc": int(n_permutations), "test_auc": name}
    rng = np.random.default_rng(seed)
    diffs = []
    for start in range(0, n_permutations, 250):
        flip = rng.random((min(250, n_permutations - start), a.shape[0], 1)) < 0.5
        x, z = np.where(flip, b, a), np.where(flip, a, b)
        diffs.append(_macro_auc(z, y, valid) - _macro_auc(x, y, valid))
    null = np.concatenate(diffs)
    observed = auc_b - auc_a
    sd = float(null.std(ddof=1)) if len(null) > 1 else float("nan")
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    return {"auc_intact": auc_a, "auc_ablated": auc_b, "p_auc": float((1 + (null >= observed - 1e-12).sum()) / (1 + len(null))),
            "auc_mde": z * sd, "n_permutations_auc": int(n_permutations), "test_auc": name}

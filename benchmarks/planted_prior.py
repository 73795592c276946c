"""The prior-shift cells of ``python -m benchmarks.planted_study`` (issue 57 item 3): does the result
say "the ablation moves the answer prior" when it does not, and how often does each calibrated test
find a real gain?

Two choices (labels 62 % "yes", as BoolQ's D_test): the answer margin ``s_yes - s_no`` is binormal,
``d/2`` towards the right answer plus a lean of -0.5 towards "no" plus N(0, 1) noise, with ``d`` set
by the margin's AUC (``d = √2 Φ⁻¹(AUC)``); the ablated model's noise is correlated 0.8 with the
intact one's. Cells: **no prior shift** (AUC 0.55 -> 0.60, lean unchanged: the issue's simulation),
**prior only** (AUC 0.55 both, lean -0.5 -> +0.3) and **no change**. Four choices (40/20/20/20):
``s_ij = N(0, 1) + g [j = y_i]``, ``g`` 0.3 -> 0.5 (no prior shift) or choice 0 +0.6 (prior only).

Per cell: the share of seeds where the warning says the prior moved (``moves_prior`` with a positive
raw gain not shown to survive), where the sentence of before ("it moves the answer prior; it does not
add capability": any positive raw gain not surviving) would have been printed, where the prior-shift
test rejects, and where each calibrated test (best prior on D_test, one-sided exact; the margin AUC,
one-sided permutation) rejects, with each one's mean 80 %-power effect.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np
import torch

from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias
from cel_lens.selection.prior_tests import margin_auc_test, prior_shift_test
from cel_lens.stats import minimum_detectable_effect, sign_test_p

__all__ = ["CELLS", "prior_cell"]

CELLS = {
    "2 choices, no prior shift (AUC 0.55 -> 0.60)": (2, 0.55, 0.60, -0.5, -0.5),
    "2 choices, prior only (lean -0.5 -> +0.3)": (2, 0.55, 0.55, -0.5, 0.3),
    "2 choices, no change": (2, 0.55, 0.55, -0.5, -0.5),
    "4 choices, no prior shift (gold +0.3 -> +0.5)": (4, 0.3, 0.5, 0.0, 0.0),
    "4 choices, prior only (choice 0 +0.6)": (4, 0.3, 0.3, 0.0, 0.6),
}


def _scores(rng: np.random.Generator, y: np.ndarray, m: int, effect: float, lean: float, noise: np.ndarray) -> torch.Tensor:
    """One model's choice scores for labels ``y`` (see the module docstring)."""
    n = len(y)
    if m == 2:
        d = np.sqrt(2) * NormalDist().inv_cdf(effect)
        margin = d / 2 * (2 * y - 1) + lean + noise[:, 0]
        return torch.tensor(np.stack([np.zeros(n), margin], 1))
    s = noise.copy()
    s[np.arange(n), y] += effect
    s[:, 0] += lean
    return torch.tensor(s)


def prior_cell(cell: str, seeds: int, n: int = 1000, n_permutations: int = 500) -> dict[str, Any]:
    """The shares and mean detectable effects of one cell over ``seeds`` seeds."""
    m, e0, e1, lean0, lean1 = CELLS[cell]
    out: dict[str, list[float]] = {}
    for seed in range(seeds):
        rng = np.random.default_rng([seed, m, 57])
        y = rng.choice(m, size=n, p=[0.38, 0.62] if m == 2 else [0.4, 0.2, 0.2, 0.2])
        eps = rng.normal(size=(n, m))
        eps_b = 0.8 * eps + 0.6 * rng.normal(size=(n, m))
        a, b = _scores(rng, y, m, e0, lean0, eps), _scores(rng, y, m, e1, lean1, eps_b)
        labels = torch.tensor(y)
        raw_a, raw_b = calibrated_predictions(a) == labels, calibrated_predictions(b) == labels
        best_a = calibrated_predictions(a, fit_choice_bias(a, labels)) == labels
        best_b = calibrated_predictions(b, fit_choice_bias(b, labels)) == labels
        wins, losses = int((best_b & ~best_a).sum()), int((best_a & ~best_b).sum())
        survives = sign_test_p(wins, losses) <= 0.05
        prior = prior_shift_test(a, b, labels)
        auc = margin_auc_test(a, b, labels, n_permutations=n_permutations, seed=seed)
        positive = int(raw_b.sum()) > int(raw_a.sum())
        mde = minimum_detectable_effect(n, (wins + losses) / n)
        for key, value in (("warning says the prior moved (after)", positive and not survives and prior["moves_prior"]),
                           ("prior sentence of before", positive and not survives),
                           ("prior-shift test rejects", prior["moves_prior"]), ("best-prior test rejects", survives),
                           ("AUC test rejects", auc["p_auc"] <= 0.05),
                           ("best-prior 80%-power effect (pp)", 100 * mde if mde is not None else np.nan),
                           ("AUC 80%-power effect", auc["auc_mde"]),
                           ("calibrated gain (pp)", 100 * (wins - losses) / n), ("AUC gain", auc["auc_ablated"] - auc["auc_intact"])):
            out.setdefault(key, []).append(float(value))
    return {k: float(np.nanmean(v)) for k, v in out.items()} | {"seeds": seeds, "n_test": n}

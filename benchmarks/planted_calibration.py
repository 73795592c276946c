"""The calibration cells of ``python -m benchmarks.planted_study``: synthetic choice scores with a
planted prior-only ablation (a constant shift of one choice's score, plus per-example jitter) and a
planted capability ablation (a share of the examples fixed), scored by the old rule and the new.

Scores: ``s_ij = 1.0 * [j = y_i] + N(0, 1) + lean_j`` with the intact model leaning away from the
majority answer (``lean_0 = -0.6``); the prior-only ablation adds ``+0.9`` to choice 0's score (the
majority answer under skewed labels, so the raw accuracy rises) and ``N(0, 0.2)`` jitter to every
score; the capability ablation fixes 8 % of the
examples (their gold score +3) and adds the same jitter. The old rule fits each model's bias on
D_dist by coordinate search from b = 0 and calls a gain surviving when the paired bootstrap CI lies
above 0; the new one is :func:`cel_lens.selection.calibration.calibration_statistics`' verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias
from cel_lens.stats import paired_bootstrap_ci, sign_test_p

LABELS = {
    (2, "uniform"): [0.5, 0.5], (2, "skewed"): [0.63, 0.37],
    (4, "uniform"): [0.25, 0.25, 0.25, 0.25], (4, "skewed"): [0.4, 0.2, 0.2, 0.2],
}


def _draw(rng: np.random.Generator, n: int, probs: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    m = len(probs)
    y = rng.choice(m, size=n, p=probs)
    s = rng.normal(size=(n, m))
    s[np.arange(n), y] += 1.0
    s[:, 0] -= 0.6
    return torch.tensor(s), torch.tensor(y)


def _ablate(rng: np.random.Generator, s: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    out = s.clone() + torch.tensor(rng.normal(scale=0.2, size=tuple(s.shape)))
    if kind == "prior":
        out[:, 0] += 0.9
    else:
        fixed = torch.tensor(rng.random(s.shape[0]) < 0.08)
        out[fixed, y[fixed]] += 3.0
    return out


def old_fit(scores: torch.Tensor, labels: torch.Tensor, sweeps: int = 20) -> torch.Tensor:
    """The fit before: coordinate ascent from b = 0 over choices 1..m-1 only (never the common
    offset), ties to the interval nearest the current value."""
    s, y = scores.double(), labels.long()
    n, m = s.shape
    bias = torch.zeros(m, dtype=torch.float64)
    for _ in range(sweeps):
        moved = False
        for j in range(1, m):
            others = s + bias[None, :]
            others[:, j] = float("-inf")
            best_other, pred = others.max(1)
            t = best_other - s[:, j]
            order = torch.argsort(t)
            ts, above, below = t[order], (y == j)[order].double(), ((y != j) & (pred == y))[order].double()
            score = torch.cat([torch.zeros(1, dtype=torch.float64), above.cumsum(0)])
            score = score + torch.cat([below.flip(0).cumsum(0).flip(0), torch.zeros(1, dtype=torch.float64)])
            edges = torch.cat([ts[:1] - 1.0, ts, ts[-1:] + 1.0])
            mids = (edges[:-1] + edges[1:]) / 2
            distinct = torch.cat([torch.ones(1, dtype=torch.bool), ts[1:] > ts[:-1], torch.ones(1, dtype=torch.bool)])
            best = score.masked_fill(~distinct, -1.0)
            ties = torch.nonzero(best == best.max())[:, 0]
            new = float(mids[ties[torch.argmin((mids[ties] - bias[j]).abs())]])
            moved |= new != float(bias[j])
            bias[j] = new
        if not moved:
            break
    return bias


def _acc(s: torch.Tensor, y: torch.Tensor, b: torch.Tensor) -> float:
    return float((calibrated_predictions(s, b) == y).double().mean())


def _common_offset_best(s: torch.Tensor, y: torch.Tensor) -> float:
    """The best D_dist accuracy over b = (0, c, ..., c) for every c (exhaustive over breakpoints)."""
    rest = s[:, 1:].max(1).values
    t = s[:, 0] - rest  # choice 0 wins when c < t
    cuts = torch.sort(t).values
    grid = torch.cat([cuts[:1] - 1, (cuts[1:] + cuts[:-1]) / 2, cuts[-1:] + 1])
    return max(_acc(s, y, torch.tensor([0.0] + [float(c)] * (s.shape[1] - 1))) for c in grid)


def calibration_cell(m: int, labels: str, n_dist: int, seeds: int, n_test: int = 500) -> dict[str, Any]:
    """Type-I (prior-only), power (capability) of the old and new rules, and the fit's optimality."""
    probs = LABELS[(m, labels)]
    old_t1, new_t1, new_power, old_power, fit_new, fit_old, fit_offset = [], [], [], [], [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, m, n_dist, len(labels)])
        sd, yd = _draw(rng, n_dist, probs)
        st, yt = _draw(rng, n_test, probs)
        for kind, old_out, new_out in (("prior", old_t1, new_t1), ("capability", old_power, new_power)):
            noise = np.random.default_rng([seed, 99, m, n_dist])
            ad, at = _ablate(noise, sd, yd, kind), _ablate(noise, st, yt, kind)
            intact_old = calibrated_predictions(st, old_fit(sd, yd)) == yt
            ablated_old = calibrated_predictions(at, old_fit(ad, yd)) == yt
            low, _ = paired_bootstrap_ci(intact_old, ablated_old, n_boot=500, seed=seed)
            old_out.append(low > 0)
            ablated = calibrated_predictions(at, fit_choice_bias(at, yt)) == yt
            intact_best = calibrated_predictions(st, fit_choice_bias(st, yt)) == yt  # the new rule: both at their best
            wins, losses = int((ablated & ~intact_best).sum()), int((intact_best & ~ablated).sum())
            new_out.append(sign_test_p(wins, losses) <= 0.05)
        if m > 2:
            fit_new.append(_acc(sd, yd, fit_choice_bias(sd, yd)))
            fit_old.append(_acc(sd, yd, old_fit(sd, yd)))
            fit_offset.append(_common_offset_best(sd, yd))
    out = {"prior-only survives: old": float(np.mean(old_t1)), "prior-only survives: new": float(np.mean(new_t1)),
           "capability survives: old": float(np.mean(old_power)), "capability survives: new": float(np.mean(new_power)),
           "seeds": seeds}
    if fit_new:
        out |= {"D_dist acc: new fit": float(np.mean(fit_new)), "D_dist acc: old fit": float(np.mean(fit_old)),
                "D_dist acc: best common offset": float(np.mean(fit_offset)),
                "new fit below a common offset (share of seeds)": float(np.mean(np.array(fit_new) < np.array(fit_offset) - 1e-12))}
    return out

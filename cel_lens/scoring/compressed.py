"""Compressed sensing in the spirit of Bair et al. (2026): random multi-head knockouts, then a Lasso.

``m`` random multi-head knockouts (each head ablated with probability ``sparsity``) are evaluated
once each on D_dist, and the accuracy change of each is regressed on its mask: ``y = X b + c``, one
coefficient per head, in accuracy units. With fewer masks than heads the regression is sparse
(a Lasso), and three choices make its estimates fit for ranking heads into a candidate pool:

* **The penalty is calibrated, not fixed.** The noise level ``sigma`` of ``y`` (what the sparse
  model leaves unexplained: evaluation noise, the dense background of small effects,
  interactions) is estimated by the scaled Lasso (Sun & Zhang 2012), and the penalty is chosen by
  K-fold cross-validation among multiples ``t`` of one standard error of a coefficient,
  ``sigma * sqrt(s(1 - s) / m)`` in the Lasso's units; the prediction error of the *refitted*
  model decides, so a support too large to refit is never chosen.
* **The kept heads are refitted without penalty** (least squares on the Lasso's support, the
  "relaxed Lasso"): a Lasso shrinks every kept coefficient by the penalty, which makes a +2 pp
  head look like a fraction of that.
* **Every other head gets its unpenalised one-step estimate**, the least-squares coefficient of
  its mask column on the refitted model's residual, instead of an exact zero: ties at zero
  would otherwise fill the pool in head-index order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, head_sets_from_masks
from cel_lens.oracle import DIST_SPLIT, Oracle, Stage1Scores, call_oracle, evaluate_chunked
from cel_lens.scoring.base import Cost, Scorer
from cel_lens.tasks.base import Split

__all__ = [
    "random_masks", "lasso", "lasso_scores", "default_n_masks", "compressed_scores", "PENALTY_GRID",
    "CompressedOptions", "CompressedScorer",
]

PENALTY_GRID: tuple[float, ...] = tuple(float(t) for t in np.geomspace(0.5, 8.0, 9))
"""Penalties tried by cross-validation, in standard errors of one coefficient."""


def random_masks(
    n_masks: int, n_layers: int, n_heads: int, sparsity: float, seed: int = 0
) -> Bool[Tensor, "mask layer head"]:
    """``n_masks`` random knockout masks, each head ablated independently with probability
    ``sparsity`` (at least one head per mask)."""
    if not 0.0 < sparsity < 1.0:
        raise ValueError(f"sparsity must lie in (0, 1), got {sparsity}")
    gen = torch.Generator().manual_seed(seed)
    masks = torch.rand(n_masks, n_layers, n_heads, generator=gen) < sparsity
    empty = ~masks.flatten(1).any(1)
    if empty.any():  # give empty masks one random head
        flat = masks.flatten(1)
        picks = torch.randint(0, n_layers * n_heads, (int(empty.sum()),), generator=gen)
        flat[empty.nonzero().squeeze(1), picks] = True
        masks = flat.view(n_masks, n_layers, n_heads)
    return masks


@dataclass(frozen=True)
class _Problem:
    """A Lasso's sufficient statistics: centred ``G = Xc'Xc/n``, ``c = Xc'yc/n``, ``d = diag(G)``
    and the means (computed once, shared by every penalty fitted to the same data)."""

    G: np.ndarray
    c: np.ndarray
    d: np.ndarray
    x_mean: np.ndarray
    y_mean: float

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray) -> "_Problem":
        x_mean, y_mean = X.mean(0), float(y.mean())
        Xc = X - x_mean
        G = Xc.T @ Xc / X.shape[0]
        return cls(G, Xc.T @ (y - y_mean) / X.shape[0], np.diag(G).copy(), x_mean, y_mean)


def _solve(pr: _Problem, alpha: float, start: Optional[np.ndarray], n_iter: int, tol: float) -> np.ndarray:
    """Coordinate descent over an active set (see :func:`lasso`)."""
    G, c, d = pr.G, pr.c, pr.d
    b = np.zeros(len(c)) if start is None else np.array(start, dtype=np.float64)
    Gb = G @ b
    free = d > 0
    active = np.flatnonzero(b)
    for _ in range(n_iter):
        coef, cs, ds = b[active].tolist(), c[active].tolist(), d[active].tolist()
        for _ in range(n_iter):
            biggest = 0.0
            for i, j in enumerate(active):
                rho = cs[i] - Gb[j] + ds[i] * coef[i]
                new = (rho - alpha if rho > alpha else rho + alpha if rho < -alpha else 0.0) / ds[i]
                if new != coef[i]:
                    step = new - coef[i]
                    Gb += step * G[j]
                    biggest = max(biggest, abs(step))
                    coef[i] = new
            if biggest < tol:
                break
        b[active] = coef
        # coefficients at zero stay there iff |c_j - (G b)_j| <= alpha (the Lasso's optimality condition)
        outside = free & (b == 0) & (np.abs(c - Gb) > alpha * (1 + 1e-12))
        if not outside.any():
            return b
        active = np.union1d(active, np.flatnonzero(outside))
    return b


def lasso(
    X: Float[np.ndarray, "sample feature"],
    y: Float[np.ndarray, " sample"],
    alpha: float,
    n_iter: int = 1000,
    *,
    start: Optional[Float[np.ndarray, " feature"]] = None,
    tol: float = 1e-10,
) -> tuple[Float[np.ndarray, " feature"], float]:
    """Lasso by cyclic coordinate descent: minimise ``||y - X b - c||^2 / (2n) + alpha ||b||_1``.

    Returns ``(b, c)``. Covariance updates over an active set: coordinate descent on the active
    coefficients until the largest change is below ``tol``, then one vectorised check of the
    optimality conditions of every other coefficient adds those that violate them, until none does.
    ``start`` warm-starts it. Small and dependency-free; exact on orthogonal designs
    (soft-thresholding).
    """
    pr = _Problem.of(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))
    b = _solve(pr, alpha, start, n_iter, tol)
    return b, float(pr.y_mean - pr.x_mean @ b)


def _refit(X: np.ndarray, y: np.ndarray, support: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares on the ``support`` columns (the relaxed Lasso); zero elsewhere."""
    b = np.zeros(X.shape[1])
    x_mean, y_mean = X.mean(0), float(y.mean())
    if support.size:
        b[support] = np.linalg.lstsq(X[:, support] - x_mean[support], y - y_mean, rcond=None)[0]
    return b, float(y_mean - x_mean @ b)


def _noise_level(X: np.ndarray, y: np.ndarray, n_iter: int = 20) -> float:
    """The scaled Lasso's ``sigma``: alternate a Lasso at the universal penalty
    ``sigma * sqrt(2 log p / n)`` (per unit-variance column) with ``sigma = ||r|| / sqrt(n - |S|)``."""
    n, p = X.shape
    pr = _Problem.of(X, y)
    scale = float(np.sqrt(pr.d.mean()))
    sigma = float(y.std()) or 1e-12
    b = None
    for _ in range(n_iter):
        b = _solve(pr, sigma * scale * np.sqrt(2 * np.log(max(p, 2)) / n), b, 1000, 1e-10)
        resid = y - X @ b - float(pr.y_mean - pr.x_mean @ b)
        new = float(np.sqrt((resid @ resid) / max(n - np.count_nonzero(b) - 1, 1))) or 1e-12
        if abs(new - sigma) <= 1e-6 * sigma:
            return new
        sigma = new
    return sigma


def _cv_penalty(X: np.ndarray, y: np.ndarray, unit: float, folds: int, seed: int) -> float:
    """The grid multiple of ``unit`` whose refitted Lasso predicts held-out masks best."""
    n = X.shape[0]
    fold = np.random.default_rng(seed).permutation(n) % folds
    err = np.zeros(len(PENALTY_GRID))
    for k in range(folds):
        train, held = fold != k, fold == k
        pr, b = _Problem.of(X[train], y[train]), None
        for i in reversed(range(len(PENALTY_GRID))):  # largest penalty first: warm starts
            b = _solve(pr, PENALTY_GRID[i] * unit, b, 1000, 1e-10)
            coef, c = _refit(X[train], y[train], np.flatnonzero(b))
            err[i] += float(((y[held] - X[held] @ coef - c) ** 2).sum())
    return PENALTY_GRID[int(np.argmin(err))] * unit


def lasso_scores(
    X: Float[np.ndarray, "mask head"],
    y: Float[np.ndarray, " mask"],
    *,
    alpha: Optional[float] = None,
    folds: int = 5,
    seed: int = 0,
) -> Float[np.ndarray, " head"]:
    """Per-head effects from masks ``X`` and accuracy changes ``y`` (see the module docstring): the
    Lasso at ``alpha`` (default: cross-validated over :data:`PENALTY_GRID` standard errors), its
    support refitted by least squares, every other head its one-step estimate on the residual
    (0 for a head no mask ablates: nothing is known of it)."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    col_var = ((X - X.mean(0)) ** 2).mean(0)
    if alpha is None:
        unit = _noise_level(X, y) * float(np.sqrt(col_var.mean() / n))
        alpha = _cv_penalty(X, y, unit, max(2, min(folds, n)), seed) if n >= 2 * folds else 2 * unit
    support = np.flatnonzero(lasso(X, y, alpha)[0])
    coef, c = _refit(X, y, support)
    resid = y - X @ coef - c
    seen = col_var > 0
    one_step = np.zeros_like(coef)
    one_step[seen] = ((X[:, seen] - X[:, seen].mean(0)).T @ resid / n) / col_var[seen]
    out = one_step
    out[support] = coef[support]
    return out


def default_n_masks(n_total: int, sparsity: float) -> int:
    """Masks by default: half the number of heads, but enough that each head is ablated in about
    five masks (``5 / sparsity``), and at least 32. On small models that is close to the ``n_total``
    single-head evaluations of the exact scorer: compressed sensing pays off on large ones."""
    return max(32, n_total // 2, math.ceil(5 / sparsity))


def compressed_scores(
    oracle: Oracle,
    *,
    n_masks: Optional[int] = None,
    sparsity: float = 0.05,
    alpha: Optional[float] = None,
    seed: int = 0,
    batch: int = 32,
    progress: bool = True,
) -> Float[Tensor, "layer head"]:
    """Compressed-sensing stage-1 scores over an oracle (discovery split only), in accuracy units.

    ``n_masks`` defaults to :func:`default_n_masks`; ``alpha`` (the Lasso penalty) defaults to a
    cross-validated multiple of the estimated noise level (:func:`lasso_scores`).
    """
    n_layers, n_heads = oracle.n_layers, oracle.n_heads
    m = n_masks or default_n_masks(n_layers * n_heads, sparsity)
    masks = random_masks(m, n_layers, n_heads, sparsity, seed)
    sets = head_sets_from_masks(masks)
    intact = call_oracle(oracle, "dist", [HeadSet()], "intact").to(torch.float64).mean(1)
    accs = evaluate_chunked(oracle, "dist", sets, "compressed", batch, progress).to(torch.float64).mean(1)
    y = (accs - intact).numpy()
    X = masks.flatten(1).double().numpy()
    scores = lasso_scores(X, y, alpha=alpha, seed=seed)
    return torch.from_numpy(scores).float().view(n_layers, n_heads)


@dataclass(frozen=True)
class CompressedOptions:
    """The compressed-sensing scorer's options (the :class:`~cel_lens.config.SearchConfig` fields
    of the same names): knockout masks (``None``: :func:`default_n_masks`), the fraction of heads
    each knocks out, and the seed of the masks."""

    n_masks: Optional[int] = None
    sparsity: float = 0.05
    seed: int = 0


class CompressedScorer(Scorer):
    """Random multi-head knockouts on D_dist and a Lasso (:func:`compressed_scores`)."""

    name = "compressed"
    quantity = "est. Δ accuracy"
    Options = CompressedOptions

    @classmethod
    def manifest_options(cls, config: Any) -> dict[str, Any]:
        return {"n_masks": config.n_masks, "sparsity": config.sparsity}

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        o = self.options
        masks = o.n_masks if o.n_masks is not None else default_n_masks(n_layers * n_heads, o.sparsity)
        return Cost(masks, "random multi-head knockouts, priced as whole passes", full=masks)  # each reaches near layer 0

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        if oracle is None:
            raise ValueError("the 'compressed' scorer needs oracle=...")
        o = self.options
        values = compressed_scores(oracle, n_masks=o.n_masks, sparsity=o.sparsity, seed=o.seed, progress=progress)
        return Stage1Scores(values, DIST_SPLIT, self.name)

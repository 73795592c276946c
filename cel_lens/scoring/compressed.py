"""Compressed sensing in the spirit of Bair et al. (2026): random multi-head knockouts, then a Lasso.

``m`` random multi-head knockouts (each head ablated with probability ``sparsity``) are evaluated
once each on D_dist; a sparse regression of the accuracy change on the mask matrix estimates every
single head's gain, in accuracy units, with far fewer evaluations than ``L*H`` when few heads matter.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, head_sets_from_masks
from cel_lens.oracle import Oracle, call_oracle, evaluate_chunked

__all__ = ["random_masks", "lasso", "compressed_scores"]


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


def lasso(
    X: Float[np.ndarray, "sample feature"], y: Float[np.ndarray, " sample"], alpha: float, n_iter: int = 500
) -> tuple[Float[np.ndarray, " feature"], float]:
    """Lasso by cyclic coordinate descent: minimise ``||y - X b - c||^2 / (2n) + alpha ||b||_1``.

    Returns ``(b, c)``. Small and dependency-free; exact on orthogonal designs (soft-thresholding).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, p = X.shape
    x_mean, y_mean = X.mean(0), y.mean()
    Xc, yc = X - x_mean, y - y_mean
    col_sq = (Xc**2).sum(0) / n
    b = np.zeros(p)
    resid = yc.copy()
    for _ in range(n_iter):
        max_step = 0.0
        for j in range(p):
            if col_sq[j] == 0.0:
                continue
            old = b[j]
            rho = Xc[:, j] @ resid / n + col_sq[j] * old
            new = np.sign(rho) * max(abs(rho) - alpha, 0.0) / col_sq[j]
            if new != old:
                resid -= Xc[:, j] * (new - old)
                b[j] = new
                max_step = max(max_step, abs(new - old))
        if max_step < 1e-10:
            break
    return b, float(y_mean - x_mean @ b)


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
    """Compressed-sensing stage-1 scores over an oracle (discovery split only).

    ``n_masks`` defaults to half the number of heads (at least 32); ``alpha`` (the Lasso penalty)
    defaults to one binomial standard error of an accuracy, ``0.5/sqrt(n_examples)`` scaled by
    ``1/sqrt(n_masks)``, which zeroes coefficients indistinguishable from evaluation noise.
    """
    n_layers, n_heads = oracle.n_layers, oracle.n_heads
    n_total = n_layers * n_heads
    m = n_masks or max(32, n_total // 2)
    masks = random_masks(m, n_layers, n_heads, sparsity, seed)
    sets = head_sets_from_masks(masks)
    intact_correct = call_oracle(oracle, "dist", [HeadSet()], "intact")
    intact = intact_correct.float().mean(1)
    accs = evaluate_chunked(oracle, "dist", sets, "compressed", batch, progress).float().mean(1)
    y = (accs - intact).numpy()
    X = masks.flatten(1).float().numpy()
    if alpha is None:
        n_examples = int(intact_correct.shape[1])
        alpha = 0.5 / np.sqrt(max(n_examples, 1)) / np.sqrt(m)
    coef, _ = lasso(X, y, alpha)
    return torch.from_numpy(coef).float().view(n_layers, n_heads)

"""Stage 1 of Algorithm 1: one score per head, ``Float[Tensor, "layer head"]``, estimating the
discovery-set gain of ablating that head alone (positive = ablation helps).

Three scorers, from exact to cheap:

* ``exact``: ablate each head alone and measure the discovery accuracy gain (the paper's scorer).
  Needs ``L*H`` evaluations, batched as variants and resumed from the activation store.
* ``attribution``: attribution patching with a zero baseline. The first-order change of a
  differentiable metric m (log-prob of the correct answer or choice) when ``z_h`` goes to zero is
  ``-(z_h . dm/dz_h)``, summed over positions and averaged over examples: one forward and one
  backward pass per batch for all heads at once. Units are nats of the metric, not accuracy; it is
  a ranking, not an accuracy estimate.
* ``compressed``: compressed sensing in the spirit of Bair et al. (2026): ``m`` random multi-head
  knockouts (each head ablated with probability ``sparsity``), one evaluation each, then a sparse
  (Lasso) regression of the accuracy change on the mask matrix. Its coefficients estimate the
  single-head gains in accuracy units with far fewer evaluations than ``L*H`` when few heads matter.

``exact`` and ``compressed`` run over an evaluation oracle (see :mod:`cel_lens.search`), so they work
for every task kind; ``attribution`` needs the model and a scorable (non-generation) split.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor
from tqdm.auto import tqdm

from cel_lens.heads import HeadSet, head_sets_from_masks

__all__ = [
    "SCORERS",
    "ScorerName",
    "score_heads",
    "attribution_scores",
    "compressed_scores",
    "random_masks",
    "lasso",
    "rank_agreement",
]

ScorerName = Literal["exact", "attribution", "compressed"]
SCORERS: tuple[str, ...] = ("exact", "attribution", "compressed")


def score_heads(
    scorer: ScorerName,
    oracle=None,
    *,
    model=None,
    split=None,
    batch_size: int = 8,
    n_masks: Optional[int] = None,
    sparsity: float = 0.05,
    seed: int = 0,
    progress: bool = True,
) -> Float[Tensor, "layer head"]:
    """Stage-1 scores by name. ``exact``/``compressed`` need an ``oracle``; ``attribution`` needs
    ``model`` and the discovery ``split``."""
    if scorer == "exact":
        from cel_lens.search import exact_scores

        _need(oracle, "oracle", scorer)
        return exact_scores(oracle)
    if scorer == "compressed":
        _need(oracle, "oracle", scorer)
        return compressed_scores(oracle, n_masks=n_masks, sparsity=sparsity, seed=seed, progress=progress)
    if scorer == "attribution":
        _need(model, "model", scorer)
        _need(split, "split", scorer)
        return attribution_scores(model, split, batch_size=batch_size, progress=progress)
    raise ValueError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")


def _need(obj: object, what: str, scorer: str) -> None:
    if obj is None:
        raise ValueError(f"the {scorer!r} scorer needs {what}=...")


# -- attribution patching ----------------------------------------------------------------------
def attribution_scores(model, split, *, batch_size: int = 8, progress: bool = True) -> Float[Tensor, "layer head"]:
    """Attribution patching with a zero baseline at every ``hook_z``: ``-(z * dm/dz)`` summed over
    positions and ``d_head``, averaged over the split's examples. ``m`` is the per-example log-prob of
    the correct answer (:func:`cel_lens.evaluate.logprob_metric`)."""
    from cel_lens.ablation import hook_z_name, model_shape
    from cel_lens.evaluate import encode_split, logprob_metric

    if getattr(split, "kind", None) == "generation":
        raise ValueError("attribution needs a scorable split (exact match or multiple choice); use 'exact' or 'compressed'")
    n_layers, n_heads = model_shape(model)
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    n_examples = 0
    batches = encode_split(model, split, batch_size)
    params = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():  # no parameter gradients: only dm/dz is needed
        p.requires_grad_(False)
    try:
        for batch in tqdm(batches, desc="attribution", disable=not progress):
            saved: dict[int, Tensor] = {}

            def start_graph(resid: Tensor, hook) -> Tensor:  # noqa: ANN001 - TL hook signature
                # the residual stream entering layer 0 becomes the graph's only leaf: no parameter
                # needs a gradient, and dm/dz_l still flows through every later layer (and later z)
                return resid.detach().requires_grad_(True)

            def keep(z: Tensor, hook) -> Tensor:  # noqa: ANN001
                saved[int(hook.name.split(".")[1])] = z
                return z

            hooks = [("blocks.0.hook_resid_pre", start_graph)]
            hooks += [(hook_z_name(layer), keep) for layer in range(n_layers)]
            with torch.enable_grad():
                metric = logprob_metric(model, batch, fwd_hooks=hooks)
                layers = sorted(saved)
                grads = torch.autograd.grad(metric.sum(), [saved[layer] for layer in layers])
            for layer, grad in zip(layers, grads):
                z = saved[layer].detach()
                if z.ndim == 3:  # flattened [batch, pos, head*d_head]
                    z, grad = z.unflatten(-1, (n_heads, -1)), grad.unflatten(-1, (n_heads, -1))
                # pad positions have z != 0 but zero gradient (they reach no scored position)
                total[layer] += (-(z * grad)).sum(dim=(0, 1, 3)).double().cpu()
            n_examples += int(metric.shape[0])
    finally:
        for p, flag in zip(model.parameters(), params):
            p.requires_grad_(flag)
    return (total / max(n_examples, 1)).float()


# -- compressed sensing ------------------------------------------------------------------------
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
    X: Float[np.ndarray, "sample feature"], y: Float[np.ndarray, "sample"], alpha: float, n_iter: int = 500
) -> tuple[Float[np.ndarray, "feature"], float]:
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
    oracle,
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
    intact_correct = oracle.evaluate("dist", [HeadSet()])
    intact = intact_correct.float().mean(1)
    accs = []
    for start in tqdm(range(0, m, batch), desc="compressed sensing", disable=not progress):
        accs.append(oracle.evaluate("dist", sets[start : start + batch]).float().mean(1))
    y = (torch.cat(accs) - intact).numpy()
    X = masks.flatten(1).float().numpy()
    if alpha is None:
        n_examples = int(intact_correct.shape[1])
        alpha = 0.5 / np.sqrt(max(n_examples, 1)) / np.sqrt(m)
    coef, _ = lasso(X, y, alpha)
    return torch.from_numpy(coef).float().view(n_layers, n_heads)


# -- agreement between scorers -----------------------------------------------------------------
def rank_agreement(
    approx: Float[Tensor, "layer head"], exact: Float[Tensor, "layer head"], top: Sequence[int] = (5, 12)
) -> dict[str, float]:
    """Spearman rank correlation and top-m recall (fraction of the exact top-m heads that the
    approximation also ranks in its top m) of an approximate scorer against ``exact``."""
    from scipy.stats import spearmanr

    a, e = approx.flatten().double().numpy(), exact.flatten().double().numpy()
    out = {"spearman": float(spearmanr(a, e).statistic)}
    for m in top:
        m = min(m, a.size)
        top_a, top_e = set(np.argsort(-a)[:m]), set(np.argsort(-e)[:m])
        out[f"recall@{m}"] = len(top_a & top_e) / m
    return out

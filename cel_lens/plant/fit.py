"""Fitting a plant's push on the train rows: a label-reading direction, a constant direction, a size.

Every push a plant adds is ``scale * (v . z_R) * d``: ``z_R`` the 64-wide attention output of a
last-layer *reader* head at the answer position, ``v`` a direction in it, ``d`` the residual
direction that moves the yes-minus-no margin (:func:`push_direction`). Two readers:

* :func:`skill_direction`: ``v`` a ridge-regularised linear discriminant of the label, made
  orthogonal to the rows' mean ``z_R``, so the push has mean zero on the train rows: it moves
  *which* questions are answered " yes", not how many (no prior), and it carries the label signal
  the base model's own margin lacks;
* :func:`constant_direction`: ``v`` the direction along which ``v . z_R`` is most nearly constant
  across rows (largest mean over spread, ``Sigma^-1 mu``), so the push is an almost constant shift
  of the margin: a prior, not a capability.

Sizes are read off :func:`margins_under`, which applies a whole plant to the features exactly as
the model computes its last layer (:func:`~cel_lens.plant.features.last_layer_margin`).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.plant.features import LastLayer, last_layer_margin
from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias

__all__ = ["push_direction", "skill_direction", "constant_direction", "cv_skill_scores", "head_slice",
           "planted_o_proj", "margins_under", "best_prior_accuracy", "auc", "to_grid"]


def to_grid(x: Tensor) -> Tensor:
    """``x`` rounded to bfloat16's grid and back to float32: a fitted vector whose last bits (the
    summation order of a matmul on another thread count) do not change the planted weights."""
    return x.to(torch.bfloat16).to(torch.float32)


def head_slice(w: LastLayer, head: int) -> slice:
    """Head ``head``'s columns of the output projection (its rows of the query projection)."""
    return slice(head * w.d_head, (head + 1) * w.d_head)


def push_direction(w: LastLayer) -> Float[Tensor, " d_model"]:
    """The residual direction ``d`` with ``d . (g * (u_yes - u_no)) = 1`` (``g`` the final norm's
    gain): added to the last layer's output it moves the margin by about ``1 / rms`` per unit."""
    a = w.final_norm * w.unembed_diff
    return to_grid(a / a.dot(a))


def _lda(x: Tensor, y: Tensor, lam: float) -> Tensor:
    x, y = x.double(), y.bool()
    cov = torch.cov(x.T)
    cov = cov + lam * cov.diagonal().mean() * torch.eye(x.shape[1], dtype=cov.dtype)
    v = torch.linalg.solve(cov, x[y].mean(0) - x[~y].mean(0))
    mean = x.mean(0)
    v = v - (v.dot(mean) / mean.dot(mean)) * mean  # mean zero over the rows: no prior in the push
    return v / v.norm()


def skill_direction(z: Float[Tensor, "example d_head"], labels: Int[Tensor, " example"], lam: float) -> Float[Tensor, " d_head"]:
    """Unit ``v`` separating yes from no rows in ``z`` (ridge ``lam`` times the mean variance),
    orthogonal to the rows' mean ``z`` (float32, on bfloat16's grid)."""
    return to_grid(_lda(z, labels, lam).float())


def cv_skill_scores(z: Float[Tensor, "example d_head"], labels: Int[Tensor, " example"], lam: float,
                    folds: Sequence[Tensor]) -> tuple[Float[Tensor, " example"], list[Tensor]]:
    """Out-of-fold ``v . z`` of every row (each fold scored by the direction fitted on the others) and
    the fold directions: what a fitted skill does on rows it was not fitted on."""
    out = torch.zeros(len(labels), dtype=torch.float64)
    dirs = []
    for f in folds:
        keep = torch.ones(len(labels), dtype=torch.bool)
        keep[f] = False
        v = _lda(z[keep], labels[keep], lam)
        out[f] = z[f].double() @ v
        dirs.append(v.float())
    return out, dirs


def constant_direction(z: Float[Tensor, "example d_head"], lam: float = 1e-3) -> Float[Tensor, " d_head"]:
    """Unit ``v`` maximising ``mean(v . z)^2 / var(v . z)`` over the rows, signed so the mean is
    positive (float32, on bfloat16's grid)."""
    x = z.double()
    cov = torch.cov(x.T)
    cov = cov + lam * cov.diagonal().mean() * torch.eye(x.shape[1], dtype=cov.dtype)
    v = torch.linalg.solve(cov, x.mean(0))
    v = v / v.norm()
    return to_grid((v if float(x.mean(0).dot(v)) > 0 else -v).float())


def planted_o_proj(w: LastLayer, pairs: Sequence[Mapping], ablate: Sequence[int] = ()) -> Float[Tensor, "d_model hd"]:
    """The last layer's output projection under ``pairs`` (each ``reader``, ``canceller``, ``v``,
    ``scale``): the reader's columns gain ``scale * d v^T``, the canceller's become ``-scale * d v^T``;
    then the columns of the heads in ``ablate`` zeroed (zero ablation of ``hook_z``)."""
    o = w.o_proj.clone()
    d = push_direction(w)
    for p in pairs:
        edit = p["scale"] * torch.outer(d, p["v"])
        o[:, head_slice(w, p["reader"])] += edit
        o[:, head_slice(w, p["canceller"])] = -edit
    for h in ablate:
        o[:, head_slice(w, h)] = 0.0
    return o


def margins_under(w: LastLayer, z: Float[Tensor, "example hd"], resid: Float[Tensor, "example d_model"],
                  pairs: Sequence[Mapping], ablate: Sequence[int] = ()) -> Float[Tensor, " example"]:
    """The yes-minus-no margin of every row with ``pairs`` planted (each canceller's query rows copied
    from its reader, so it attends as the reader does) and the heads in ``ablate`` zero-ablated."""
    z = z.clone()
    for p in pairs:
        z[:, head_slice(w, p["canceller"])] = z[:, head_slice(w, p["reader"])]
    return last_layer_margin(w, z, resid, planted_o_proj(w, pairs, ablate))


def best_prior_accuracy(margin: Float[Tensor, " example"], labels: Int[Tensor, " example"],
                        bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """``(right, bias)``: which rows are answered right at the per-choice bias ``bias`` (a prior
    fitted elsewhere), else at the best one on these rows (:func:`~cel_lens.selection.calibration.fit_choice_bias`,
    the calibration control's own fit, on the choice scores ``[0, margin]``)."""
    scores = torch.stack([torch.zeros_like(margin), margin], 1).double()
    if bias is None:
        bias = fit_choice_bias(scores, labels.long())
    return calibrated_predictions(scores, bias) == labels.long(), bias


def auc(score: Float[Tensor, " example"], labels: Int[Tensor, " example"]) -> float:
    """Area under the ROC curve of ``score`` for the label (ties counted half)."""
    s, y = score.double(), labels.bool()
    pos, neg = s[y], s[~y]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).double().sum() + 0.5 * (pos[:, None] == neg[None, :]).double().sum()
    return float(greater / (len(pos) * len(neg)))

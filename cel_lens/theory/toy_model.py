"""The three-head, three-feature attention model of Section 4, its two tasks and its gradient.

**Model.** Head ``h`` carries feature ``j`` through four scalars ``(q, k, v, o)_{hj}`` (diagonal
query/key/value/output matrices). The query for feature ``j`` is ``z_j = sqrt(3) x_j e_j``; it
attends, with the usual ``1/sqrt(3)`` dot-product scaling, over two memory tokens ``m_{j,±} = ±e_j``.
The ``sqrt(3)`` and ``1/sqrt(3)`` cancel, the two logits are ``±x_j q k``, and the head's output is
``c_{hj} x_j`` with ``c_{hj} = o v tanh(q k)`` (see :func:`attention_forward`, which computes the
attention literally). The predictor is linear, ``f(x) = w·x`` with ``w_j = Σ_h c_{hj}``.

**Tasks.** Features are Rademacher. Task A uses features 0 and 1 and wants coefficients
``(0, b)``; task B uses features 0 and 2 and wants ``(a, c)``::

    R_A(w) = w_0² + (w_1 − b)²        R_B(w) = (w_0 − a)² + (w_2 − c)²

**Joint objective.** Tasks are mixed with equal probability under the half squared loss,
``L = ½·(½ R_A + ½ R_B) = (R_A + R_B)/4``. Its gradient in ``w`` is ``−p ⊙ r`` with residual
``r = β − w``, ``β = (a/2, b, c)`` and per-feature weights ``p = (1, ½, ½)`` (feature 0 is seen by
both tasks). Hence gradient descent is ``θ_{hj} ← θ_{hj} + η p_j r_j ∇c(θ_{hj})`` (derived by hand
in :func:`gradient` and checked against autograd in the tests). The weighting only rescales each
feature's clock; which head wins a feature, Pr(E) and the ablation effects do not depend on it.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

N_HEADS = 3
N_FEATURES = 3
# d L / d w_j = -p_j r_j for L = (R_A + R_B) / 4: feature 0 appears in both tasks, 1 and 2 in one.
FEATURE_WEIGHTS: tuple[float, float, float] = (1.0, 0.5, 0.5)


def targets(a: float, b: float, c: float) -> Float[Tensor, "feature"]:
    """The joint optimum ``β = w* = (a/2, b, c)`` of ``(R_A + R_B)/4`` (Proposition 4.1)."""
    return torch.tensor([a / 2.0, b, c], dtype=torch.float64)


def risks(
    w: Float[Tensor, "*batch feature"], a: float, b: float, c: float
) -> tuple[Float[Tensor, "*batch"], Float[Tensor, "*batch"]]:
    """Population risks ``(R_A(w), R_B(w))`` of the linear predictor ``w`` on Rademacher inputs."""
    r_a = w[..., 0] ** 2 + (w[..., 1] - b) ** 2
    r_b = (w[..., 0] - a) ** 2 + (w[..., 2] - c) ** 2
    return r_a, r_b


def joint_objective(w: Float[Tensor, "*batch feature"], a: float, b: float, c: float) -> Float[Tensor, "*batch"]:
    """The training objective ``(R_A + R_B)/4``: equal task mixture, half squared loss."""
    r_a, r_b = risks(w, a, b, c)
    return (r_a + r_b) / 4.0


def head_contributions(theta: Float[Tensor, "*batch head feature 4"]) -> Float[Tensor, "*batch head feature"]:
    """``c_{hj} = o·v·tanh(q·k)``: what head ``h`` adds to the coefficient of feature ``j``."""
    q, k, v, o = theta.unbind(-1)
    return o * v * torch.tanh(q * k)


def attention_forward(
    theta: Float[Tensor, "head feature 4"], x: Float[Tensor, "batch feature"]
) -> Float[Tensor, "batch"]:
    """The model's prediction computed as attention, literally (not via the closed form).

    For each feature ``j`` the query ``sqrt(3) x_j e_j`` attends over memory tokens ``±e_j`` with
    logits ``(Q z)·(K m)/sqrt(3)``; values ``V m``, output ``O``; the readout sums all outputs.
    Used to check that the closed form ``f(x) = w·x`` (and so the ``1/sqrt(3)`` scaling) is right.
    """
    n_heads, n_feat, _ = theta.shape
    eye = torch.eye(n_feat, dtype=theta.dtype)
    out = torch.zeros(x.shape[0], n_feat, dtype=theta.dtype)
    for h in range(n_heads):
        Q, K, V, O = (torch.diag(theta[h, :, i]) for i in range(4))
        for j in range(n_feat):
            z = math.sqrt(3.0) * x[:, j : j + 1] * eye[j]  # [batch, feature]
            mem = torch.stack([eye[j], -eye[j]])  # [2, feature]
            logits = (z @ Q.T) @ (mem @ K.T).T / math.sqrt(3.0)  # [batch, 2]
            attn = torch.softmax(logits, dim=-1)
            out = out + (attn @ (mem @ V.T)) @ O.T
    return out.sum(-1)


def gradient(
    theta: Float[Tensor, "*batch head feature 4"], a: float, b: float, c: float
) -> Float[Tensor, "*batch head feature 4"]:
    """Hand-derived gradient of ``(R_A + R_B)/4`` with respect to every ``(q, k, v, o)_{hj}``.

    ``dL/dθ_{hj} = -p_j r_j ∇c(θ_{hj})`` with ``r = β - w`` and
    ``∇c = (o v k sech²(qk), o v q sech²(qk), o tanh(qk), v tanh(qk))``.
    """
    q, k, v, o = theta.unbind(-1)
    th = torch.tanh(q * k)
    sech2 = 1.0 - th * th
    ov = o * v
    w = (ov * th).sum(-2)  # [..., feature]
    beta = targets(a, b, c).to(theta.dtype)
    p = torch.tensor(FEATURE_WEIGHTS, dtype=theta.dtype)
    scale = (-(p * (beta - w))).unsqueeze(-2)  # [..., 1, feature]
    grad_c = torch.stack([ov * sech2 * k, ov * sech2 * q, o * th, v * th], dim=-1)
    return scale.unsqueeze(-1) * grad_c


def init_params(seeds: int, alpha: float, seed: int = 0) -> tuple[Float[Tensor, "seed head feature 4"], Float[Tensor, "seed head feature 4"]]:
    """``(G, θ⁰ = α·G)`` with ``G ~ N(0, I)`` drawn from a fixed generator (float64).

    Small initialisation (α → 0) is the regime of Theorem 4.2: the heads' escape order is then
    set by ``G`` alone.
    """
    gen = torch.Generator().manual_seed(int(seed))
    g = torch.randn(seeds, N_HEADS, N_FEATURES, 4, generator=gen, dtype=torch.float64)
    return g, alpha * g

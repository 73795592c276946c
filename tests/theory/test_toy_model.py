"""The model of Section 4: attention as a linear predictor, the risks, the hand gradient, the optimum."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import optimize

from cel_lens import theory as th

A, B, C = 2.0, 1.5, 1.25


def test_attention_forward_equals_linear_predictor():
    """Softmax attention with the 1/sqrt(3) scaling reduces to f(x) = w·x, c = o v tanh(qk)."""
    gen = torch.Generator().manual_seed(1)
    theta = torch.randn(3, 3, 4, generator=gen, dtype=torch.float64)
    xs = torch.tensor(list(itertools.product([-1.0, 0.0, 1.0], repeat=3)), dtype=torch.float64)
    w = th.head_contributions(theta).sum(0)
    torch.testing.assert_close(th.attention_forward(theta, xs), xs @ w, rtol=1e-12, atol=1e-12)
    # without the sqrt(3) cancelling, the logits would be ±sqrt(3)·qk: make sure that differs
    q, k, v, o = theta.unbind(-1)
    wrong = (o * v * torch.tanh(math.sqrt(3) * q * k)).sum(0)
    assert not torch.allclose(xs @ wrong, xs @ w)


def test_risks_are_exact_expectations_over_rademacher_inputs():
    w = torch.tensor([0.3, -0.7, 2.1], dtype=torch.float64)
    # task A: features 0 and 1 active, target b·x1; task B: features 0 and 2, target a·x0 + c·x2
    sq_a = [float((w[0] * x0 + w[1] * x1) - B * x1) ** 2 for x0, x1 in itertools.product([-1, 1], repeat=2)]
    sq_b = [float((w[0] * x0 + w[2] * x2) - (A * x0 + C * x2)) ** 2 for x0, x2 in itertools.product([-1, 1], repeat=2)]
    r_a, r_b = th.risks(w, A, B, C)
    assert float(r_a) == pytest.approx(sum(sq_a) / 4, rel=1e-12)
    assert float(r_b) == pytest.approx(sum(sq_b) / 4, rel=1e-12)
    # joint objective = equal task mixture under the half squared loss
    assert float(th.joint_objective(w, A, B, C)) == pytest.approx(0.5 * (0.5 * sum(sq_a) / 4 + 0.5 * sum(sq_b) / 4), rel=1e-12)


def test_hand_gradient_matches_autograd():
    gen = torch.Generator().manual_seed(2)
    theta = (0.8 * torch.randn(5, 3, 3, 4, generator=gen, dtype=torch.float64)).requires_grad_(True)
    loss = th.joint_objective(th.head_contributions(theta).sum(-2), A, B, C).sum()
    (auto,) = torch.autograd.grad(loss, theta)
    torch.testing.assert_close(th.gradient(theta.detach(), A, B, C), auto, rtol=1e-10, atol=1e-12)


def test_joint_optimum_is_prop_4_1():
    """Independent minimisation of the joint objective over w gives (a/2, b, c), risks a²/4."""
    fun = lambda w: float(th.joint_objective(torch.tensor(w), A, B, C))  # noqa: E731
    sol = optimize.minimize(fun, np.zeros(3), method="BFGS", options=dict(gtol=1e-12))
    np.testing.assert_allclose(sol.x, th.targets(A, B, C).numpy(), atol=1e-6)
    r_a, r_b = th.risks(th.targets(A, B, C), A, B, C)
    assert float(r_a) == pytest.approx(A * A / 4) and float(r_b) == pytest.approx(A * A / 4)

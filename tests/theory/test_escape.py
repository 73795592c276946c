"""Escape times of the auxiliary ODE (Lemma B.1) and the winners they predict (Theorem 4.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from cel_lens import theory as th

A, B, C = 2.0, 1.5, 1.25


def _quad_integrals(g: np.ndarray) -> tuple[float, float]:
    a = g**2
    f = lambda s: 1.0 / (2.0 * math.sqrt(np.prod(a + s)))  # noqa: E731
    i_plus = integrate.quad(f, 0, np.inf, epsabs=0, epsrel=1e-11, limit=400)[0]
    i_minus = integrate.quad(f, -a.min(), 0, epsabs=0, epsrel=1e-11, limit=400)[0]
    return i_plus, i_minus


def test_escape_integrals_match_adaptive_quadrature():
    rng = np.random.default_rng(4)
    gs = rng.standard_normal((8, 4))
    ip, im = th.escape_integrals(gs)
    for i, g in enumerate(gs):
        qp, qm = _quad_integrals(g)
        assert ip[i] == pytest.approx(qp, rel=1e-8)
        assert im[i] == pytest.approx(qm, rel=1e-7)


def test_escape_time_is_the_blowup_time_of_the_ode():
    """T = I₊ for a positive product and I₊ + 2I₋ for a negative one, against Runge-Kutta."""
    rng = np.random.default_rng(5)
    gs = rng.standard_normal((6, 4))
    gs[:3, 0] = np.abs(gs[:3, 0]) * np.sign(np.prod(gs[:3, 1:], axis=1))  # positive products
    gs[3:, 0] = -np.abs(gs[3:, 0]) * np.sign(np.prod(gs[3:, 1:], axis=1))  # negative products
    assert (np.prod(gs[:3], 1) > 0).all() and (np.prod(gs[3:], 1) < 0).all()
    ip, im = th.escape_integrals(gs)
    for i, g in enumerate(gs):
        ode = th.ode_escape_time(g)
        assert th.escape_time(g[None])[0] == pytest.approx(ode, rel=1e-6)
        if i >= 3:  # the I₋ terms matter: I₊ alone (or I₊ + I₋) would be wrong
            assert abs(ip[i] - ode) / ode > 1e-3 and abs(ip[i] + im[i] - ode) / ode > 1e-3


def test_escape_time_scaling_and_symmetries():
    rng = np.random.default_rng(6)
    g = rng.standard_normal((20, 4))
    r = np.exp(rng.uniform(-2, 2, 20))
    np.testing.assert_allclose(th.escape_time(r[:, None] * g), th.escape_time(g) / r**2, rtol=1e-9)
    np.testing.assert_allclose(th.escape_time(g[:, ::-1]), th.escape_time(g), rtol=1e-9)  # coordinate order
    flip2 = g * np.array([-1, -1, 1, 1])  # same product sign: same time
    np.testing.assert_allclose(th.escape_time(flip2), th.escape_time(g), rtol=1e-9)
    flip1 = g * np.array([-1, 1, 1, 1])  # opposite sign: the negative one is slower by 2I₋
    t, tf = th.escape_time(g), th.escape_time(flip1)
    pos = np.prod(g, 1) > 0
    assert (tf[pos] > t[pos]).all() and (tf[~pos] < t[~pos]).all()


def test_winners_follow_escape_times_and_a_wrong_formula_does_not():
    g, theta0 = th.init_params(600, 0.1, seed=7)
    res = th.train(theta0, A, B, C, 0.5, th.default_steps(0.1, 0.5))
    assert bool(res.converged.all())
    meas = res.contributions.abs().argmax(1).numpy()
    _, pred = th.predicted_winners(g)
    assert (pred == meas).mean() >= 0.99
    ip, im = th.escape_integrals(g)
    assert (ip.argmin(1) == meas).mean() < 0.85  # ignoring the sign of the product
    assert (np.where(np.prod(g.numpy(), -1) > 0, ip, ip + im).argmin(1) == meas).mean() < 0.96  # I₊ + I₋

"""Section 4 theory lab: the model, its gradient, the escape times, and the reproduced numbers."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, stats

from cel_lens import theory as th
from cel_lens.cli import main

A, B, C = 2.0, 1.5, 1.25


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------
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


def test_training_step_is_gradient_descent_on_the_joint_objective():
    """train's inlined update equals θ - η·∇L with the autograd-checked gradient."""
    gen = torch.Generator().manual_seed(9)
    theta0 = 0.7 * torch.randn(4, 3, 3, 4, generator=gen, dtype=torch.float64)
    for n_steps in (1, 2):
        expect = theta0.clone()
        for _ in range(n_steps):
            expect = expect - 0.3 * th.gradient(expect, A, B, C)
        got = th.train(theta0, A, B, C, 0.3, n_steps, tol=0.0).theta
        torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-14)


def test_joint_optimum_is_prop_4_1():
    """Independent minimisation of the joint objective over w gives (a/2, b, c), risks a²/4."""
    fun = lambda w: float(th.joint_objective(torch.tensor(w), A, B, C))  # noqa: E731
    sol = optimize.minimize(fun, np.zeros(3), method="BFGS", options=dict(gtol=1e-12))
    np.testing.assert_allclose(sol.x, th.targets(A, B, C).numpy(), atol=1e-6)
    r_a, r_b = th.risks(th.targets(A, B, C), A, B, C)
    assert float(r_a) == pytest.approx(A * A / 4) and float(r_b) == pytest.approx(A * A / 4)


def test_vectorized_training_equals_one_seed_at_a_time():
    g, theta0 = th.init_params(6, 0.2, seed=3)
    together = th.train(theta0, A, B, C, 0.5, 3000)
    for s in range(6):
        alone = th.train(theta0[s : s + 1], A, B, C, 0.5, 3000)
        torch.testing.assert_close(alone.contributions[0], together.contributions[s], rtol=1e-9, atol=1e-12)
        assert torch.equal(alone.cross_step[0], together.cross_step[s])


# --------------------------------------------------------------------------------------------
# escape times (Lemma B.1)
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# statistics helpers
# --------------------------------------------------------------------------------------------
def test_wilson_interval_matches_scipy():
    for k, n in [(0, 10), (3, 10), (444, 1000), (1000, 1000)]:
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        lo, hi = th.wilson_interval(k, n)
        assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)


def test_median_interval_covers_the_median():
    rng = np.random.default_rng(8)
    covered = 0
    for _ in range(200):
        x = rng.exponential(size=101)
        _, lo, hi = th.median_interval(x)
        covered += lo <= math.log(2) <= hi
    assert covered >= 180  # nominal 95% (at least), binomial slack


# --------------------------------------------------------------------------------------------
# the reproduced table
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def table() -> th.TheoryTable:
    return th.theory_table(seeds=2500, alpha=0.1, sweep_seeds=400, seed=0, n_track=4)


def _within(row: th.TheoryRow, sigmas: float = 3.0) -> bool:
    se = math.sqrt(row.predicted * (1 - row.predicted) / row.n)
    return abs(row.measured - row.predicted) <= sigmas * se


def test_table_prop_4_1(table):
    for j, target in enumerate([A / 2, B, C]):
        assert table[f"w_star_{j}"].measured == pytest.approx(target, abs=1e-8)
    assert table["risk_A_at_optimum"].measured == pytest.approx(A * A / 4, abs=1e-8)
    assert table["risk_B_at_optimum"].measured == pytest.approx(A * A / 4, abs=1e-8)
    assert table["converged_fraction"].measured == 1.0


def test_table_thm_4_2(table):
    assert table["escape_time_scaling"].ci_low > 1 - 1e-9 and table["escape_time_scaling"].ci_high < 1 + 1e-9
    assert abs(table["escape_time_quadrature_over_ode"].ci_low - 1) < 1e-5
    assert abs(table["escape_time_quadrature_over_ode"].ci_high - 1) < 1e-5
    assert table["winner_matches_escape_time"].measured >= 0.99
    assert _within(table["pr_winner_is_head_0"])
    # GD tracks the ODE clock: escape happens where T(G)/(α²ηpβ) says (a wrong p would be off by 2x)
    assert 1.0 <= table["escape_step_over_prediction"].measured <= 1.06
    # losing heads stay O(α) in parameters, so O(α⁴) in contribution
    assert 3.6 <= table["loser_c_exponent"].measured <= 4.4
    agree = [table[f"winner_matches_escape_time@alpha={x:g}"].measured for x in (0.2, 0.1, 0.05)]
    assert agree[-1] >= agree[0] and agree[-1] >= 0.995


def test_table_thm_4_3(table):
    assert _within(table["pr_E"]) and _within(table["pr_E_from_escape_times"])
    assert table["pr_E"].ci_low <= 4 / 9 <= table["pr_E"].ci_high
    assert table["gain_A_over_t2"].measured == pytest.approx(1.0, abs=1e-5)
    assert table["damage_B_over_t2"].measured == pytest.approx(3.0, abs=2e-3)
    assert table["pr_some_single_ablation_helps_A"].predicted == pytest.approx(2 / 3)
    assert _within(table["pr_some_single_ablation_helps_A"])
    assert 3.0 <= table["damage_B_remainder_exponent"].measured <= 5.0
    assert table["gain_A_remainder_exponent"].measured >= 6.0


def test_table_shape_and_text(table):
    rows = table.to_records()
    assert {"quantity", "predicted", "measured", "ci_low", "ci_high", "n"} <= set(rows[0])
    for r in table.rows:
        if not math.isnan(r.ci_low):
            assert r.ci_low <= r.measured <= r.ci_high, r
    text = table.format()
    assert "pr_E" in text and "gain_A_over_t2" in text
    json.dumps(table.to_json_dict(), allow_nan=False)


def test_theory_figures(table, tmp_path):
    paths = th.save_theory_figures(table, tmp_path, formats=("html",))
    assert sorted(p.name for p in paths) == ["theory_escape.html", "theory_trajectories.html"]
    assert all(p.stat().st_size > 1000 for p in paths)
    fig = th.plot_trajectories(table)
    assert len(fig.data) == 2 * 3 * 3  # two seeds, three features, three heads


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        th.theory_table(seeds=100, alpha=1.5)
    with pytest.raises(ValueError):
        th.theory_table(seeds=100, a=-1.0)


def test_cli_json(capsys):
    assert main(["theory", "--seeds", "300", "--sweep-seeds", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ["pr_E", "pr_some_single_ablation_helps_A", "gain_A_over_t2", "damage_B_over_t2", "winner_matches_escape_time"]:
        for field in ["predicted", "measured", "ci_low", "ci_high"]:
            assert isinstance(out[key][field], float), (key, field)
        assert out[key]["ci_low"] <= out[key]["measured"] <= out[key]["ci_high"]
    assert out["pr_E"]["predicted"] == pytest.approx(4 / 9)


def test_cli_error_is_one_line(capsys):
    assert main(["theory", "--alpha", "0"]) == 2
    assert capsys.readouterr().err.startswith("cel-lens: error: alpha")

"""The rows of the theory table, one function per group of claims in Section 4.

Each function measures what one result of the paper predicts and returns rows
(:class:`~cel_lens.theory.predictions.TheoryRow`) with the prediction, the measurement and its 95%
interval. :func:`escape_time_rows` and :func:`sweep_rows` draw from the caller's ``rng``; called
in the order of :func:`cel_lens.theory.lab.theory_table`, the table is deterministic for a seed.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from cel_lens.theory.escape import escape_time, ode_escape_time
from cel_lens.theory.experiment import (
    TheoryRun,
    ablation_effects,
    holder_ablation_effects,
    in_event_e,
    loser_max_c,
    run_seeds,
    take_head,
)
from cel_lens.theory.intervals import loglog_slope, mean_interval, median_interval, wilson_interval
from cel_lens.theory.toy_model import FEATURE_WEIGHTS, N_HEADS, risks
from cel_lens.theory.predictions import TheoryRow


def optimum_rows(run: TheoryRun, steps: int) -> list[TheoryRow]:
    """Proposition 4.1: training reaches ``w* = (a/2, b, c)`` with both risks ``a²/4``."""
    cfg, res = run.config, run.result
    a, b, c, seeds = cfg["a"], cfg["b"], cfg["c"], cfg["seeds"]
    rows = []
    w = res.w.numpy()
    for j, (name, target) in enumerate([("a/2", a / 2), ("b", b), ("c", c)]):
        m, lo, hi = mean_interval(w[:, j])
        rows.append(TheoryRow(f"w_star_{j}", "Prop 4.1", target, m, lo, hi, seeds, "t", f"trained w_{j} (mean over seeds) vs w*_{j} = {name}"))
    r_a, r_b = risks(res.w, a, b, c)
    for name, r in (("A", r_a), ("B", r_b)):
        m, lo, hi = mean_interval(r.numpy())
        rows.append(TheoryRow(f"risk_{name}_at_optimum", "Prop 4.1", a * a / 4, m, lo, hi, seeds, "t", f"R_{name} of the trained predictor vs a²/4"))
    conv = res.converged.numpy().ravel()
    lo, hi = wilson_interval(int(conv.sum()), conv.size)
    rows.append(TheoryRow("converged_fraction", "Prop 4.1", 1.0, float(conv.mean()), lo, hi, conv.size, "wilson",
                          f"(seed, feature) pairs with |r_j| < 1e-10 within {steps} steps (median {int(res.steps_run.median())})"))
    return rows


def escape_time_rows(rng: np.random.Generator) -> list[TheoryRow]:
    """Lemma B.1: ``T(r·g) = T(g)/r²``, and the quadrature ``T`` is the ODE's blow-up time."""
    gs = rng.standard_normal((64, 4))
    scales = np.exp(rng.uniform(np.log(0.05), np.log(20.0), 64))
    ratio = escape_time(gs * scales[:, None]) * scales**2 / escape_time(gs)
    rows = [TheoryRow("escape_time_scaling", "Lemma B.1", 1.0, float(ratio.mean()), float(ratio.min()), float(ratio.max()), ratio.size, "range",
                      "r²·T(r·g)/T(g) for random g and r in [0.05, 20]")]
    g_ode = rng.standard_normal((12, 4))
    quad = escape_time(g_ode)
    ode = np.array([ode_escape_time(x) for x in g_ode])
    qr = quad / ode
    n_neg = int((np.prod(g_ode, axis=1) < 0).sum())
    rows.append(TheoryRow("escape_time_quadrature_over_ode", "Lemma B.1", 1.0, float(qr.mean()), float(qr.min()), float(qr.max()), qr.size, "range",
                          f"T = I₊ (+2I₋ if Πg<0) by quadrature / blow-up time of the 4-d ODE by Runge-Kutta ({n_neg} of {qr.size} with Πg<0)"))
    return rows


def winner_rows(run: TheoryRun) -> list[TheoryRow]:
    """Theorem 4.2 and Lemma B.2: the head escaping first wins, on the ODE's clock; losers stay O(α⁴)."""
    cfg, pred, meas = run.config, run.predicted_winner, run.measured_winner
    a, b, c, alpha, eta = cfg["a"], cfg["b"], cfg["c"], cfg["alpha"], cfg["eta"]
    rows = []
    agree = pred == meas
    lo, hi = wilson_interval(int(agree.sum()), agree.size)
    rows.append(TheoryRow("winner_matches_escape_time", "Thm 4.2", 1.0, float(agree.mean()), lo, hi, agree.size, "wilson",
                          "head with the largest |c_hj| after training = argmin_h T(G_hj); → 1 as α → 0 (see sweep)"))
    counts = np.bincount(meas.ravel(), minlength=N_HEADS)
    lo, hi = wilson_interval(int(counts[0]), meas.size)
    rows.append(TheoryRow("pr_winner_is_head_0", "Thm 4.2", 1 / 3, counts[0] / meas.size, lo, hi, meas.size, "wilson", "winners are uniform over the three heads"))
    cross = run.result.cross_step.numpy()
    p = np.asarray(FEATURE_WEIGHTS)
    beta = np.array([a / 2, b, c])
    pred_step = run.escape_times / (alpha**2 * eta * p * beta)  # ODE clock -> GD steps while r ≈ β
    wc, wp = take_head(cross, meas).ravel(), take_head(pred_step, meas).ravel()
    ok = wc >= 0
    m, lo, hi = median_interval(wc[ok] / wp[ok])
    rows.append(TheoryRow("escape_step_over_prediction", "Lemma B.2", 1.0, m, lo, hi, int(ok.sum()), "median",
                          "winner's first step with |c| ≥ β_j/2 over T(G)/(α²ηp_jβ_j); → 1 as α → 0"))
    loser_c = loser_max_c(run.result.contributions, meas)
    m, lo, hi = median_interval(loser_c / alpha**4)
    rows.append(TheoryRow("loser_max_c_over_alpha4", "Thm 4.2", float("nan"), m, lo, hi, loser_c.size, "median",
                          "largest |c_hj| among losing heads, in units of α⁴: stays O(1) as α shrinks (see exponent)"))
    return rows


def ablation_rows(run: TheoryRun) -> list[TheoryRow]:
    """Theorem 4.3: Pr(E) = 4/9; on E, ablating feature 0's head gains ``t²`` on A and costs ``3t²`` on B."""
    cfg = run.config
    a, b, c, seeds = cfg["a"], cfg["b"], cfg["c"], cfg["seeds"]
    t = a / 2.0
    t2 = t * t
    rows = []
    event = in_event_e(run.measured_winner)
    lo, hi = wilson_interval(int(event.sum()), seeds)
    rows.append(TheoryRow("pr_E", "Thm 4.3", 4 / 9, float(event.mean()), lo, hi, seeds, "wilson",
                          "E: the head holding feature 0 (after training) holds neither feature 1 nor 2"))
    event_pred = in_event_e(run.predicted_winner)
    lo, hi = wilson_interval(int(event_pred.sum()), seeds)
    rows.append(TheoryRow("pr_E_from_escape_times", "Thm 4.3", 4 / 9, float(event_pred.mean()), lo, hi, seeds, "wilson",
                          "E computed from the escape-time winners alone (no training)"))
    gain_h0, damage_h0 = holder_ablation_effects(run)
    g_e, d_e, n_e = gain_h0[event] / t2, damage_h0[event] / t2, int(event.sum())
    m, lo, hi = median_interval(g_e)
    rows.append(TheoryRow("gain_A_over_t2", "Thm 4.3", 1.0, m, lo, hi, n_e, "median",
                          "on E: (R_A(w) − R_A(w − c_h0))/t², t = a/2; median over seeds (remainder is O_G(α⁴), heavy-tailed in G)"))
    m, lo, hi = median_interval(d_e)
    rows.append(TheoryRow("damage_B_over_t2", "Thm 4.3", 3.0, m, lo, hi, n_e, "median", "on E: (R_B(w − c_h0) − R_B(w))/t²; median over seeds"))
    m, lo, hi = mean_interval(g_e)
    rows.append(TheoryRow("gain_A_over_t2_mean", "Thm 4.3", 1.0, m, lo, hi, n_e, "t",
                          "mean instead of median: biased at finite α by draws with near-tied escape times; bias shrinks with α"))
    m, lo, hi = mean_interval(d_e)
    rows.append(TheoryRow("damage_B_over_t2_mean", "Thm 4.3", 3.0, m, lo, hi, n_e, "t", "mean instead of median (same caveat)"))
    tau = t2 / 2
    helps = (ablation_effects(run.result.contributions, a, b, c)[0] > tau).any(axis=1)
    predicted_helps = (2 / 3) * float(t2 > tau) + (1 / 3) * float(t2 - b * b > tau)
    lo, hi = wilson_interval(int(helps.sum()), seeds)
    rows.append(TheoryRow("pr_some_single_ablation_helps_A", "Thm 4.3", predicted_helps, float(helps.mean()), lo, hi, seeds, "wilson",
                          "some single-head ablation lowers R_A by more than t²/2; limit from uniform independent winners "
                          "(ablating h0 helps unless it also holds feature 1 and b² ≥ t²/2); Thm 4.3's bound is ≥ 4/9"))
    return rows


def sweep_rows(run: TheoryRun, sweep: Sequence[float], sweep_seeds: int, max_steps: Optional[int], rng: np.random.Generator) -> list[TheoryRow]:
    """The α → 0 trends: winner agreement at each α of ``sweep``, and the orders in α (Thms 4.2, 4.3).

    Each α trains ``sweep_seeds`` fresh seeds, except the main run's α with as many seeds, which
    reuses ``run``. The orders are fitted only with at least two α.
    """
    cfg = run.config
    t = cfg["a"] / 2.0
    t2 = t * t
    rows, loser, gain_rem, damage_rem = [], [], [], []
    for x in sweep:
        if x == cfg["alpha"] and sweep_seeds == cfg["seeds"]:
            s_run = run
        else:
            s_run = run_seeds(sweep_seeds, x, cfg["a"], cfg["b"], cfg["c"], cfg["eta"], cfg["seed"], max_steps)
        s_agree = s_run.predicted_winner == s_run.measured_winner
        lo, hi = wilson_interval(int(s_agree.sum()), s_agree.size)
        rows.append(TheoryRow(f"winner_matches_escape_time@alpha={x:g}", "Thm 4.2", 1.0, float(s_agree.mean()), lo, hi, s_agree.size, "wilson",
                              f"α sweep ({sweep_seeds} seeds each): agreement should rise toward 1 as α shrinks"))
        loser.append(loser_max_c(s_run.result.contributions, s_run.measured_winner))
        ev = in_event_e(s_run.measured_winner)
        ga, db = holder_ablation_effects(s_run)
        gain_rem.append(np.abs(ga[ev] / t2 - 1.0))
        damage_rem.append(np.abs(db[ev] / t2 - 3.0))
    if len(sweep) >= 2:
        rows += exponent_rows(sweep, loser, damage_rem, gain_rem, rng)
    return rows


def exponent_rows(
    sweep: Sequence[float],
    loser: Sequence[np.ndarray],
    damage_rem: Sequence[np.ndarray],
    gain_rem: Sequence[np.ndarray],
    rng: np.random.Generator,
) -> list[TheoryRow]:
    """Orders in α, fitted over the sweep: losing heads' ``c`` and the ablation remainders."""
    m, lo, hi = loglog_slope(sweep, loser, rng)
    rows = [TheoryRow("loser_c_exponent", "Thm 4.2", 4.0, m, lo, hi, len(sweep), "bootstrap",
                      f"slope of log median(max loser |c|) vs log α over α ∈ {sweep}: losing heads keep θ = O(α), so c = O(α⁴)")]
    m, lo, hi = loglog_slope(sweep, damage_rem, rng)
    rows.append(TheoryRow("damage_B_remainder_exponent", "Thm 4.3", 4.0, m, lo, hi, len(sweep), "bootstrap",
                          "slope of log median |damage_B/t² − 3| vs log α: remainder −2a·ε with ε = Σ loser c_h0 = O(α⁴)"))
    m, lo, hi = loglog_slope(sweep, gain_rem, rng)
    rows.append(TheoryRow("gain_A_remainder_exponent", "Thm 4.3", 8.0, m, lo, hi, len(sweep), "bootstrap",
                          "slope of log median |gain_A/t² − 1| vs log α: with w = w* exactly the remainder is −ε² − δ² = O(α⁸), "
                          "inside the paper's O(α⁴)"))
    return rows

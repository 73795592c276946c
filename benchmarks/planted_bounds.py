"""Coverage of the printed bounds of the decision (issue 57 item 2), computed exactly: for each cell
(``n`` paired examples, a true share ``d`` of discordant examples, a true gain ``Δ``; the ablated
model wins a discordant example with probability ``q = (1 + Δ / d) / 2``), the probability of every
(gained, lost) table is its trinomial probability, and the coverage of a bound is the summed
probability of the tables whose bound holds the true gain. No simulation noise; tables below
``1e-13`` of probability are left out (their total is reported as ``mass_left_out``).

The bounds compared: the printed ones (:func:`cel_lens.stats.gain_bounds`, unconditional) and the
ones printed before (:func:`cel_lens.stats.sign_test_bound` / :func:`~cel_lens.stats.sign_test_upper`,
conditional on the observed discordance). The grid: ``n`` 100–1,000, discordance 1–20 %, true gains
from 0 to the 80 %-power effect (:func:`~cel_lens.stats.minimum_detectable_effect`; the whole
discordance when there is none) and the no-loss case ``Δ = d``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as st

from cel_lens.stats import gain_bounds_array, minimum_detectable_effect

__all__ = ["conditional_bounds", "coverage_cell", "coverage_grid", "GRID_N", "GRID_D"]

GRID_N = (100, 200, 500, 1000)
GRID_D = (0.01, 0.02, 0.05, 0.10, 0.20)
CUT = 1e-13


def conditional_bounds(w: np.ndarray, l: np.ndarray, n: int, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """The bounds printed before (:func:`cel_lens.stats.sign_test_bound` and its mirror), vectorized."""
    m = w + l
    with np.errstate(all="ignore"):
        q_low = np.where(w > 0, st.beta.ppf(alpha, w, l + 1), 0.0)
        q_high = np.where(l > 0, st.beta.ppf(1 - alpha, w + 1, l), 1.0)
    return np.where(m > 0, (m / n) * (2 * q_low - 1), 0.0), np.where(m > 0, (m / n) * (2 * q_high - 1), 0.0)


def _tables(n: int, d: float, gain: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Every likely (gained, lost) table with its probability, and the probability left out."""
    pm = st.binom.pmf(np.arange(n + 1), n, d)
    ms = np.flatnonzero(pm > CUT)
    q = min(1.0, max(0.0, (1 + gain / d) / 2))
    w, l, p = [], [], []
    for m in ms:
        k = np.arange(m + 1)
        pk = pm[m] * st.binom.pmf(k, m, q)
        keep = pk > CUT
        w.append(k[keep]), l.append(m - k[keep]), p.append(pk[keep])
    w_, l_, p_ = np.concatenate(w), np.concatenate(l), np.concatenate(p)
    return w_, l_, p_, float(1 - p_.sum())


def coverage_cell(n: int, d: float, gain: float, alpha: float = 0.05) -> dict[str, float]:
    """P(lower <= Δ) and P(upper >= Δ) of the printed and of the conditional bounds in one cell."""
    w, l, p, left = _tables(n, d, gain)
    low, high = gain_bounds_array(w, l, n, alpha)
    c_low, c_high = conditional_bounds(w, l, n, alpha)
    eps = 1e-12
    return {"lower": float(p[low <= gain + eps].sum()), "upper": float(p[high >= gain - eps].sum()),
            "lower (conditional, before)": float(p[c_low <= gain + eps].sum()),
            "upper (conditional, before)": float(p[c_high >= gain - eps].sum()), "mass_left_out": left}


def _gains(n: int, d: float) -> list[tuple[str, float]]:
    """The grid's true gains in one (n, d) column: 0, a quarter to all of the 80 %-power effect, no loss."""
    mde = minimum_detectable_effect(n, d)
    top = d if mde is None else min(mde, d)
    return [*((f"{f:.2f} x effect" if mde is not None else f"{f:.2f} x d", f * top) for f in (0, 0.25, 0.5, 0.75, 1)),
            ("no loss", d)]


def coverage_grid(alpha: float = 0.05) -> dict[str, Any]:
    """Every cell of the grid: its coverage (:func:`coverage_cell`) and the worst over all cells."""
    cells = {}
    for n in GRID_N:
        for d in GRID_D:
            for label, gain in _gains(n, d):
                cells[f"n={n} d={d:.2f} gain={label} ({100 * gain:+.2f} pp)"] = coverage_cell(n, d, gain, alpha)
    worst = {key: min(c[key] for c in cells.values()) for key in next(iter(cells.values()))}
    worst["mass_left_out"] = max(c["mass_left_out"] for c in cells.values())
    return {"cells": cells, "worst": worst, "alpha": alpha}

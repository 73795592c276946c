"""The theory lab: train many seeds, measure every claim of Section 4, return one table."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from cel_lens.theory.experiment import run_seeds
from cel_lens.theory.claims import ablation_rows, escape_time_rows, optimum_rows, sweep_rows, winner_rows
from cel_lens.theory.predictions import SECTION_ORDER, TheoryTable
from cel_lens.theory.training import default_steps
from cel_lens.threads import single_thread


def theory_table(
    seeds: int = 4000,
    alpha: float = 0.1,
    *,
    a: float = 2.0,
    b: float = 1.5,
    c: float = 1.25,
    eta: float = 0.5,
    seed: int = 0,
    max_steps: Optional[int] = None,
    sweep_alphas: Optional[Sequence[float]] = None,
    sweep_seeds: int = 1000,
    n_track: int = 4,
) -> TheoryTable:
    """Train ``seeds`` random initializations ``θ⁰ = α·G`` and compare with Section 4's claims.

    Rows cover Proposition 4.1 (the joint optimum and its risks), Lemma B.1 / Theorem 4.2
    (escape times by quadrature, their scaling, the predicted vs measured winning heads, how
    small the losing heads stay) and Theorem 4.3 (Pr(E), the ablation gain on A and damage on B,
    Pr(some single-head ablation helps A)). ``sweep_alphas`` (default ``2α, α, α/2``) are run
    with ``sweep_seeds`` seeds each to show the α → 0 trends. Deterministic for a given ``seed``.
    """
    sweep = _check_arguments(seeds, alpha, a, b, c, eta, sweep_alphas)
    rng = np.random.default_rng(seed)
    with single_thread():
        run = run_seeds(seeds, alpha, a, b, c, eta, seed, max_steps, n_track=n_track)
        rows = optimum_rows(run, default_steps(alpha, eta) if max_steps is None else max_steps)
        rows += escape_time_rows(rng)
        rows += winner_rows(run)
        rows += ablation_rows(run)
        rows += sweep_rows(run, sweep, sweep_seeds, max_steps, rng)
    rows.sort(key=lambda r: SECTION_ORDER.index(r.section))  # stable: keeps order within a section
    return TheoryTable(rows=rows, config=run.config, run=run)


def _check_arguments(
    seeds: int, alpha: float, a: float, b: float, c: float, eta: float, sweep_alphas: Optional[Sequence[float]]
) -> list[float]:
    """Reject arguments outside the theory's assumptions; return the α sweep, largest first."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if seeds < 10:
        raise ValueError(f"need at least 10 seeds, got {seeds}")
    if min(a, b, c) <= 0:
        raise ValueError("a, b and c must be positive (the theory assumes positive targets)")
    if eta <= 0:
        raise ValueError(f"eta must be positive, got {eta}")
    sweep = sorted({float(x) for x in (sweep_alphas if sweep_alphas is not None else (2 * alpha, alpha, alpha / 2))}, reverse=True)
    if any(not 0.0 < x < 1.0 for x in sweep):
        raise ValueError(f"sweep alphas must be in (0, 1), got {sweep}")
    return sweep

"""The reproduced table: each claim of Section 4 against its measurement."""

from __future__ import annotations

import math

import pytest

from cel_lens import theory as th

A, B, C = 2.0, 1.5, 1.25


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


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        th.theory_table(seeds=100, alpha=1.5)
    with pytest.raises(ValueError):
        th.theory_table(seeds=100, a=-1.0)

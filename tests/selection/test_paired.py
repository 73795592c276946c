"""One-sided McNemar, Tango's and Newcombe's paired intervals, and leave-one-out per head."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.stats import binomtest, norm

from cel_lens.heads import HeadSet
from cel_lens.selection.paired import (
    holm_enhancement, leave_one_out, mcnemar_enhancement_p, newcombe_paired_ci, tango_paired_ci,
)
from cel_lens.stats import holm_adjust, paired_bootstrap_ci
from cel_lens.config import SearchConfig


def _pairs(b: int, c: int, both: int, neither: int) -> tuple[np.ndarray, np.ndarray]:
    intact = np.array([1] * both + [0] * b + [1] * c + [0] * neither, dtype=bool)
    ablated = np.array([1] * both + [1] * b + [0] * c + [0] * neither, dtype=bool)
    return intact, ablated


@pytest.mark.parametrize("b,c", [(0, 0), (3, 0), (0, 3), (7, 2), (2, 7), (20, 15)])
def test_one_sided_mcnemar_matches_scipy(b, c):
    intact, ablated = _pairs(b, c, 50, 40)
    want = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5, alternative="greater").pvalue
    assert mcnemar_enhancement_p(intact, ablated) == pytest.approx(want, abs=1e-14)


def _score_by_scipy(b: int, c: int, n: int, delta: float) -> float:
    """Score statistic with the restricted MLE found numerically (an independent computation)."""
    r = n - b - c
    lo, hi = max(0.0, -delta) + 1e-12, (1 - delta) / 2 - 1e-12
    if hi <= lo:
        pc = lo
    else:
        def nll(pc: float) -> float:
            return -(b * math.log(max(pc + delta, 1e-300)) + c * math.log(max(pc, 1e-300)) + r * math.log(max(1 - 2 * pc - delta, 1e-300)))
        pc = minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
    return (b - c - n * delta) / math.sqrt(n * (2 * pc + delta - delta**2))


@pytest.mark.parametrize("b,c,both,neither", [(0, 0, 120, 80), (2, 0, 118, 80), (9, 3, 100, 88), (1, 6, 50, 43)])
def test_tango_interval_inverts_the_score_test(b, c, both, neither):
    intact, ablated = _pairs(b, c, both, neither)
    n = b + c + both + neither
    low, high = tango_paired_ci(intact, ablated)
    z = norm.ppf(0.975)
    assert low <= (b - c) / n <= high and low < high  # never [0, 0]
    for edge, sign in ((low, 1), (high, -1)):
        assert abs(_score_by_scipy(b, c, n, edge)) == pytest.approx(z, abs=1e-4)
        assert abs(_score_by_scipy(b, c, n, edge + sign * 1e-3)) < z  # just inside


def test_no_discordant_pair_gives_a_symmetric_interval_not_zero_width():
    intact, ablated = _pairs(0, 0, 120, 80)
    low, high = tango_paired_ci(intact, ablated)
    assert low == pytest.approx(-high) and high == pytest.approx(3.8415 / (200 + 3.8415), rel=1e-3)
    assert paired_bootstrap_ci(intact, ablated, n_boot=200) == (0.0, 0.0)  # the interval it replaces


def test_newcombe_contains_the_estimate_and_narrows_with_n():
    small = newcombe_paired_ci(*_pairs(6, 2, 50, 42))
    large = newcombe_paired_ci(*_pairs(60, 20, 500, 420))
    assert small[0] < 0.04 < small[1] and large[0] < 0.04 < large[1]
    assert large[1] - large[0] < small[1] - small[0]


def test_leave_one_out_supports_the_head_that_helps_and_not_the_padding():
    n = 400
    rng = np.random.default_rng(0)
    intact = torch.tensor(rng.random(n) < 0.5)
    helped = intact.clone()
    helped[torch.nonzero(~intact).flatten()[:60]] = True  # L1H1 fixes 60 examples; L2H2 does nothing
    sets = {HeadSet.parse("L2H2"): intact, HeadSet.parse("L1H1"): helped}
    loo = leave_one_out(lambda hs: torch.stack([sets[h] for h in hs]), HeadSet.parse("L1H1+L2H2"), helped)
    rows = {r["head"]: r for r in loo["heads"]}
    assert loo["supported"] == ["L1H1"]
    assert rows["L1H1"]["gain"] == pytest.approx(60 / n) and rows["L2H2"]["gain"] == 0.0
    assert rows["L2H2"]["p_value"] == 1.0
    assert [rows[h]["p_holm"] for h in ("L1H1", "L2H2")] == pytest.approx(
        holm_adjust([rows["L1H1"]["p_value"], 1.0]).tolist())


def test_holm_over_a_declared_family_counts_missing_members():
    assert holm_enhancement([0.01], 3) == pytest.approx([0.03])
    with pytest.raises(ValueError):
        holm_enhancement([0.01, 0.02], 1)


def test_the_decision_and_its_bound_agree_and_the_interval_is_labelled_descriptive():
    import numpy as np

    from cel_lens.selection.paired import enhancement_decision, tango_paired_ci
    from cel_lens.selection.result import decision_text

    intact = np.array([0] * 4 + [1] * 496, dtype=bool)
    ablated = np.ones(500, dtype=bool)  # b = 4, c = 0, n = 500: the case
    dec = enhancement_decision(intact, ablated)
    assert tango_paired_ci(intact, ablated)[0] > 0  # Tango's interval excludes 0 here (descriptive only)
    assert dec["p"] == 0.0625 and not dec["helps"] and dec["bound"] < 0 < dec["upper"]
    text = decision_text(dec)
    assert text.startswith("not shown") and "80% power" in text
    ablated5 = np.ones(501, dtype=bool)
    dec5 = enhancement_decision(np.array([0] * 5 + [1] * 496, dtype=bool), ablated5)
    assert dec5["helps"] and dec5["bound"] > 0 and decision_text(dec5).startswith("yes")


def test_a_result_prints_the_decision_row_and_labels_its_interval():
    import warnings

    from cel_lens.selection import run_search
    from cel_lens.testing import SyntheticOracle

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_search(
            SyntheticOracle(4, 4, n_dist=300, n_test=300, effects={"L1H2": 0.08}, noise=0.05, seed=3),
            config=SearchConfig(k=2, pool_size=4, n_null=5),
            progress=False,
        )
    text = str(r)
    assert r.test.decision["p"] == r.test.p_enhance and r.test.decision["helps"] == (r.test.p_enhance <= 0.05)
    assert "ablation helps? (D_test)" in text
    assert "score CI" not in text and "McNemar exact p" not in text  # descriptive figures stay in result.json

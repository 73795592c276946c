"""Statistics: McNemar against scipy and hand counts, bootstrap CI against scipy and by coverage,
single-accuracy intervals against scipy, and the random-subset null."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats as st

from cel_lens.heads import HeadSet
from cel_lens.testing import SyntheticOracle
from cel_lens.selection import run_search
from cel_lens.stats import (
    accuracy_interval,
    count_head_sets,
    mcnemar_exact,
    null_fraction,
    null_min_p,
    null_p_value,
    paired_bootstrap_ci,
    random_head_sets,
    random_subset_null,
    wilson_interval,
)


def _pairs(n11: int, n10: int, n01: int, n00: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Correctness vectors with the given counts of (a, b) outcomes."""
    a = [1] * n11 + [1] * n10 + [0] * n01 + [0] * n00
    b = [1] * n11 + [0] * n10 + [1] * n01 + [0] * n00
    return torch.tensor(a, dtype=torch.bool), torch.tensor(b, dtype=torch.bool)


# -- McNemar ------------------------------------------------------------------------------------


def test_mcnemar_hand_computed():
    # 2 pairs a-right/b-wrong, 8 the other way: p = 2 * P(Bin(10, 1/2) <= 2) = 2 * 56 / 1024
    a, b = _pairs(30, 2, 8, 10)
    assert mcnemar_exact(a, b) == pytest.approx(112 / 1024, abs=1e-15)
    # 0 vs 5 discordant: 2 / 32
    a, b = _pairs(3, 0, 5, 1)
    assert mcnemar_exact(a, b) == pytest.approx(2 / 32, abs=1e-15)
    # symmetric in its arguments
    assert mcnemar_exact(b, a) == mcnemar_exact(a, b)


def test_mcnemar_edge_cases():
    a, b = _pairs(5, 0, 0, 5)
    assert mcnemar_exact(a, b) == 1.0  # no discordant pairs
    a, b = _pairs(1, 3, 3, 1)
    assert mcnemar_exact(a, b) == 1.0  # doubled tail capped at 1
    with pytest.raises(ValueError):
        mcnemar_exact(torch.ones(3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError):
        mcnemar_exact([0.5, 1.0], [1.0, 0.0])


def test_mcnemar_matches_scipy_binomtest():
    rng = np.random.default_rng(0)
    for _ in range(60):
        n10, n01 = (int(x) for x in rng.integers(0, 400, size=2))
        if n10 + n01 == 0:
            continue
        a, b = _pairs(int(rng.integers(0, 50)), n10, n01, int(rng.integers(0, 50)))
        ref = st.binomtest(n10, n10 + n01, 0.5, alternative="two-sided").pvalue
        assert mcnemar_exact(a, b) == pytest.approx(ref, rel=1e-9, abs=1e-300)


# -- bootstrap ----------------------------------------------------------------------------------


def test_bootstrap_degenerate_when_all_pairs_agree():
    a, b = _pairs(10, 0, 4, 6)  # every discordant pair favours b; differences are 0 or +1
    low, high = paired_bootstrap_ci(a, a)
    assert low == high == 0.0
    ones = torch.ones(20, dtype=torch.bool)
    zeros = torch.zeros(20, dtype=torch.bool)
    assert paired_bootstrap_ci(zeros, ones, n_boot=100) == (1.0, 1.0)
    low, high = paired_bootstrap_ci(a, b, n_boot=2000)
    assert 0.0 <= low < 0.2 < high <= 0.45


def test_bootstrap_deterministic_and_seeded():
    rng = np.random.default_rng(1)
    a = torch.from_numpy(rng.random(300) < 0.6)
    b = torch.from_numpy(rng.random(300) < 0.7)
    assert paired_bootstrap_ci(a, b, seed=3) == paired_bootstrap_ci(a, b, seed=3)
    assert paired_bootstrap_ci(a, b, seed=3) != paired_bootstrap_ci(a, b, seed=4)


def test_bootstrap_matches_scipy_percentile():
    rng = np.random.default_rng(2)
    a = rng.random(400) < 0.55
    b = a.copy()
    flip = rng.random(400) < 0.2
    b[flip] = rng.random(flip.sum()) < 0.75
    ours = paired_bootstrap_ci(torch.from_numpy(a), torch.from_numpy(b), n_boot=20000, seed=0)
    ref = st.bootstrap(
        (a.astype(float), b.astype(float)),
        lambda x, y, axis: y.mean(axis) - x.mean(axis),
        paired=True, vectorized=True, n_resamples=20000, method="percentile", random_state=0,
    ).confidence_interval
    # both Monte Carlo: endpoints agree to well under one example's weight (1/400 = 0.0025)
    assert ours[0] == pytest.approx(ref.low, abs=0.0051)
    assert ours[1] == pytest.approx(ref.high, abs=0.0051)


def test_bootstrap_ci_covers_true_gain_at_nominal_rate():
    """200 synthetic test splits with a known population gain: coverage within 3 binomial standard
    errors of 0.95 (0.95 +- 0.046)."""
    repeats, covered = 200, 0
    for seed in range(repeats):
        oracle = SyntheticOracle(2, 2, n_test=300, base_acc=0.6, effects={"L0H0": 0.08}, noise=0.1, seed=seed)
        c = oracle.evaluate("test", [HeadSet(), HeadSet.parse("L0H0")])
        low, high = paired_bootstrap_ci(c[0], c[1], n_boot=2000, seed=seed)
        covered += low <= oracle.true_gain("L0H0") <= high
    tol = 3 * math.sqrt(0.95 * 0.05 / repeats)
    assert abs(covered / repeats - 0.95) <= tol, covered / repeats


# -- single accuracy ------------------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (613, 1000), (1, 2000)])
def test_accuracy_interval_matches_scipy(k, n):
    res = st.binomtest(k, n)
    w = res.proportion_ci(confidence_level=0.95, method="wilson")
    cp = res.proportion_ci(confidence_level=0.95, method="exact")
    assert accuracy_interval(k, n) == pytest.approx((w.low, w.high), abs=1e-9)
    assert accuracy_interval(k, n, method="clopper-pearson") == pytest.approx((cp.low, cp.high), abs=1e-9)
    vec = torch.tensor([True] * k + [False] * (n - k))
    assert accuracy_interval(vec) == accuracy_interval(k, n)
    with pytest.raises(ValueError):
        accuracy_interval(n + 1, n)


def test_wilson_interval_hand_computed():
    # 3 of 10 at 95%: z = 1.959964, z²/n = 0.384146, centre = (0.3 + 0.192073) / 1.384146 = 0.355506,
    # half-width = 1.959964·sqrt(0.3·0.7/10 + 3.841459/400) / 1.384146 = 0.247716
    low, high = wilson_interval(3, 10)
    assert low == pytest.approx(0.107791, abs=1e-6) and high == pytest.approx(0.603222, abs=1e-6)
    # 0 of 10: the lower end is exactly 0, the upper end z²/(n + z²) = 3.841459/13.841459
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.277533, abs=1e-6))
    assert wilson_interval(10, 10) == (pytest.approx(1 - 0.277533, abs=1e-6), 1.0)
    # 90%: z = 1.644854 narrows the interval
    low90, high90 = wilson_interval(3, 10, alpha=0.1)
    assert low < low90 < 0.3 < high90 < high
    assert accuracy_interval(3, 10) == (low, high)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


# -- null ---------------------------------------------------------------------------------------


def test_random_head_sets_are_distinct_exclude_and_enumerate():
    # 12 heads, pairs: 66 sets, 65 eligible without S-hat; R = 500 asks for more, so all of them
    shat = HeadSet.parse("L0H0+L1H1")
    every = random_head_sets(4, 3, 2, 500, seed=0, exclude=[shat])
    assert len(every) == len(set(every)) == 65 == count_head_sets(4, 3, 2, exclude=[shat])
    assert shat not in every and all(len(s) == 2 for s in every)
    assert every == sorted(every, key=lambda s: s.heads)  # canonical order: seed-independent
    # fewer than exist: distinct draws, seeded
    some = random_head_sets(4, 3, 2, 40, seed=0, exclude=[shat])
    assert len(some) == len(set(some)) == 40 and shat not in some
    assert some == random_head_sets(4, 3, 2, 40, seed=0, exclude=[shat])
    assert some != random_head_sets(4, 3, 2, 40, seed=1, exclude=[shat])
    with pytest.raises(ValueError):
        random_head_sets(2, 2, 5, 1, seed=0)
    with pytest.raises(ValueError):
        random_head_sets(2, 2, 1, -1, seed=0)


@pytest.mark.parametrize("n_layers,n_heads,size,R", [(6, 4, 3, 1500), (28, 24, 3, 20000)])
def test_random_head_sets_are_uniform(n_layers, n_heads, size, R):
    """Both draws (index sampling of an enumeration of 2,024 triples; rejection sampling of 50.4M):
    every head appears about R * size / N times, within 5 binomial standard deviations."""
    total = n_layers * n_heads
    sets = random_head_sets(n_layers, n_heads, size, R, seed=3)
    assert len(set(sets)) == R
    counts = np.zeros(total)
    for s in sets:
        for h in s:
            counts[h.layer * n_heads + h.head] += 1
    mean = R * size / total
    sd = math.sqrt(R * (size / total) * (1 - size / total))
    assert np.abs(counts - mean).max() < 5 * sd


def test_null_p_value_and_its_minimum_hand_computed():
    # b = 2 of R = 4 gains reach 0.1: (1 + 2) / (1 + 4)
    assert null_p_value([0.1, 0.0, -0.1, 0.2], 0.1) == pytest.approx(0.6)
    assert null_p_value([0.1, 0.0, -0.1, 0.2], 0.5) == pytest.approx(0.2) == null_min_p(4)
    assert null_p_value([], 0.1) is None and null_min_p(0) is None
    assert null_fraction([0.1, 0.0, -0.1, 0.2], 0.1) == 0.5  # the descriptive fraction stays
    # equal gains tie whatever the float rounding of k/n
    assert null_p_value([0.1 + 0.2 - 0.3], 0.0) == pytest.approx(1.0)


def test_random_subset_null_gains_exclude_and_exhaustive():
    oracle = SyntheticOracle(3, 3, n_test=500, effects={"L0H0": 0.2, "L1H1": -0.1})
    shat = HeadSet.parse("L0H0")
    on_test = lambda sets: oracle.evaluate("test", sets)  # noqa: E731
    null = random_subset_null(on_test, 3, 3, size=1, R=40, seed=0, exclude=[shat])
    # 9 heads: the 8 singles other than S-hat, every one of them, exactly
    assert null.exhaustive and len(null.head_sets) == 8 and shat not in null.head_sets
    assert null.min_p == pytest.approx(1 / 9)
    intact = oracle.evaluate("test", [HeadSet()])[0].double().mean()
    for s, g in zip(null.head_sets, null.gains):
        acc = oracle.evaluate("test", [s])[0].double().mean()
        assert float(g) == pytest.approx(float(acc - intact), abs=1e-12)
    gain = float(oracle.evaluate("test", [shat])[0].double().mean() - intact)
    assert null.p_value(gain) == pytest.approx(1 / 9)  # nothing else reaches +20 pp
    # sampled: 6 of the 36 pairs, distinct
    pairs = random_subset_null(on_test, 3, 3, size=2, R=6, seed=0)
    assert not pairs.exhaustive and len(set(pairs.head_sets)) == 6
    # a given intact vector gives the same null
    intact = oracle.evaluate("test", [HeadSet()])[0]
    again = random_subset_null(on_test, 3, 3, size=1, R=40, seed=0, exclude=[shat], intact=intact)
    assert torch.equal(again.gains, null.gains)
    empty = random_subset_null(on_test, 3, 3, size=1, R=0, seed=0)
    with pytest.raises(TypeError, match="callable"):
        random_subset_null(oracle, 3, 3, size=1, R=4, seed=0)  # an oracle object: pass its evaluate
    assert empty.gains.shape == (0,) and empty.p_value(0.1) is None and empty.min_p is None


def test_null_on_a_four_head_model_can_say_nothing_at_5_percent():
    """The organism's shape: 4 heads, |S-hat| = 1. Only 3 other sets exist, so the smallest
    achievable p is 1/4, whatever R is asked for."""
    oracle = SyntheticOracle(1, 4, n_test=400, effects={"L0H0": 0.15})
    null = random_subset_null(lambda sets: oracle.evaluate("test", sets), 1, 4, size=1, R=100, seed=0, exclude=["L0H0"])
    assert null.exhaustive and len(null.head_sets) == 3
    assert null.min_p == 0.25 and null.p_value(0.15) == 0.25


@pytest.mark.slow  # ~60 s: 200 searches over 672 heads
def test_null_p_values_are_uniform_when_no_head_has_an_effect():
    """Calibration: on a 28x24-head synthetic model where no head has any effect (each head set's
    test answers differ only by independent 10% label noise), the null's p-value of the subset the
    search selects on D_dist is uniform: its empirical CDF stays within the 99% Kolmogorov band of
    the uniform, and P(p <= alpha) is within 3 binomial SDs of alpha (ties only make it smaller)."""
    ps = []
    for seed in range(200):
        oracle = SyntheticOracle(28, 24, n_dist=500, n_test=500, noise=0.1, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no head helps: the selected subset's discovery gain may be <= 0
            r = run_search(
                oracle,
                config=SearchConfig(k=1, pool_size=12, n_null=99, n_boot=1, posthoc=False, n_stability=0, seed=seed),
                progress=False,
            )
        ps.append(r.null_p)
    ps = np.sort(np.array(ps))
    n = len(ps)
    ecdf_gap = np.max(np.abs(np.arange(1, n + 1) / n - ps))
    assert ecdf_gap < 1.63 / math.sqrt(n), ecdf_gap  # 99% Kolmogorov critical value
    for alpha in (0.05, 0.1, 0.25, 0.5):
        rate = float((ps <= alpha).mean())
        assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / n), (alpha, rate)
        assert rate >= alpha - 4 * math.sqrt(alpha * (1 - alpha) / n), (alpha, rate)


def test_holm_adjust_hand_worked():
    """m = 4: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; the running
    maximum lifts the last to 0.06. NaN stays out of the family; adjusted values cap at 1."""
    from cel_lens.stats import holm_adjust

    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = holm_adjust([float("nan"), 0.5, 0.2])
    assert math.isnan(out[0]) and out[1:].tolist() == pytest.approx([0.5, 0.4])
    assert holm_adjust([0.6, 0.7]).tolist() == [1.0, 1.0]
    assert holm_adjust([]).shape == (0,) and math.isnan(holm_adjust([float("nan")])[0])
    with pytest.raises(ValueError):
        holm_adjust([0.5, 1.5])


@pytest.mark.parametrize("seed", range(5))
def test_holm_adjust_matches_statsmodels_and_the_definition(seed):
    """Against ``statsmodels.stats.multitest.multipletests(method="holm")`` and a direct loop over
    the definition, on p-values with ties and exact zeros and ones."""
    from cel_lens.stats import holm_adjust

    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0, 0.2, size=12), 3)
    p[:2] = [0.0, 1.0]
    p[5] = p[6]
    direct = np.empty_like(p)
    order = np.argsort(p, kind="stable")
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        direct[i] = running
    np.testing.assert_allclose(holm_adjust(p), direct, rtol=0, atol=1e-15)
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    np.testing.assert_allclose(holm_adjust(p), multitest.multipletests(p, method="holm")[1], rtol=0, atol=1e-12)


# -- the one decision rule -----------------------------------------------------------------------

from cel_lens.stats import (  # noqa: E402
    gain_bounds,
    gain_bounds_array,
    minimum_detectable_effect,
    sign_test_bound,
    sign_test_p,
    sign_test_power,
    sign_test_upper,
)
from cel_lens.config import SearchConfig


def test_the_exact_bound_and_the_one_sided_test_never_disagree():
    for wins in range(0, 41):
        for losses in range(0, 41):
            p = sign_test_p(wins, losses)
            low, high = sign_test_bound(wins, losses, 500), sign_test_upper(wins, losses, 500)
            assert (low > 0) == (p < 0.05) or abs(p - 0.05) < 1e-12
            assert low <= (wins - losses) / 500 <= high


def test_the_printed_bounds_never_contradict_the_decision_and_the_array_form_agrees():
    wins, losses = np.meshgrid(np.arange(41), np.arange(41))
    low_a, high_a = gain_bounds_array(wins.ravel(), losses.ravel(), 500)
    for w, l, la, ha in zip(wins.ravel(), losses.ravel(), low_a, high_a):
        low, high = gain_bounds(int(w), int(l), 500)
        assert (low, high) == pytest.approx((la, ha), abs=1e-12)
        helps = sign_test_p(int(w), int(l)) <= 0.05
        assert (low >= 0) if helps else (low <= 0)  # never against the verdict
        assert low <= (w - l) / 500 <= high
        # wider than the bounds conditional on the observed discordance, which they replace
        assert low <= max(sign_test_bound(int(w), int(l), 500), 0.0) + 1e-12
        assert high >= sign_test_upper(int(w), int(l), 500) - 1e-12


def _coverage(n: int, d: float, gain: float, bounds) -> tuple[float, float]:
    """P(lower <= gain), P(upper >= gain) by summing every (wins, losses) table's probability."""
    from scipy import stats as st

    q = (1 + gain / d) / 2
    w, l, p = [], [], []
    for m in range(n + 1):
        k = np.arange(m + 1)
        w.append(k), l.append(m - k), p.append(st.binom.pmf(m, n, d) * st.binom.pmf(k, m, q))
    w, l, p = np.concatenate(w), np.concatenate(l), np.concatenate(p)
    low, high = bounds(w, l)
    return float(p[low <= gain + 1e-12].sum()), float(p[high >= gain - 1e-12].sum())


@pytest.mark.parametrize("d, gain", [(0.05, 0.05), (0.1, 0.1), (0.1, 0.0), (0.2, 0.05)])
def test_the_printed_bounds_cover_unconditionally_where_the_conditional_ones_did_not(d, gain):
    n = 120
    low, high = _coverage(n, d, gain, lambda w, l: gain_bounds_array(w, l, n))
    assert low >= 0.95 and high >= 0.95
    if gain == d:  # no example lost: the bound conditional on the observed discordance under-covers
        cond = _coverage(n, d, gain, lambda w, l: (
            np.array([sign_test_bound(int(a), int(b), n) for a, b in zip(w, l)]),
            np.array([sign_test_upper(int(a), int(b), n) for a, b in zip(w, l)])))
        assert cond[1] < 0.9


def test_four_gained_none_lost_is_not_significant_one_sided():
    # the case: b = 4, c = 0, n = 500; a bootstrap CI and Tango's interval exclude 0 there
    assert sign_test_p(4, 0) == 0.0625
    assert sign_test_bound(4, 0, 500) < 0
    assert sign_test_p(5, 0) == 0.03125 and sign_test_bound(5, 0, 500) > 0


def test_minimum_detectable_effect_is_where_the_power_reaches_80_percent():
    mde = minimum_detectable_effect(1000, 0.1)
    assert 0.02 < mde < 0.03
    assert sign_test_power(1000, 0.1, mde) >= 0.8 > sign_test_power(1000, 0.1, mde - 0.002)
    assert minimum_detectable_effect(4000, 0.1) < mde  # more examples, smaller detectable effects
    assert minimum_detectable_effect(20, 0.1) is None  # two discordant examples can never reach p <= 0.05
    with pytest.raises(ValueError):
        minimum_detectable_effect(0, 0.1)

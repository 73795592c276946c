"""The two calibrated tests that need no threshold: the prior shift itself (a capability change
gives 0, a shift of one choice is found) and the answer-margin AUC (checked against scikit-learn's
AUC, unmoved by any answer prior), and the warning that names a prior shift only when it was found."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cel_lens.selection.calibration_text import calibration_rows
from cel_lens.selection.prior_tests import centred_scores, margin_auc_test, prior_shift_test


def _scores(seed: int, n: int = 400, m: int = 4, gold: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, m, n)
    s = rng.normal(size=(n, m))
    s[np.arange(n), y] += gold
    return torch.tensor(s), torch.tensor(y)


def test_a_capability_change_is_no_prior_shift_and_a_shift_is_found():
    s, y = _scores(0)
    capability = s.clone()
    capability[torch.arange(len(y)), y] += 0.7  # the right answer moves, every wrong one alike
    res = prior_shift_test(s, capability, y)
    assert res["p_prior"] == 1.0 and not res["moves_prior"] and max(abs(x) for x in res["shift_prior"]) < 1e-12
    shifted = s + torch.tensor([0.0, 0.0, 0.4, 0.0]) + 0.1 * torch.randn(s.shape, generator=torch.Generator().manual_seed(1),
                                                                            dtype=torch.float64)
    res = prior_shift_test(s, shifted, y)
    assert res["moves_prior"] and res["shift_prior"][2] == pytest.approx(0.3, abs=0.03)  # 0.4 less its mean 0.1


def test_the_margin_auc_is_scikit_learns_and_no_prior_moves_it():
    metrics = pytest.importorskip("sklearn.metrics")
    s, y = _scores(2, m=2)
    res = margin_auc_test(s, s + torch.tensor([0.0, 1.5]), y, n_permutations=200)
    margin = (s[:, 1] - s[:, 0]).numpy()
    assert res["auc_intact"] == pytest.approx(metrics.roc_auc_score(y.numpy() == 1, margin), abs=1e-12)
    assert res["auc_ablated"] == pytest.approx(res["auc_intact"], abs=1e-12)  # a pure prior shift: no AUC change
    assert res["p_auc"] == 1.0  # after the prior is removed the two models are one: every sign flip ties
    s4, y4 = _scores(3)
    c = centred_scores(s4)
    macro = np.mean([metrics.roc_auc_score(y4.numpy() == j, c[:, j]) for j in range(4)])
    assert margin_auc_test(s4, s4, y4, n_permutations=50)["auc_intact"] == pytest.approx(macro, abs=1e-12)


def test_the_auc_test_finds_a_gain_that_moves_margins_without_crossing_a_threshold():
    s, y = _scores(4, n=1000, m=2, gold=0.4)
    better = s.clone()
    better[torch.arange(len(y)), y] += 0.25
    res = margin_auc_test(s, better, y, n_permutations=500, seed=1)
    assert res["auc_ablated"] > res["auc_intact"] and res["p_auc"] <= 0.01 and 0 < res["auc_mde"] < 0.1


def _block(**extra) -> dict:
    c = {"applies": True, "answer_type": "multiple_choice", "names": [" no", " yes"], "survives": False,
         "shares_intact": [0.9, 0.1], "shares_ablated": [0.5, 0.5], "test_acc_intact_best": 0.6,
         "test_acc_ablated_best": 0.603, "gain_best": 0.003, "p_value_cal": 0.31, "bound_cal": -0.01, "wins_cal": 10,
         "losses_cal": 7, "mde_cal": 0.0106, "p_prior": 0.4, "moves_prior": False, "test_prior": "t", **extra}
    return {"calibration": c, "gain": 0.089, "alpha": 0.05, "n_test": 1000}


def test_the_warning_names_a_prior_shift_only_when_its_test_rejects():
    rows = dict(calibration_rows(_block()))
    assert rows["warning"] == ("the gain is not shown to survive calibration (the calibrated test detects +1.06 pp with "
                               "80% power); no shift of the answer prior is shown either")
    assert rows["answer prior"].startswith("not shown to move: prior-shift test p = 0.4")
    moved = dict(calibration_rows(_block(p_prior=0.001, moves_prior=True)))
    assert moved["warning"] == ("the gain is not shown to survive calibration, and the ablation moves the answer prior "
                                "(prior-shift test p = 0.001)")
    assert "does not add capability" not in " ".join(moved.values())


def test_the_calibrated_block_prints_no_interval_against_its_verdict():
    """The D_dist-refit interval (a second comparison) could exclude 0 beside "not shown"; the block
    prints only the verdict's comparison and the bounds that agree with it."""
    rows = dict(calibration_rows(_block(gain_cal=0.02, ci_low_cal=0.005, ci_high_cal=0.04)))
    text = " ".join(rows.values())
    assert "+0.50 pp" not in text and "+2.00 pp" not in text and "bootstrap" not in text
    assert rows["survives calibration?"].startswith("not shown: one-sided exact McNemar p = 0.31")
    assert "gain >= -" in rows["survives calibration?"]

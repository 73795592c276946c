"""A calibrated interval of exactly zero width says why (it printed as ``[+0.00, +0.00]``, which
reads as a rounding), and a narrow one keeps its digits."""

from __future__ import annotations

from cel_lens.selection.calibration import NO_CHANGE_NOTE, calibrated_gain_text, calibration_rows


def _result(gain: float, low: float, high: float) -> dict:
    c = {"applies": True, "answer_type": "multiple_choice", "names": [" no", " yes"], "gain_cal": gain, "ci_low_cal": low,
         "ci_high_cal": high, "survives": True, "test_acc_intact_cal": 0.6, "test_acc_ablated_cal": 0.6 + gain,
         "ci_intact_cal": [0.5, 0.7], "ci_ablated_cal": [0.5, 0.7], "shares_intact": [0.5, 0.5],
         "shares_ablated": [0.5, 0.5], "p_value_cal": 1.0}
    return {"calibration": c, "gain": 0.01, "alpha": 0.05}


def test_a_point_interval_says_it_is_degenerate():
    r = _result(0.0, 0.0, 0.0)
    assert calibrated_gain_text(r) == "+0.00 pp (same examples right)"
    row = dict(calibration_rows(r))["calibrated gain"]
    assert row.endswith(NO_CHANGE_NOTE) and "not a rounding" in row


def test_a_narrow_interval_keeps_its_digits():
    r = _result(0.0005, -0.0015, 0.003)
    assert calibrated_gain_text(r) == "+0.05 pp [-0.15 pp, +0.30 pp]"
    assert NO_CHANGE_NOTE not in dict(calibration_rows(r))["calibrated gain"]

"""The grid reports what its runs recorded: one-sided Holm over the declared family, per-row seal."""

from __future__ import annotations

import numpy as np

from cel_lens.grids.summary import enhancement_p, holm_family
from cel_lens.report.grid import holm_sentence, seal_sentence
from cel_lens.selection.paired import mcnemar_enhancement_p
from cel_lens.selection.result_parts import TestOutcome


def _test(gain: float, p: float) -> TestOutcome:
    """A D_test part written before ``p_enhance`` was recorded (only the two-sided p)."""
    return TestOutcome(acc_intact=0.5, acc_ablated=0.5 + gain, gain=gain, ci_low=gain, ci_high=gain, p_value=p)


def _row(task: str, gain=None, p=None, p_enhance=None, status="ok", sealed=True) -> dict:
    return {"model": "m", "task": task, "status": status, "gain": gain, "p_value": p, "p_enhance": p_enhance,
            "selected_before_test": sealed, "alpha": 0.05}


def test_a_significantly_harmful_pair_is_never_a_discovery():
    rows = [_row("a", gain=-0.2, p=1e-6, p_enhance=enhancement_p(_test(-0.2, 1e-6))),
            _row("b", gain=0.0, p=1.0, p_enhance=1.0)]
    holm = holm_family(rows, 0.05)
    assert holm["rejected"] == 0 and holm["harmful"] == 1
    assert "significantly harmed" in holm_sentence(holm)


def test_failed_pairs_stay_in_the_family():
    rows = [_row("a", gain=0.1, p=0.02, p_enhance=0.01), _row("b", status="failed"), _row("c", status="not run")]
    holm = holm_family(rows, 0.05)
    assert holm["family"] == 3 and holm["finished"] == 1
    assert rows[0]["p_holm"] == 0.03  # 3 x 0.01, not 1 x 0.01
    assert holm["rejected"] == 1
    assert "family of 3 planned pairs (1 at ≤ 0.05); 2 of them without a result" in holm_sentence(holm)


def test_enhancement_p_from_an_old_result_matches_the_exact_one_sided_test():
    rng = np.random.default_rng(0)
    from cel_lens.stats import mcnemar_exact
    for _ in range(50):
        a = rng.random(60) < 0.5
        b = a ^ (rng.random(60) < rng.uniform(0.05, 0.4))
        gain = float(b.mean() - a.mean())
        derived = enhancement_p(_test(gain, mcnemar_exact(a, b)))
        exact = mcnemar_enhancement_p(a, b)
        if gain > 0 and mcnemar_exact(a, b) < 1:
            assert abs(derived - exact) < 1e-12
        else:
            assert derived == 1.0 and exact >= 0.5 - 1e-12


def test_the_sentence_comes_from_each_runs_flag():
    rows = [_row("a", gain=0.1, p=0.02, p_enhance=0.01), _row("b", gain=0.1, p=0.02, p_enhance=0.01, sealed=False)]
    holm = holm_family(rows, 0.05)
    text = seal_sentence(holm)
    assert "in 1 of 2 finished pairs" in text and "NOT in m × b" in text
    assert "all 1 finished" in seal_sentence(holm_family(rows[:1], 0.05))

"""The printed result says nothing against its one decision: over every (gained, lost) table with up
to 60 discordant examples at n = 500 (1,891 tables), no printed interval, bound or p-value of the D_test
block disagrees with the one-sided exact decision (issue 57 item 1)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cel_lens.selection.paired import enhancement_decision, tango_paired_ci
from cel_lens.selection.result_parts import TestOutcome, decision_text
from cel_lens.stats import mcnemar_exact, sign_test_p

N, MOST = 500, 60
LOWER = re.compile(r"(?:\[|gain >= )([+-]\d+\.\d+) pp")
P_VALUE = re.compile(r"(?:\bp = |McNemar exact p\s+)(\d[\d.e-]*)")


def _table(b: int, c: int, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    intact = np.array([0] * b + [1] * c + [1] * (n - b - c), dtype=bool)
    ablated = np.array([1] * b + [0] * c + [1] * (n - b - c), dtype=bool)
    return intact, ablated


def _printed(intact: np.ndarray, ablated: np.ndarray) -> tuple[str, bool]:
    """The D_test block as a result prints it, with every figure a search records beside the decision."""
    dec = enhancement_decision(intact, ablated)
    low, high = tango_paired_ci(intact, ablated)
    gain = float(ablated.mean() - intact.mean())
    test = TestOutcome(float(intact.mean()), float(ablated.mean()), gain, low, high, mcnemar_exact(intact, ablated),
                       "tango", dec["p"], dec)
    rows = [*test.rows(N, 0.05), *test.decision_rows()]
    return "\n".join(f"{k}  {v}" for k, v in rows), dec["helps"]


def _against(text: str, helps: bool) -> list[str]:
    """Every printed figure that contradicts the verdict ``helps``: a lower end above 0 beside "not
    shown", at or below 0 beside "yes"; a p at most 0.05 beside "not shown", above it beside "yes"."""
    bad = [f"lower {x}" for x in LOWER.findall(text) if (float(x) > 0) != helps and not (helps and float(x) == 0)]
    bad += [f"p {x}" for x in P_VALUE.findall(text) if (float(x) <= 0.05) != helps]
    return bad


@pytest.mark.slow
def test_no_printed_figure_is_against_the_decision_in_any_of_1891_tables():
    tables = [(b, c) for b in range(MOST + 1) for c in range(MOST + 1 - b)]
    assert len(tables) == 1891
    against = {}
    for b, c in tables:
        text, helps = _printed(*_table(b, c))
        assert helps == (sign_test_p(b, c) <= 0.05)
        assert text.count("gain >= ") == 1  # the decision's bound is printed in every table
        if _against(text, helps):
            against[(b, c)] = _against(text, helps)
    assert against == {}


def test_the_issue_case_prints_neither_tango_nor_the_two_sided_p():
    """4 gained, 0 lost: "not shown"; Tango's [+0.03, +2.04] pp excluded 0 beside it before."""
    intact, ablated = _table(4, 0)
    assert tango_paired_ci(intact, ablated)[0] > 0  # the descriptive interval still excludes 0 (kept in JSON)
    text, helps = _printed(intact, ablated)
    assert not helps and "Tango" not in text and "McNemar exact p" not in text and _against(text, helps) == []
    # the check can fail: the rows as printed before this change contradict the decision
    before = text + f"\n95% Tango score CI  [{100 * tango_paired_ci(intact, ablated)[0]:+.2f} pp, +2.04 pp]"
    assert _against(before, helps) == ["lower +0.03"]


def test_a_record_with_conditional_bounds_is_rebounded_from_its_counts():
    dec = {"test": "one-sided exact McNemar", "alpha": 0.05, "wins": 4, "losses": 0, "n": 500, "p": 0.0625,
           "helps": False, "bound": -0.0004, "upper": 0.008, "mde": None}
    text = decision_text(dec)
    assert "<= +2.30 pp" in text and "<= +0.80 pp" not in text
    assert "at n = 500 and the observed discordance (4 of 500 examples)" in text

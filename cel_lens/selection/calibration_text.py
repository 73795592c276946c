"""How a result's calibration block reads: the rows of :func:`calibration_rows` and the few words of
:func:`calibrated_gain_text` for tables and figures (the statistics are
:mod:`cel_lens.selection.calibration` and :mod:`cel_lens.selection.prior_tests`).

One calibrated comparison is printed, the one the verdict is: each model at its best constant prior
on D_test, by the one decision rule, with the one-sided bounds that agree with it
(:func:`cel_lens.stats.gain_bounds`). Beside it the threshold-free test and what each detects at 80 %
power. "The ablation moves the answer prior" is printed only when the test of the prior shift itself
rejects; a calibrated test that fails to reject is reported as that, never as a cause.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from cel_lens.stats import gain_bounds, minimum_detectable_effect
from cel_lens.tasks.answer_types import known_answer_type
from cel_lens.tasks.base import current_names

__all__ = ["calibration_rows", "calibrated_gain_text", "calibrated_counts", "PRIOR_SHIFT_LINE", "NOT_SHOWN_LINE",
           "CALIBRATION_SENTENCE"]

PRIOR_SHIFT_LINE = ("the gain is not shown to survive calibration, and the ablation moves the answer prior (prior-shift "
                    "test p = {p})")
"""The warning when a positive raw gain does not survive calibration *and* the test of the prior shift
itself rejects (:func:`~cel_lens.selection.prior_tests.prior_shift_test`); ``{p}`` is its p."""
NOT_SHOWN_LINE = "the gain is not shown to survive calibration{mde}; {prior}"
"""The warning when a positive raw gain does not survive calibration and no prior shift is shown: a
test that failed to reject is not a cause (``{mde}``: what the calibrated test detects at 80 %
power; ``{prior}``: what is known of the prior)."""
CALIBRATION_SENTENCE = (
    "calibrated accuracies give each model its best constant answer prior on D_test, so an ablation that only "
    "shifts which answer the model prefers gains nothing after calibration, while one that fixes specific "
    "examples keeps its gain"
)
"""One sentence on what a calibrated gain is, for reports and figure captions."""


def _shares(names: list[str], shares: list[float]) -> str:
    return " / ".join(f"{(names[j] if j < len(names) else f'choice {j}').strip() or repr(names[j])} {100 * x:.1f}%"
                      for j, x in enumerate(shares))


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.2f}%"


def calibration_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A result's calibration rows (none for a result without a calibration block): the
    majority-class rate on D_test, the answers' shares intact and ablated, then one calibrated
    comparison (each model at its best constant prior on D_test) with its verdict and the bounds that
    agree with it, the threshold-free test beside it with what each detects at 80 % power, whether the
    answer prior moved (only a test of the prior shift says it did), and a warning when a positive
    raw gain is not shown to survive. The D_dist-refit accuracies and their bootstrap interval (a
    second comparison) stay in ``result.json``."""
    c = r.get("calibration")
    if not c:
        return []
    rows = []
    if c.get("majority_answer") is not None:
        rows.append(("majority class (D_test)",
                     f"{c['majority_answer'].strip() or repr(c['majority_answer'])!s} is {_pct(c['majority_rate'])} of the "
                     f"labels (always answering it scores {_pct(c['majority_rate'])})"))
    if not c.get("applies"):
        return rows + [("answer prior", str(c.get("reason", "not calibrated")))]
    names, alpha, n = c.get("names") or [], float(r.get("alpha", 0.05)), r.get("n_test")
    rows += [
        ("answers (D_test)", f"intact {_shares(names, c['shares_intact'])} -> ablated {_shares(names, c['shares_ablated'])}"),
        ("calibrated D_test", f"each model at its best constant prior on D_test: intact {_pct(c['test_acc_intact_best'])} "
                              f"-> ablated {_pct(c['test_acc_ablated_best'])}, gain {100 * c['gain_best']:+.2f} pp "
                              f"(raw {100 * float(r.get('gain', float('nan'))):+.2f} pp)")
        if "gain_best" in c else ("calibrated D_test", f"gain {100 * c['gain_cal']:+.2f} pp (raw "
                                  f"{100 * float(r.get('gain', float('nan'))):+.2f} pp)"),
        ("survives calibration?", _survival_text(c, alpha, n)),
    ]
    if c.get("p_auc") is not None:
        rows.append(("threshold-free test", _auc_text(c, alpha)))
    rows.append(("answer prior", _prior_text(c)))
    if not c.get("survives") and float(r.get("gain") or 0.0) > 0:
        rows.append(("warning", _warning(c, n)))
    return rows + [("calibrated vs raw", CALIBRATION_SENTENCE)]


def _prior_text(c: Mapping[str, Any]) -> str:
    """What is known of the answer prior: moved (the prior-shift test rejects), not shown to move, or
    not tested (a record written before the test)."""
    if "p_prior" not in c:
        return "not tested (recorded before the test of the prior shift)"
    verdict = "moves" if c["moves_prior"] else "not shown to move"
    return f"{verdict}: prior-shift test p = {c['p_prior']:.3g} ({c.get('test_prior', 'per-choice score change')})"


def _warning(c: Mapping[str, Any], n: Any) -> str:
    """The warning for a positive raw gain not shown to survive: a prior shift only when its own test
    rejects."""
    if c.get("moves_prior"):
        return PRIOR_SHIFT_LINE.format(p=f"{c['p_prior']:.3g}")
    mde = c.get("mde_cal")
    if mde is None and isinstance(n, int) and "wins_cal" in c:
        mde = minimum_detectable_effect(n, (c["wins_cal"] + c["losses_cal"]) / n)
    mde_text = f" (the calibrated test detects {100 * mde:+.2f} pp with 80% power)" if mde is not None else ""
    prior = ("no shift of the answer prior is shown either" if "p_prior" in c
             else "whether the answer prior moved was not tested")
    return NOT_SHOWN_LINE.format(mde=mde_text, prior=prior)


def _auc_text(c: Mapping[str, Any], alpha: float) -> str:
    """The threshold-free test in words, with the effect it detects at 80 % power."""
    verdict = "yes" if c["p_auc"] <= alpha else "not shown"
    return (f"{verdict}: answer-margin AUC intact {c['auc_intact']:.3f} -> ablated {c['auc_ablated']:.3f} "
            f"({c['auc_ablated'] - c['auc_intact']:+.3f}; invariant to any answer prior), one-sided sign-flip "
            f"permutation p = {c['p_auc']:.3g} ({c['n_permutations_auc']} permutations); it detects an AUC gain of "
            f"{c['auc_mde']:+.3f} with 80% power")


def calibrated_counts(c: Mapping[str, Any], n: Any) -> Optional[tuple[int, int]]:
    """The calibrated comparison's (gained, lost) examples: recorded, or, for a record written before
    they were, the one pair whose difference is ``gain_best · n`` and whose one-sided exact p is the
    recorded ``p_value_cal`` (``None`` when that does not single one out)."""
    if "wins_cal" in c:
        return int(c["wins_cal"]), int(c["losses_cal"])
    if not isinstance(n, int) or "gain_best" not in c or "p_value_cal" not in c:
        return None
    from scipy import stats as _st

    diff = int(round(c["gain_best"] * n))
    found = [(losses + diff, losses) for losses in range(max(0, -diff), (n - diff) // 2 + 1)
             if abs(float(_st.binom.sf(losses + diff - 1, 2 * losses + diff, 0.5)) - c["p_value_cal"]) <= 1e-9 * c["p_value_cal"]]
    return found[0] if len(found) == 1 else None


def _survival_text(c: Mapping[str, Any], alpha: float, n: Any) -> str:
    """The calibrated verdict by the one decision rule (each model at its best prior on D_test), with
    the one-sided bounds that agree with it and, when it does not reject, what it detects."""
    if "bound_cal" not in c:  # a result written before the decision rule: its p was two-sided
        return f"{'yes' if c.get('survives') else 'not shown'} (McNemar p = {c['p_value_cal']:.3g})"
    text = f"{'yes' if c['survives'] else 'not shown'}: one-sided exact McNemar p = {c['p_value_cal']:.3g} (α = {alpha:g})"
    counts = calibrated_counts(c, n) if isinstance(n, int) else None
    if counts is None:
        return text
    lower, upper = gain_bounds(*counts, n, alpha)
    text += (f", {counts[0]} examples gained, {counts[1]} lost; one-sided {1 - alpha:.0%} bounds: gain >= "
             f"{100 * lower:+.2f} pp, <= {100 * upper:+.2f} pp")
    if not c["survives"]:
        mde = minimum_detectable_effect(n, sum(counts) / n, alpha)
        text += (f"; at the observed discordance ({sum(counts)} of {n}) it detects {100 * mde:+.2f} pp with 80% power"
                 if mde is not None else f"; too few discordant examples ({sum(counts)} of {n}) to detect any gain")
    return text


def calibrated_gain_text(r: Mapping[str, Any], *, unit: str = " pp") -> str:
    """A result's calibrated gain in a few words, to put beside the raw one in tables and figures: the
    one calibrated comparison (each model at its best prior on D_test), its one-sided bounds and its
    verdict, ``+0.20 pp [-0.45 pp, +0.93 pp], not shown to survive``; ``not recorded`` / ``no fixed
    choices`` when there is none, ``n/a`` for no result."""
    c = r.get("calibration")
    if not c:
        return "n/a"
    if not c.get("applies"):
        answer = known_answer_type(current_names(c).get("answer_type"))
        return "not recorded" if answer is not None and answer.calibrates else "no fixed choices"
    counts = calibrated_counts(c, r.get("n_test")) if isinstance(r.get("n_test"), int) else None
    gain = c.get("gain_best", c.get("gain_cal"))
    text = f"{100 * gain:+.2f}{unit}"
    if counts is not None:
        lower, upper = gain_bounds(*counts, int(r["n_test"]), float(r.get("alpha", 0.05)))
        text += f" [{100 * lower:+.2f}{unit}, {100 * upper:+.2f}{unit}]"
    return text + (", survives" if c.get("survives") else ", not shown to survive")

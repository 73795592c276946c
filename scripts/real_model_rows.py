"""The results table of docs/real_model.md, read from the rows' run directories (no model).

    python scripts/real_model_rows.py LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Every number comes from a run's ``result.json`` (and its manifest): the selected heads, D_dist and
D_test accuracies, the gain with its interval and exact McNemar p, the selection-adjusted test on
D_dist, the answer-prior (calibrated) gain where it applies, the random-subset null, selection
stability, the ablation-kind controls, whether D_test was read before the selection, and the time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f} %"


def pp(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):+.1f} pp"


def row(label: str, path: Path) -> str:
    """One markdown row."""
    r = json.loads((path / "result.json").read_text())
    cal = r.get("calibration") or {}
    if cal.get("applies"):
        calibrated = (f"{pct(cal['test_acc_intact_cal'])} → {pct(cal['test_acc_ablated_cal'])}: {pp(cal['gain_cal'])} "
                      f"[{pp(cal['ci_low_cal'])}, {pp(cal['ci_high_cal'])}], p {cal['p_value_cal']:.2g}"
                      + ("" if cal.get("survives") or float(r["gain"]) <= 0 else ", **prior only**"))
    else:
        calibrated = "does not apply (free-form answers)" if cal else "n/a"
    adj = r.get("adjusted") or {}
    null = r.get("null_gains") or []
    null_text = (f"{len(null)} sets: mean {pp(sum(null) / len(null))}, max {pp(max(null))}; p {r['null_p']:.2f} (smallest possible {r['null_min_p']:.2f})"
                 if null else "n/a")
    stab = r.get("selection_stability") or {}
    controls = r.get("ablation_controls") or {}
    ctrl = "; ".join(f"{k} {pp(v.get('gain'))}" for k, v in controls.items()) or "n/a"
    seal = r.get("seal") or {}
    sealed = "yes" if r.get("selected_before_test") and not seal.get("prior_test_reads") else (
        f"yes; {seal.get('prior_test_reads')} earlier reads of these D_test rows by other runs" if r.get("selected_before_test") else "**no**")
    t = r.get("timings") or {}
    minutes = sum(float(v) for v in t.values()) / 60
    return (
        f"| {label} | {r['n_dist']} / {r['n_test']} | {r['heads']} | {pct(r['dist_acc_intact'])} → {pct(r['dist_acc_ablated'])} | "
        f"{pct(r['test_acc_intact'])} → {pct(r['test_acc_ablated'])} | {pp(r['gain'])} [{pp(r['ci_low'])}, {pp(r['ci_high'])}] | "
        f"{r['p_value']:.2g} | {adj.get('p_value', float('nan')):.3g} | {calibrated} | {null_text} | "
        f"{100 * float(stab.get('selected_frequency', float('nan'))):.0f} % | {ctrl} | {sealed} | {minutes:.0f} min |"
    )


HEADER = (
    "| row | n_dist / n_test | Ŝ | D_dist acc, intact → ablated | D_test acc, intact → ablated | Δ [95 % Tango CI] | McNemar p "
    "| selection-adjusted p (D_dist) | calibrated Δ (answer prior) | random-subset null | selection stability "
    "| Δ under mean / resample ablation | Ŝ fixed before D_test | time (stages 1, 2, test) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main(items: list[str]) -> None:
    print(HEADER)
    for item in items:
        label, _, path = item.partition("=")
        print(row(label, Path(path)))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rows", nargs="+", metavar="LABEL=RUN_DIR", help="a row's label and its run directory")
    main(parser.parse_args().rows)

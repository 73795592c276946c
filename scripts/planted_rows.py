"""The planted rows against their truth (docs/planted.md), read from the committed records alone.

    python scripts/planted_rows.py results/planted          # the rows table, then the truth table
    python scripts/planted_rows.py results/planted --json

A planted row is a row folder (``scripts/seal_row.py``) whose manifest records a planted model
(``model.plant``, the recipe of ``cel-lens plant``). Its truth comes from the build record in
``results/planted`` whose content hash equals the manifest's (``sums-plant.json`` / ``sums3-plant.json``:
``cel-lens plant sums-capability`` / ``sums3-capability --truth``; ``plants.json``: the BoolQ plants), measured on held-out rows that no
search reads. The table says, per row: the plant and its planted head(s), the true raw and calibrated
gain of ablating them, the planted head's stage-1 rank, Ŝ, the decision, the calibrated verdict, and
whether the row agrees with the truth (computed from those, not written by hand).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_model_rows import fmt_p, markdown, pp, record, rows_of  # noqa: E402

from cel_lens.heads import HeadSet  # noqa: E402
from cel_lens.model.planted_cache import split_planted_name  # noqa: E402
from cel_lens.selection.result import Result  # noqa: E402

TRUTH_RECORDS = ("sums-plant.json", "sums3-plant.json", "ops-plant.json", "ops-plant-fresh.json", "plants.json")
"""The records (in ``results/planted``) a row's truth is looked up in, by content hash and kind (two
kinds may share weights: ops-capability and sums-capability are both L29H0 x10, measured on
different files); of several, the one with the most truth rows."""


def targets(plant: dict[str, Any]) -> list[str]:
    """The heads whose ablation the plant's truth is about: the scaled head, or each pair's canceller."""
    if plant.get("head"):
        return [plant["head"]]
    return [p["canceller"] for p in (plant.get("pairs") or {}).values()]


def truth_of(plant: dict[str, Any], where: Path) -> Optional[dict[str, Any]]:
    """The true effect of ablating the plant's heads, from the record with the same content hash and
    kind that holds the most truth rows."""
    found = [t for name in TRUTH_RECORDS if (where / name).is_file()
             for t in _truths(json.loads((where / name).read_text()), plant, name)]
    return max(found, key=lambda t: t["n"], default=None)


def _truths(rec: dict[str, Any], plant: dict[str, Any], name: str) -> list[dict[str, Any]]:
    digest, kind = plant.get("tensors_sha256"), plant.get("kind")
    if rec.get("tensors_sha256") == digest and rec.get("kind", kind) == kind and "truth" in rec:
        return [{"source": name, **rec["truth"][f"ablate {plant['head']}"], "n": rec["truth"]["n"]}]
    out = []
    for built_kind, built in (rec.get("plants") or {}).items():
        if built.get("tensors_sha256") == digest and built_kind == kind and kind in (rec.get("truth") or {}):
            label = "+".join(targets(plant))
            effect = rec["truth"][kind].get(label) or rec["truth"][kind].get(targets(plant)[0])
            out.append({"source": name, **effect, "n": effect["raw"]["n"]})
    return out


def stage1_rank(result: Result, head: str) -> Optional[int]:
    """``head``'s rank (1 = best) among every head's stage-1 score, ties counted in its favour."""
    h = HeadSet.parse(head).heads[0]
    scores = result.discovery.scores
    if not scores:
        return None
    own = scores[h.layer][h.head]
    return 1 + sum(1 for row in scores for x in row if x is not None and x == x and x > own)


def against_truth(truth: Optional[dict[str, Any]], found: bool, decided: bool, survives: Optional[bool]) -> str:
    """Whether the row says what the truth says: a true calibrated gain (its bootstrap interval above
    zero) should be found, decided and survive calibration; a raw-only gain should not survive."""
    if truth is None:
        return "no truth record"
    cal = truth["calibrated_best_prior"]
    capability = cal["ci"][0] > 0
    if capability:
        ok = found and decided and bool(survives)
        said = "capability: the planted head should be found, its gain decided and surviving calibration"
    else:
        ok = not survives
        said = "no capability: whatever is found should not survive calibration"
    return f"{'agrees' if ok else 'DISAGREES'} (truth: {said})"


def truth_row(rec: dict[str, Any], folder: Path, where: Path) -> Optional[dict[str, Any]]:
    """A planted row's record against its truth (``None`` for a row of an unplanted model); ``rec`` is
    the row's :func:`real_model_rows.record`, computed once for both tables."""
    manifest = json.loads((folder / "manifest.json").read_text())
    plant = (manifest.get("model") or {}).get("plant")
    if not plant:
        return None
    named = split_planted_name(manifest["model"].get("id") or "")
    if named and named[1] != plant.get("kind"):  # a second name on a first build's weights, recorded before
        plant = {**plant, "kind": named[1]}      # manifests held each name's own recipe: the name decides
    truth = truth_of(plant, where)
    out: dict[str, Any] = {"row": rec["row"], "plant": plant.get("kind"), "heads": targets(plant), "truth": truth}
    if rec["status"] != "finished":
        return {**out, "status": rec["conclusion"]}
    result = Result.from_dict(json.loads((folder / "result.json").read_text()))
    chosen = [str(h) for h in HeadSet.parse(result.heads)]
    found = any(t in chosen for t in out["heads"])
    p = rec["power"]["p_one_sided"]
    decided = p is not None and p <= rec["power"]["alpha"]
    cal = result.calibration or {}
    survives = cal.get("survives") if cal.get("applies") else None
    verdict = against_truth(truth, found, decided, survives)
    if not rec["evidence"]:  # the seal's verdict comes first: an unsealed row is no evidence either way
        verdict = f"NOT SEALED, not counted as evidence ({rec['sealed']}); as a reading: {verdict}"
    return {**out, "status": "finished", "ranks": {t: stage1_rank(result, t) for t in out["heads"]}, "selected": result.heads,
            "found": found, "gain": rec["gain"], "p_one_sided": p, "decided": decided, "survives": survives,
            "calibrated_gain": cal.get("gain_best"), "rank_by": result.discovery.rank_by, "evidence": rec["evidence"],
            "verdict": verdict}


def _effect(e: dict[str, Any]) -> str:
    return f"{pp(e['gain'])} [{pp(e['ci'][0])}, {pp(e['ci'][1])}], p {fmt_p(e['p_one_sided'])}"


def truth_markdown(rows: list[dict[str, Any]]) -> str:
    """The truth table: one line per planted row."""
    head = ("| row | plant, planted head(s) | true raw gain (held-out rows) | true calibrated gain (best prior) | "
            "planted head's stage-1 rank | Ŝ | D_test gain, one-sided p | calibrated | against the truth |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        t = r["truth"]
        true_raw = "no truth record" if t is None else f"{_effect(t['raw'])} (n {t['n']})"
        true_cal = "no truth record" if t is None else _effect(t["calibrated_best_prior"])
        plant = f"{r['plant']}, {', '.join(r['heads'])}"
        if r["status"] != "finished":
            lines.append(f"| {r['row']} | {plant} | {true_raw} | {true_cal} | not run | not run | not run | not run | {r['status']} |")
            continue
        ranks = ", ".join(f"{h} {k}" for h, k in r["ranks"].items())
        cal = "n/a" if r["survives"] is None else f"{pp(r['calibrated_gain'])}, {'survives' if r['survives'] else 'not shown to survive'}"
        lines.append(f"| {r['row']} | {plant} | {true_raw} | {true_cal} | {ranks} | {r['selected']} | "
                     f"{pp(r['gain'])}, p {fmt_p(r['p_one_sided'])} | {cal} | {r['verdict']} |")
    return "\n".join(lines)


def main(items: list[str], as_json: bool = False) -> str:
    found = [(record(label, folder), folder) for label, folder in rows_of(items)]
    rows = [r for rec, folder in found if (r := truth_row(rec, folder, folder.parent)) is not None]
    if as_json:
        return json.dumps(rows, indent=2, default=str)
    return markdown(rec for rec, _ in found) + "\n\n" + truth_markdown(rows)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="+", metavar="FOLDER", help="results/planted, or planted row folders")
    parser.add_argument("--json", action="store_true", help="print the truth rows as JSON")
    args = parser.parse_args()
    print(main(args.rows, args.json))

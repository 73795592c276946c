"""The side-effect grid of finished real-model rows: every row's Ŝ evaluated on every row's D_test.

    python scripts/real_model_side_effects.py results/smollm2-135m/arithmetic-exact \\
        results/smollm2-135m/boolq-exact-float32 --data-dir ../shared/data \\
        --out results/smollm2-135m/side_effects.json [--figure figures/real_model/rows/side_effects.png]
    python scripts/real_model_side_effects.py --render results/smollm2-135m/side_effects.json [--figure F]

The paper's "damage elsewhere": the gain that each task's selected subset gives on the other tasks.
Each row's D_test is rebuilt from its manifest (the same examples, content hash checked) and
evaluated once, intact and with every row's Ŝ ablated. Cell (i, j) is Ŝ of row i on row j's D_test:
accuracy intact and ablated, the gain, the discordant examples and the two-sided exact McNemar p.

**Only finished rows.** A row's D_test may not be read before its own search has fixed its
selection (the seal of ``scripts/seal_row.py``), so a row folder without ``result.json`` is
refused, whichever side of the grid it would be on. The reads are filed in the test-split ledger
under this script's name, after every selection they could touch.

**Checked against the rows' records.** The model's weights hash must be every manifest's, and on each
row's own D_test the intact model and its own Ŝ must answer as the row's ``result.json`` says (the
accuracies and the discordant counts): a grid from other weights, other examples or another
ablation stops instead of being written. ``--render`` draws the figure and prints the markdown
table from the written record alone (no model).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from cel_lens.stats import mcnemar_exact  # noqa: E402


def load_rows(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Each row's label, manifest and result; a row without ``result.json`` is refused (its
    D_test is sealed until its own search selects)."""
    rows = []
    for folder in folders:
        manifest, result = folder / "manifest.json", folder / "result.json"
        if not manifest.is_file():
            raise SystemExit(f"{folder}: no manifest.json: not a row folder")
        if not result.is_file():
            raise SystemExit(f"{folder}: no result.json: the row has not selected yet, and its D_test stays "
                             "unread until it has (no side effect may be measured on it or with it)")
        rows.append({"label": folder.name, "manifest": json.loads(manifest.read_text()),
                     "result": json.loads(result.read_text())})
    if len({r["label"] for r in rows}) != len(rows):
        raise SystemExit("two rows share a folder name")
    return rows


def cell(intact: np.ndarray, ablated: np.ndarray) -> dict[str, Any]:
    """One cell: accuracies, gain, discordant counts and the two-sided exact McNemar p."""
    wins, losses = int((ablated & ~intact).sum()), int((intact & ~ablated).sum())
    return {"n": int(intact.size), "acc_intact": float(intact.mean()), "acc_ablated": float(ablated.mean()),
            "gain": float(ablated.mean() - intact.mean()), "wins": wins, "losses": losses,
            "p_two_sided": mcnemar_exact(intact, ablated)}


def check_own(row: dict[str, Any], own: dict[str, Any]) -> None:
    """Stop unless the row's own cell reproduces its recorded D_test evaluation."""
    res = row["result"]
    want = (res.get("test_acc_intact"), res.get("test_acc_ablated"), (res.get("decision") or {}).get("wins"),
            (res.get("decision") or {}).get("losses"))
    got = (own["acc_intact"], own["acc_ablated"], own["wins"], own["losses"])
    same = all(w is None or (abs(float(w) - float(g)) < 1e-9) for w, g in zip(want, got))
    if not same:
        raise SystemExit(f"{row['label']}: its D_test evaluated here (acc intact, ablated, wins, losses) {got} "
                         f"is not its record's {want}: not the row's model, examples or ablation")


def measure(rows: list[dict[str, Any]], model: Any, data_dir: Optional[str], batch_size: int) -> dict[str, Any]:
    """The grid: every row's D_test, intact and under every row's Ŝ (see the module docstring)."""
    from cel_lens.evaluation.evaluator import evaluate
    from cel_lens.evaluation.context import EvalContext
    from cel_lens.evaluation.seal import SealReader
    from cel_lens.heads import HeadSet
    from cel_lens.model.identity import weights_hash
    from cel_lens.runs.export import run_task
    from cel_lens.runs.manifest import rebuild_task
    from cel_lens.runs.reader import RunRecord

    weights = weights_hash(model)
    for r in rows:
        if r["manifest"]["model"].get("weights_sha256") != weights:
            raise SystemExit(f"{r['label']}: its model's weights hash is not this model's ({weights[:24]}...)")
    selections = [HeadSet.parse(r["result"]["heads"]) for r in rows]
    cells: list[list[Optional[dict[str, Any]]]] = [[None] * len(rows) for _ in rows]
    cpu, wall = time.process_time(), time.perf_counter()
    for j, target in enumerate(rows):
        test_only = rebuild_task(target["manifest"], data_dir, splits=("test",))
        task = run_task(RunRecord(Path(target["label"]), target["manifest"], [], [], None), test_only)  # hash checked
        precision = (target["manifest"].get("options") or {}).get("precision") or "float32"
        owner = SealReader("side-effect grid (scripts/real_model_side_effects.py)")
        res = evaluate(model, task.test, [HeadSet(), *selections], batch_size=batch_size, progress=False,
                       context=EvalContext.from_environment(precision, reader=owner))
        correct = res.correct.numpy().astype(bool)
        for i in range(len(rows)):
            cells[i][j] = cell(correct[0], correct[i + 1])
        check_own(target, cells[j][j])
    return {
        "model": rows[0]["manifest"]["model"].get("id"), "weights_sha256": weights,
        "rows": [{"label": r["label"], "task": r["manifest"]["task"]["name"], "heads": r["result"]["heads"],
                  "chat_template": bool((r["manifest"]["task"].get("options") or {}).get("chat_template"))}
                 for r in rows],
        "cells": cells, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(record: dict[str, Any]) -> str:
    """The grid as a markdown table: one line per ablated Ŝ, one column per D_test."""
    rows = record["rows"]
    head = "| Ŝ ablated (row) | " + " | ".join(f"on {r['label']} D_test" for r in rows) + " |"
    lines = [head, "|" + "---|" * (len(rows) + 1)]
    for r, line in zip(rows, record["cells"]):
        parts = [f"{100 * c['acc_intact']:.1f} % → {100 * c['acc_ablated']:.1f} %: {100 * c['gain']:+.1f} pp "
                 f"({c['wins']}+/{c['losses']}−, p {c['p_two_sided']:.2g})" for c in line]
        lines.append(f"| {r['heads']} ({r['label']}) | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def figure(record: dict[str, Any], path: Path) -> None:
    """The grid as :func:`cel_lens.report.plot_side_effects` draws it, one row per Ŝ (labels: row folders)."""
    from cel_lens.report import plot_side_effects
    from cel_lens.report.save import save_figure

    gains = np.array([[c["gain"] for c in line] for line in record["cells"]])
    labels = [r["label"] for r in record["rows"]]
    fig = plot_side_effects(gains, labels, title=f"Side effects: gain (pp) of each row's Ŝ<br><sup>{record['model']}, "
                                                 "on every row's D_test</sup>")
    if not save_figure(fig, path, (path.suffix.lstrip(".") or "png",), include_plotlyjs="cdn"):
        raise SystemExit(f"{path}: not written (the static image exporter failed; see the warning above)")


def main(argv: Any = None, model: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rows", nargs="*", type=Path, help="finished row folders (manifest.json and result.json)")
    p.add_argument("--data-dir")
    p.add_argument("--model", default="smollm2-135m", help="the rows' model, by name (its weights hash is checked)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", type=Path, help="where the grid's record goes (JSON)")
    p.add_argument("--render", type=Path, help="a written record: print its table (and --figure), no model")
    p.add_argument("--figure", type=Path, help="also draw the grid (png/svg/html by the suffix)")
    a = p.parse_args(argv)
    if a.render is not None:
        record = json.loads(a.render.read_text())
    else:
        if len(a.rows) < 2 or a.out is None:
            p.error("give two or more finished row folders and --out (or --render RECORD)")
        rows = load_rows(a.rows)
        if model is None:
            import torch

            import cel_lens as cl

            torch.set_num_threads(1)
            model = cl.load_model(a.model)
        record = measure(rows, model, a.data_dir, a.batch_size)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    print(markdown(record))
    if a.figure is not None:
        figure(record, a.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``cel-lens plant KIND``: build the planted SmolLM2 controls (docs/planted.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "plant",
        help="build planted variants of SmolLM2-135M-Instruct (positive and prior controls)",
        formatter_class=Formatter,
        description="Fit and size the planted heads on the row plan's train rows and write each plant "
        "to the cache by content hash, loadable as 'smollm2-135m+plant:KIND' (see docs/planted.md). "
        "'capability': ablating one last-layer head restores a push fitted to read the label (on SmolLM2 it "
        "reads nothing that generalizes: no calibrated gain, see the doc); 'prior': ablating one head shifts the "
        "answer prior (a raw gain calibration removes); 'both'; 'all'.",
    )
    p.add_argument("kind", choices=["capability", "prior", "both", "all"], help="which plant(s) to build")
    p.add_argument("--data-dir", default=None, help="directory holding boolq/dev.jsonl (e.g. ../shared/data)")
    p.add_argument("--rows", default="results/planted/boolq-plant-rows.json", help="the row plan (train and truth ids)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation folds the fit uses")
    p.add_argument("--truth", default=None, metavar="FILE",
                   help="also measure every plant on the truth rows and write recipe and truth to FILE (JSON)")
    p.add_argument("--json", action="store_true", help="print the build record as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.plant import KINDS, build_plants

    kinds = list(KINDS) if args.kind == "all" else [args.kind]
    record = build_plants(kinds, data_dir=args.data_dir, rows=args.rows, seed=args.seed, truth=args.truth is not None)
    if args.truth:
        Path(args.truth).parent.mkdir(parents=True, exist_ok=True)
        Path(args.truth).write_text(json.dumps(record, indent=1) + "\n")
    if args.json:
        print_json(record)
        return 0
    for kind, plant in record["plants"].items():
        heads = ", ".join(f"{n}: {p['canceller']} cancels {p['reader']} (scale {p['scale']:g})" for n, p in plant["pairs"].items())
        print(f"{plant['name']}: {plant['tensors_sha256'][:16]}  {heads}")
    print(f"{record['cpu_s']:.0f} CPU s")
    return 0

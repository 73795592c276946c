"""``cel-lens plant KIND``: build the planted SmolLM2 controls (docs/planted.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cel_lens.cli.common import Formatter, print_json
from cel_lens.plant.sums import KINDS as SUMS_KINDS

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
        "answer prior (a raw gain calibration removes); 'both'; 'all' (these three); 'sums-capability': on "
        "two-choice addition (task arithmetic_choice), L29H0's output scaled until ablating it is a calibrated gain "
        "of about 1.5 detectable effects (the capability control); 'sums3-capability' and 'ops-capability': the same "
        "recipe on three-digit addition and on single-digit three-operation problems (fresh pools for a second row).",
    )
    p.add_argument("kind", choices=["capability", "prior", "both", "all", *SUMS_KINDS], help="which plant(s) to build")
    p.add_argument("--data-dir", default=None,
                   help="directory holding boolq/dev.jsonl or the arithmetic files (e.g. ../shared/data)")
    p.add_argument("--rows", default=None, help="the row plan (train and truth ids; default "
                   "results/planted/boolq-plant-rows.json, or the sums plant's own: sums-plant-rows.json, sums3-, ops-)")
    p.add_argument("--write-rows", action="store_true",
                   help="sums plants: write the seeded row plan (--rows, and the reserve file beside it) first")
    p.add_argument("--seed", type=int, default=0, help="seed of the cross-validation folds the fit uses")
    p.add_argument("--truth", default=None, metavar="FILE",
                   help="also measure every plant on the truth rows and write recipe and truth to FILE (JSON)")
    p.add_argument("--json", action="store_true", help="print the build record as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.plant import DEFAULT_ROWS, KINDS, build_plants
    if args.kind in SUMS_KINDS:
        return _run_sums(args)
    if args.write_rows:
        raise SystemExit("cel-lens plant: --write-rows is for the sums plants (BoolQ's plan: scripts/plant_rows.py)")
    kinds = list(KINDS) if args.kind == "all" else [args.kind]
    record = build_plants(kinds, data_dir=args.data_dir, rows=args.rows or DEFAULT_ROWS, seed=args.seed,
                          truth=args.truth is not None)
    _write(args.truth, record)
    if args.json:
        print_json(record)
        return 0
    for kind, plant in record["plants"].items():
        heads = ", ".join(f"{n}: {p['canceller']} cancels {p['reader']} (scale {p['scale']:g})" for n, p in plant["pairs"].items())
        print(f"{plant['name']}: {plant['tensors_sha256'][:16]}  {heads}")
    print(f"{record['cpu_s']:.0f} CPU s")
    return 0


def _write(path: str | None, record: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=1) + "\n")


def _run_sums(args: argparse.Namespace) -> int:
    """The capability plant on two-choice addition (:mod:`cel_lens.plant.sums`)."""
    from cel_lens.plant.sums import SUMS_ROWS, build_sums_plant, sums_row_plan

    rows = Path(args.rows or SUMS_ROWS[args.kind])
    if args.write_rows:
        plan, reserve = sums_row_plan(args.data_dir, args.kind)
        rows.parent.mkdir(parents=True, exist_ok=True)
        rows.write_text(json.dumps(plan, indent=1) + "\n")
        rows.with_suffix(".txt").write_text(reserve)
        print(f"wrote {rows} and {rows.with_suffix('.txt')}")
    record = build_sums_plant(kind=args.kind, data_dir=args.data_dir, rows=rows, truth=args.truth is not None)
    _write(args.truth, record)
    if args.json:
        print_json(record)
        return 0
    print(f"{record['name']}: {record['tensors_sha256'][:16]}  {record['head']} x{record['factor']:g}")
    print(f"{record['cpu_s']:.0f} CPU s")
    return 0


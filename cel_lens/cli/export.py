"""``cel-lens export``: the enhanced model as a plain checkpoint (S-hat's heads removed), verified
against the run's recorded test decisions with plain ``transformers`` on request."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cel_lens.cli.common import Formatter, print_json
from cel_lens.cli.options import add_fields, settings_from_args
from cel_lens.config import ExecutionSettings

__all__ = ["add", "run"]

EPILOG = """examples:
  cel-lens export runs/qwen__arithmetic__1a2b3c --out qwen-arith-enhanced --verify
  cel-lens export --heads L3H1+L12H7 --model Qwen/Qwen2.5-3B-Instruct --out qwen-edited
"""


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "export", help="write a run's enhanced model as a plain checkpoint (selected heads removed)",
        description=__doc__, epilog=EPILOG, formatter_class=Formatter,
    )
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="run directory whose selected heads are removed")
    p.add_argument("--out", required=True, help="output directory (must be new or empty)")
    p.add_argument("--heads", default=None, help="heads to remove without a run, e.g. L3H1+L12H7 (needs --model)")
    p.add_argument("--model", default=None,
                   help="checkpoint to edit: hub id, local directory or 'organism' (default: the run's model)")
    p.add_argument("--verify", action="store_true",
                   help="reload the export with plain transformers and check every D_test decision against the run")
    p.add_argument("--data-dir", default=None, help="task files for --verify (the run's --data-dir)")
    add_fields(p, ExecutionSettings, ("device", "dtype", "batch_size", "progress"), help_suffix={
        "device": "; for --verify", "dtype": "; for --verify (default: the run's model dtype)", "batch_size": " for --verify"})
    p.add_argument("--json", action="store_true", help="print JSON")


def _check(args: argparse.Namespace) -> None:
    """Option errors, before anything is read or written."""
    if args.run_dir and args.heads:
        raise ValueError("give RUN_DIR or --heads, not both")
    if not args.run_dir and not args.heads:
        raise ValueError("give RUN_DIR, or --heads with --model")
    if args.heads and not args.model:
        raise ValueError("--heads needs --model (the checkpoint to edit)")
    if args.verify and not args.run_dir:
        raise ValueError("--verify needs RUN_DIR (the run's recorded decisions are what it checks)")
    settings_from_args(args)  # --device, --dtype, --batch-size: the fields' own rules


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code (1 when verification finds a difference)."""
    from cel_lens.heads import HeadSet
    from cel_lens.model.checkpoint_edit import PROVENANCE_FILE, check_out_dir
    from cel_lens.runs.export import export_model, run_task, verify_export
    from cel_lens.runs.reader import load_run

    _check(args)
    check_out_dir(args.out)
    record = load_run(args.run_dir) if args.run_dir else None
    task = run_task(record, data_dir=args.data_dir) if args.verify else None  # a data problem fails before export
    target = record if record is not None else HeadSet.parse(args.heads)
    out = export_model(target, args.out, source=args.model)
    provenance = json.loads((Path(out) / PROVENANCE_FILE).read_text(encoding="utf-8"))
    summary = {
        "out": str(out), "heads": provenance["heads"], "source": provenance["source"].get("id"), "kind": provenance["kind"],
        "edited_tensors": len(provenance["edited_tensors"]), "files": len(provenance["files"]),
        "export_seconds": provenance["export_seconds"],
    }
    report = None
    if args.verify:
        report = verify_export(out, record, task=task, device=args.device, dtype=args.dtype,
                               batch_size=args.batch_size, progress=args.progress)
        summary["verify"] = {"ok": report.ok, "matches": report.matches, "n": report.n, "mode": report.mode,
                             "mismatched_ids": report.mismatched_ids, "files_ok": report.files_ok,
                             "files_checked": report.files_checked}
    if args.json:
        print_json(summary)
    else:
        print(f"exported {summary['source']} without {summary['heads']} to {out} "
              f"({summary['edited_tensors']} tensors edited, {summary['files']} files, {summary['export_seconds']:.2f} s)")
        if report is not None:
            print("verify: " + str(report).replace("\n", "\n        "))
    return 0 if report is None or report.ok else 1

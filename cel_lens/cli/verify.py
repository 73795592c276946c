"""``cel-lens verify EXPORT_DIR [RUN_DIR]``: re-check an existing export: every file's sha256 (the
record's own included), that the recorded heads are exactly the zeroed slices, and every D_test
decision of the run, made by the export alone (plain ``transformers``; a native one with cel_lens,
no hooks). RUN_DIR defaults to the run the export's record names."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json
from cel_lens.cli.options import add_fields, settings_from_args
from cel_lens.config import ExecutionSettings

__all__ = ["add", "run"]

EPILOG = """examples:
  cel-lens verify qwen-arith-enhanced
  cel-lens verify qwen-arith-enhanced runs/qwen__arithmetic__1a2b3c --data-dir ../shared/data
"""


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "verify", help="re-check an export against its record and its run's test decisions",
        description=__doc__, epilog=EPILOG, formatter_class=Formatter,
    )
    p.add_argument("export_dir", metavar="EXPORT_DIR", help="a directory written by cel-lens export")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", default=None,
                   help="the run whose decisions the export must make (default: the one its record names)")
    p.add_argument("--data-dir", default=None, help="task files (the run's --data-dir)")
    add_fields(p, ExecutionSettings, ("device", "dtype", "batch_size", "progress"),
               help_suffix={"dtype": " (default: the run's model dtype)"})
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns 0 when everything matches, 1 otherwise."""
    from cel_lens.runs.export import verify_export

    settings_from_args(args)  # --device, --dtype, --batch-size: the fields' own rules
    report = verify_export(args.export_dir, args.run_dir, data_dir=args.data_dir, device=args.device, dtype=args.dtype,
                           batch_size=args.batch_size, progress=args.progress)
    if args.json:
        print_json({"ok": report.ok, "heads": report.heads, "matches": report.matches, "n": report.n, "mode": report.mode,
                    "mismatched_ids": report.mismatched_ids, "files_ok": report.files_ok,
                    "files_checked": report.files_checked, "zeroed_ok": report.zeroed_ok})
    else:
        print(("verified: " if report.ok else "FAILED: ") + str(report).replace("\n", "\n  "))
    return 0 if report.ok else 1

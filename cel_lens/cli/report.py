"""``cel-lens report``: a run's result table and figures, from its run directory."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "report",
        help="print a run's result table and write its figures",
        formatter_class=Formatter,
        description="Reads RUN_DIR (result.json), prints the selected heads, accuracies, gain with CI, "
        "McNemar p-value and random-subset null, and writes the run's figures (gain heatmap with the "
        "ranked subsets; discovery vs test gain) as interactive HTML and static PNG.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory written by 'cel-lens search'")
    p.add_argument("--out", default=None, help="figure directory (default: RUN_DIR/figures)")
    p.add_argument("--no-figures", action="store_true", help="only print the result")
    p.add_argument("--json", action="store_true", help="print result.json (and the figure paths) as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from pathlib import Path

    from cel_lens.report import result_dict, write_run_figures
    from cel_lens.runs import load_run
    from cel_lens.selection import format_result

    if not Path(args.run_dir, "result.json").exists():
        raise FileNotFoundError(f"{args.run_dir} holds no result.json (not a run directory, or the search is unfinished)")
    run = load_run(args.run_dir)
    result = result_dict(run)
    figures: list = []
    if not args.no_figures:
        figures = write_run_figures(result, args.out or Path(args.run_dir) / "figures")
    if args.json:
        print_json({**result, "figures": [str(f) for f in figures]})
        return 0
    print(f"run {run.path}")
    print(format_result(result))
    for f in figures:
        print(f"wrote {f}")
    return 0

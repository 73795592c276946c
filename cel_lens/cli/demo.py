"""``cel-lens demo``: the offline end-to-end search on the built-in model organism."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json
from cel_lens.cli.options import add_fields, config_from_args, settings_from_args
from cel_lens.config import ExecutionSettings, SearchConfig

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "demo",
        help="offline end-to-end search on the built-in model organism",
        formatter_class=Formatter,
        description="Runs Algorithm 1 with default options on the shipped model organism (a small "
        "trained transformer whose two training tasks conflict on a shared feature), prints the "
        "held-out gain on task A with its CI, p-value and null, and the effect of the same ablation on "
        "task B. Needs no network and no GPU.",
    )
    p.add_argument("--out", default=None, help="run directory (default: runs/demo, or runs/demo__n_dist-1000 and so "
                   "on for other options, so each set of options has its own)")
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples (default: the task's)")
    p.add_argument("--n-test", type=int, default=None, help="test examples (default: the task's)")
    add_fields(p, SearchConfig, ("seed",))
    p.add_argument("--figures", default=None, help="write the figures here (default: OUT/figures)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--json", action="store_true", help="print the result (result.json keys + task_B_gain) as JSON")
    add_fields(p, ExecutionSettings, ("progress",))


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.organism.demo import run_demo

    seed, progress = config_from_args(args).seed, settings_from_args(args).progress  # checked as search checks them
    summary = run_demo(
        out=args.out, n_dist=args.n_dist, n_test=args.n_test, seed=seed,
        figures=None if args.no_figures else (args.figures or "default"), progress=progress, verbose=not args.json,
    )
    if args.json:
        print_json(summary)
    return 0

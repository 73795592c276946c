"""The ``cel-lens`` command: a thin layer over the public API.

Each subcommand has an ``_add_<name>(subparsers)`` that declares its options and a
``_cmd_<name>(args) -> int`` that runs it. Errors a user can fix are printed as one line
(``cel-lens: error: ...``) with exit code 2, never a traceback (``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Optional, Sequence

__all__ = ["main", "build_parser"]


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=str))


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def _add_models(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the paper's models (hub id, layers, heads)", formatter_class=_Formatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _cmd_models(args: argparse.Namespace) -> int:
    from cel_lens.models import PAPER_MODELS

    rows = [m.as_dict() if hasattr(m, "as_dict") else dict(m) for m in PAPER_MODELS.values()]
    if args.json:
        _print_json(rows)
        return 0
    keys = list(rows[0]) if rows else []
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in keys))
    return 0


# ---------------------------------------------------------------------------------------------
# registry of subcommands: name -> (add_parser, handler)
# ---------------------------------------------------------------------------------------------
_COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "models": (_add_models, _cmd_models),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cel-lens`` with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="cel-lens",
        description="Capability Enhancement Localization: find attention heads whose ablation helps a task.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add, _ in _COMMANDS.values():
        add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``cel-lens``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _COMMANDS[args.command][1]
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("cel-lens: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError, ImportError, OSError, KeyError) as err:
        if args.debug:
            raise
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"cel-lens: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``cel-lens`` command: a thin layer over the public API, one module per subcommand.

Each subcommand module has ``add(subparsers)`` that declares its options and ``run(args) -> int``
that runs it. Errors a user can fix are printed as one line (``cel-lens: error: ...``) with exit
code 2, never a traceback (``--debug`` shows it); an option is named by its flag. Under ``--json``
stdout carries the JSON alone.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import Optional, Sequence

from cel_lens.cli import demo, evaluate, export, models, organism, report, search, table, tasks, theory
from cel_lens.cli.common import Formatter, flag_message
from cel_lens.config import OptionError

__all__ = ["main", "build_parser", "COMMANDS"]

COMMANDS: dict[str, ModuleType] = {
    "models": models,
    "tasks": tasks,
    "search": search,
    "table": table,
    "evaluate": evaluate,
    "report": report,
    "export": export,
    "demo": demo,
    "theory": theory,
    "organism": organism,
}
"""Subcommand name -> its module (``add`` and ``run``)."""

COMPUTING = frozenset({"search", "evaluate", "demo", "theory", "organism"})
"""Subcommands that run torch: their thread count is set first (:mod:`cel_lens.threads`)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cel-lens`` with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="cel-lens",
        description="Capability Enhancement Localization: find attention heads whose ablation helps a task.",
        formatter_class=Formatter,
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS.values():
        module.add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``cel-lens``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in COMPUTING:
            from cel_lens.threads import configure_threads  # imports torch: after --help and argument errors

            configure_threads(look_at_load=True)  # the idle cores: one on a busy machine (CEL_LENS_THREADS overrides)
        return int(COMMANDS[args.command].run(args) or 0)
    except KeyboardInterrupt:
        print("cel-lens: interrupted", file=sys.stderr)
        return 130
    except OptionError as err:
        if args.debug:
            raise
        print(f"cel-lens: error: {flag_message(err)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, RuntimeError, ImportError, OSError, KeyError) as err:
        if args.debug:
            raise
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"cel-lens: error: {msg}", file=sys.stderr)
        return 2

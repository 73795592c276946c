"""The ``cel-lens`` command: a thin layer over the public API, one module per subcommand.

Each subcommand module has ``add(subparsers)`` that declares its options and ``run(args) -> int``
that runs it. Errors a user can fix are printed as one line (``cel-lens: error: ...``) with exit
code 2, never a traceback (``--debug`` shows it); an option is named by its flag. Under ``--json``
stdout carries the JSON alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType
from typing import Optional, Sequence

from cel_lens.cli import demo, evaluate, export, models, organism, plant, report, search, table, tasks, theory, verify
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
    "verify": verify,
    "demo": demo,
    "theory": theory,
    "organism": organism,
    "plant": plant,
}
"""Subcommand name -> its module (``add`` and ``run``)."""

COMPUTING = frozenset({"search", "evaluate", "demo", "theory", "organism", "plant", "verify"})
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


SIGPIPE_EXIT = 141
"""Exit code when the reader of stdout went away (``cel-lens report --json | head``): 128 + SIGPIPE,
as a command killed by the signal reports it."""


def _reader_gone() -> int:
    """stdout's reader closed the pipe: send what is still buffered nowhere (so that Python's exit
    flush does not fail again) and stop quietly, as ``cat`` or ``ls`` do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass
    return SIGPIPE_EXIT


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``cel-lens``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in COMPUTING:
            from cel_lens.threads import configure_threads  # imports torch: after --help and argument errors

            configure_threads(look_at_load=True)  # the idle cores: one on a busy machine (CEL_LENS_THREADS overrides)
        code = int(COMMANDS[args.command].run(args) or 0)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _reader_gone()
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

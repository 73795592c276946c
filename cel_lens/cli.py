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
# tasks
# ---------------------------------------------------------------------------------------------
def _add_tasks(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tasks",
        help="list the tasks with their default split sizes and data sources",
        formatter_class=_Formatter,
        description="Tasks, their protocol, default D_dist/D_test sizes (the paper's) and where their data "
        "comes from: the Hugging Face hub, or files under --data-dir (or $CEL_LENS_DATA_DIR).",
    )
    p.add_argument("--data-dir", default=None, help="also show which local files exist under this directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _cmd_tasks(args: argparse.Namespace) -> int:
    from cel_lens.tasks import available_tasks, task_info
    from cel_lens.tasks._io import FIXTURES_DIR, resolve_data_dir, sha256_file

    root = resolve_data_dir(args.data_dir)
    rows = []
    for name in available_tasks():
        info = task_info(name)
        row = {"task": name, **{k: info.get(k, "") for k in ("kind", "metric", "n_dist", "n_test", "hub")}}
        row["files"] = list(info.get("files", []))
        if root is not None:
            status = {}
            for rel in row["files"]:
                path, fixture = root / rel, FIXTURES_DIR / rel
                if not path.is_file():
                    status[rel] = "missing"
                elif fixture.is_file() and sha256_file(path) == sha256_file(fixture):
                    status[rel] = "fixture"
                else:
                    status[rel] = "found"
            row["local"] = status
        rows.append(row)
    if args.json:
        _print_json({"data_dir": None if root is None else str(root), "tasks": rows})
        return 0
    cols = ["task", "kind", "metric", "n_dist", "n_test", "hub"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols} if rows else {}
    print("  ".join(c.ljust(widths[c]) for c in cols) + "  local files")
    for r in rows:
        files = r["files"]
        if len(files) > 3:  # many files in one folder (arithmetic): summarise
            folder = files[0].split("/")[0]
            counts = ""
            if root is not None:
                states = [r["local"][f] for f in files]
                counts = ": " + ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))
            shown = [f"{folder}/*.jsonl ({len(files)} files{counts})"]
        else:
            shown = [f"{f} ({r['local'][f]})" if root is not None else f for f in files]
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols) + "  " + ", ".join(shown))
    print("n_test of hellaswag/boolq/mbpp = the whole official split; sources: the hub unless --data-dir "
          "or $CEL_LENS_DATA_DIR points at local files" + ("" if root is None else f" (here: {root})"))
    return 0


# ---------------------------------------------------------------------------------------------
# registry of subcommands: name -> (add_parser, handler)
# ---------------------------------------------------------------------------------------------
_COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "models": (_add_models, _cmd_models),
    "tasks": (_add_tasks, _cmd_tasks),
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

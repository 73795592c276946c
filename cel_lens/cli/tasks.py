"""``cel-lens tasks``: tasks, their protocol, default split sizes and data sources."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "tasks",
        help="list the tasks with their default split sizes and data sources",
        formatter_class=Formatter,
        description="Tasks, their protocol, default D_dist/D_test sizes (the paper's) and where their data "
        "comes from: the Hugging Face hub, or files under --data-dir (or $CEL_LENS_DATA_DIR).",
    )
    p.add_argument("--data-dir", default=None, help="also show which local files exist under this directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.tasks import available_tasks, task_info
    from cel_lens.tasks.io import FIXTURES_DIR, resolve_data_dir, sha256_file

    root = resolve_data_dir(args.data_dir)
    rows = []
    for name in available_tasks():
        info = task_info(name)
        row = {"task": name, **{k: info.get(k, "") for k in ("answer_type", "metric", "n_dist", "n_test", "hub")}}
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
        print_json({"data_dir": None if root is None else str(root), "tasks": rows})
        return 0
    cols = ["task", "answer_type", "metric", "n_dist", "n_test", "hub"]
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

"""``cel-lens table``: a model × task grid of searches and its side effects (the paper's Table 1)."""

from __future__ import annotations

import argparse

from typing import Any, Sequence

from cel_lens.cli.common import Formatter, allow_code_execution, parse_task_options, print_json
from cel_lens.cli.options import add_fields, config_from_args, settings_from_args
from cel_lens.config import ExecutionSettings, OptionError, SearchConfig

__all__ = ["add", "run", "task_overrides"]

DEFAULT_OUT = "runs/table"


def _add_search_options(p: argparse.ArgumentParser) -> None:
    """What every search of the grid computes, and how it runs: every field of
    :class:`~cel_lens.config.SearchConfig` and :class:`~cel_lens.config.ExecutionSettings`, the
    same flags as ``cel-lens search`` (generated once, :mod:`~cel_lens.cli.options`)."""
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples per task (default: the paper's size)")
    p.add_argument("--n-test", type=int, default=None, help="test examples per task (default: the paper's size)")
    p.add_argument("--data-dir", default=None, help="read task files from this directory instead of the hub")
    p.add_argument("--chat-template", action="store_true",
                   help="wrap each prompt in the tokenizer's chat template (Instruct models; recorded in each run)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens the grid's generation tasks (MBPP) may generate (default: 256)")
    p.add_argument("--task-option", action="append", default=[], metavar="TASK:KEY=VALUE",
                   help="an option of one task alone, recorded in its run (repeatable; VALUE read as JSON if it "
                   "parses): its split sizes (boolq:n_dist=100), generation budget (mbpp:max_new_tokens=128) "
                   "or a loader option (boolq:dist_from=validation)")
    add_fields(p, SearchConfig)
    add_fields(p, ExecutionSettings)
    p.add_argument("--parallel-pairs", type=int, default=1,
                   help="searches run at once (with --backend ray; the cluster's workers are shared among them)")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let MBPP run model-written code in the sandbox (without it, MBPP pairs fail in their rows)")


def add(sub: argparse._SubParsersAction) -> None:
    """Declare ``table`` and its options."""
    p = sub.add_parser(
        "table",
        help="the paper's Table 1: a search per model × task, side effects, one report",
        formatter_class=Formatter,
        description="Runs 'cel-lens search' for every model and task (each pair its own run directory "
        "inside OUT, so the same command resumes pair by pair; each model is loaded once), evaluates "
        "every selected subset on the other tasks' test splits (the side-effect matrix), and writes "
        "OUT/table.md, OUT/table.json and OUT/report.html (one row per pair with Δ, CI, McNemar and "
        "Holm-adjusted p; the side effects; every pair's gain heatmap). A pair that fails is reported "
        "in its row and the others still run. 'cel-lens table --report OUT' rebuilds the outputs "
        "from the run directories without a model.",
    )
    p.add_argument("--models", default=None,
                   help="comma-separated hub ids, checkpoint directories or 'organism'; 'paper': the paper's three")
    p.add_argument("--tasks", default=None, help="comma-separated task names (see 'cel-lens tasks'); 'paper': the paper's four")
    p.add_argument("--out", default=None, help=f"grid directory (default: {DEFAULT_OUT})")
    p.add_argument("--report", metavar="DIR", default=None,
                   help="rebuild the outputs of grid directory DIR from its run directories (no model is loaded)")
    p.add_argument("--json", action="store_true", help="print table.json to stdout instead of table.md")
    p.add_argument("--no-png", action="store_true", help="skip summary.png (which needs a Chromium for kaleido)")
    _add_search_options(p)


def task_overrides(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``TASK:KEY=VALUE`` texts as task -> options (checked against the grid by the plan)."""
    grouped: dict[str, list[str]] = {}
    for item in items:
        task, sep, rest = str(item).partition(":")
        if not sep or not task.strip() or "=" in task:
            raise OptionError("task_option", f"wants TASK:KEY=VALUE in a grid, got {item!r}")
        grouped.setdefault(task.strip(), []).append(rest)
    return {task: parse_task_options(rest) for task, rest in grouped.items()}


def _check(args: argparse.Namespace) -> None:
    """One line for a wrong combination of options."""
    if args.report is not None:
        if args.models or args.tasks or args.out or args.task_option:
            raise ValueError("--report DIR rebuilds an existing grid: give no --models, --tasks, --out or --task-option with it")
    elif not args.models or not args.tasks:
        raise ValueError("give --models and --tasks (or --report DIR)")


def run(args: argparse.Namespace) -> int:
    """Run the grid (or rebuild its outputs) and print its table."""
    _check(args)
    from cel_lens.grids import grid, rebuild

    if args.report is not None:
        result = rebuild(args.report, png=not args.no_png)
    else:
        config, settings = config_from_args(args), settings_from_args(args)
        allow_code_execution(args)
        result = grid(
            args.models, args.tasks, out=args.out or DEFAULT_OUT, config=config, settings=settings,
            png=not args.no_png, n_dist=args.n_dist, n_test=args.n_test, data_dir=args.data_dir,
            chat_template=args.chat_template or None, max_new_tokens=args.max_new_tokens,
            parallel_pairs=args.parallel_pairs, task_overrides=task_overrides(args.task_option),
        )
    if args.json:
        print_json(result.table)
    else:
        print(result)
        print(f"wrote {', '.join(str(p) for p in result.outputs)}")
    return 0

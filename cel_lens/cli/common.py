"""What the subcommands share: the help formatter, JSON output, model/task options and loading.

Subcommand modules import heavy packages (torch, plotly) inside their ``run`` functions, so that
``cel-lens --help`` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from typing import TYPE_CHECKING

from cel_lens.config import ExecutionSettings

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.tasks.base import Task

__all__ = [
    "Formatter", "print_json", "add_model_task_options", "allow_code_execution", "load_task_from_args",
    "load_model_and_task", "DEFAULTS",
]

DEFAULTS = ExecutionSettings()
"""Execution defaults the options below show (one place: :class:`cel_lens.config.ExecutionSettings`)."""


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help text with defaults and the description's own line breaks."""


def print_json(obj: object) -> None:
    """Print ``obj`` as indented JSON (non-JSON values as their ``str``)."""
    print(json.dumps(obj, indent=2, default=str))


def add_model_task_options(p: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    """The options every model-and-task subcommand takes (``search``, ``evaluate``)."""
    p.add_argument("--model", required=model_required, help="hub id, local checkpoint directory, or 'organism'")
    p.add_argument("--task", required=True, help="task name (see 'cel-lens tasks')")
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples (default: the paper's size)")
    p.add_argument("--n-test", type=int, default=None, help="test examples (default: the paper's size)")
    p.add_argument("--data-dir", default=None, help="read task files from this directory instead of the hub")
    p.add_argument("--seed", type=int, default=0, help="seed of the statistics (null, bootstrap, stability) and the splits")
    p.add_argument("--split-seed", type=int, default=None, help="seed of the splits alone (default: --seed)")
    p.add_argument("--device", default=DEFAULTS.device, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default=DEFAULTS.dtype, help="model dtype, e.g. float32 or bfloat16")
    p.add_argument("--loader", choices=["auto", "hooked", "bridge"], default=DEFAULTS.loader,
                   help="HookedTransformer or TransformerBridge (auto: HookedTransformer where supported)")
    p.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size, help="examples per forward pass")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let generation tasks (MBPP) run model-written code in the sandbox")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def allow_code_execution(args: argparse.Namespace) -> None:
    """Opt in to running generated code when ``--allow-code-execution`` was given."""
    if args.allow_code_execution:
        from cel_lens.sandbox import ALLOW_ENV

        os.environ[ALLOW_ENV] = "1"


def load_task_from_args(args: argparse.Namespace) -> "Task":
    """The task the options name (cheap: a wrong name or data directory fails before a model loads)."""
    from cel_lens.tasks.registry import load_task

    seed = args.seed if getattr(args, "split_seed", None) is None else args.split_seed
    return load_task(args.task, n_dist=args.n_dist, n_test=args.n_test, seed=seed, data_dir=args.data_dir)


def load_model_and_task(args: argparse.Namespace) -> tuple[Any, "Task"]:
    """The model and task the options name (the task first)."""
    from cel_lens.model.load import load_model

    allow_code_execution(args)
    task = load_task_from_args(args)
    model = load_model(args.model, device=args.device, dtype=args.dtype, loader=args.loader)
    return model, task

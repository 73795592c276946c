"""``cel-lens search``: Algorithm 1 on a model and a task, recorded in a run directory."""

from __future__ import annotations

import argparse
from dataclasses import fields

from cel_lens.cli.common import (
    Formatter,
    add_model_task_options,
    allow_code_execution,
    check_names_first,
    json_stdout,
    load_task_from_args,
    print_json,
    settings_from_args,
)
from cel_lens.cli.options import RUN_FIELDS, add_fields, config_from_args
from cel_lens.config import QUICK, ExecutionSettings, SearchConfig, check_split_sizes

__all__ = ["add", "run", "apply_quick", "FLAG_OF"]

FLAG_OF = {"n_dist": "--n-dist", "n_test": "--n-test", "k": "--k", "pool_size": "--pool", "n_null": "--n-null",
           "n_boot": "--n-boot"}
"""Option name -> the flag that sets it, for the options :data:`~cel_lens.config.QUICK` presets."""
_CONFIG_FIELDS = [f.name for f in fields(SearchConfig)]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare ``search`` and its options."""
    p = sub.add_parser(
        "search",
        help="run Algorithm 1: score heads, search subsets, report the held-out gain",
        formatter_class=Formatter,
        description="Score single heads on D_dist, evaluate joint ablations of subsets of the best "
        "candidates, fix the best subset, then measure its gain on D_test with a paired CI, a McNemar "
        "p-value and a random-subset null. Everything is recorded in the run directory; running the "
        "same command again resumes.",
    )
    add_model_task_options(p)
    d = SearchConfig()
    quick = ", ".join(f"{FLAG_OF.get(k, k)} {v}" for k, v in QUICK.items())
    p.add_argument("--quick", action="store_true",
                   help=f"a first look: {quick} (options given explicitly still win); minutes on a small model, but exact "
                   "stage 1 still scans every head: tens of CPU minutes for a 135M model on a CPU (check with --plan; "
                   "--scorer attribution or prescreen for minutes)")
    p.add_argument("--plan", action="store_true",
                   help="print how many evaluations each stage runs and an estimate in CPU time and in wall time at the "
                   "CPU share measured, from timing the intact model and every head of two layers on 8 D_dist examples "
                   "(said first; capped at 45 CPU s), then stop")
    preset = {name: None for name in QUICK if name in _CONFIG_FIELDS}
    suffix = {name: f" (default: {getattr(d, name)}; --quick: {QUICK[name]})" for name in preset}
    add_fields(p, SearchConfig, [n for n in _CONFIG_FIELDS if n not in ("seed", "split_seed")], defaults=preset,
               help_suffix=suffix)
    add_fields(p, ExecutionSettings, RUN_FIELDS)
    p.add_argument("--out", default=None, help="run directory (default: runs/<model>__<task>__<config hash>)")
    p.add_argument("--json", action="store_true", help="print result.json to stdout")


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the preset options left unset: :data:`~cel_lens.config.QUICK` with ``--quick``, else
    the defaults (``None`` split sizes: the task's own)."""
    defaults = SearchConfig()
    for name, value in QUICK.items():
        if getattr(args, name) is None:
            setattr(args, name, value if args.quick else getattr(defaults, name, None))
    return args


def run(args: argparse.Namespace) -> int:
    """Run the search (the backend loads the model: locally here, or in each Ray actor). Every
    option is checked, then the task is read, before the model loads or anything is written."""
    from cel_lens.backends.base import backend_class, get_backend
    from cel_lens.pipeline import check_task, plan, search

    apply_quick(args)
    config = config_from_args(args)
    settings = settings_from_args(args)
    check_split_sizes(args.n_dist, args.n_test)
    get_backend(settings.backend)  # e.g. Ray missing: fail before the task is read
    allow_code_execution(args)
    if backend_class(settings.backend).in_process:  # other backends' workers resolve the name where they run
        check_names_first(args)
    task = check_task(load_task_from_args(args))
    if args.plan:
        with json_stdout(args.json):
            found = plan(args.model, task, config, settings=settings)
        if args.json:
            print_json(found.to_dict())
        else:
            print(f"{found}\n{found.estimate_line()}")
        return 0
    with json_stdout(args.json):
        result = search(args.model, task, config, out=args.out, settings=settings)
    if args.json:
        print_json(result.result.to_dict())
    else:
        print(result)
    return 0

"""``cel-lens search``: Algorithm 1 on a model and a task, recorded in a run directory."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Mapping

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
from cel_lens.config import QUICK, RANK_RULES, ExecutionSettings, SearchConfig, check_split_sizes
from cel_lens.selection.plan import SearchPlan
from cel_lens.selection.plan_quick import QUICK_BUDGET_S, QUICK_CUTS, QUICK_SEARCH_S, QuickFit, fit_quick, price_like

__all__ = ["add", "run", "apply_quick", "fit_quick_args", "FLAG_OF", "QUICK_RECORD"]

FLAG_OF = {"n_dist": "--n-dist", "n_test": "--n-test", "k": "--k", "pool_size": "--pool", "n_null": "--n-null",
           "n_boot": "--n-boot"}
"""Option name -> the flag that sets it, for the options :data:`~cel_lens.config.QUICK` presets."""
_CONFIG_FIELDS = [f.name for f in fields(SearchConfig)]
_CUT_OPTIONS = sorted({name for cut in QUICK_CUTS for name in cut.changes if name in _CONFIG_FIELDS})
QUICK_RECORD = "quick.json"
"""What ``--quick`` chose and gave up (:class:`~cel_lens.selection.plan_quick.QuickFit`), in the run directory."""


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
                   help=f"a first look within about {QUICK_BUDGET_S / 60:.0f} minutes: {quick}, then, where the calibrated "
                   "plan says the search would take longer, the pre-screen (attribution, best 10 %%) and 100 examples a "
                   "split, in that order, until it fits; what it gave up is printed and written to quick.json in the run "
                   "directory (options given explicitly still win)")
    p.add_argument("--plan", action="store_true",
                   help="print how many evaluations each stage runs and an estimate in CPU time and in wall time at the "
                   "CPU share measured, from timing the intact model and every head of two layers on 8 D_dist examples "
                   "(said first; capped at 45 CPU s), then stop")
    preset = {name: None for name in [*QUICK, *_CUT_OPTIONS] if name in _CONFIG_FIELDS}
    suffix = {name: f" (default: {getattr(d, name)}" + (f"; --quick: {QUICK[name]})" if name in QUICK else ")")
              for name in preset}
    add_fields(p, SearchConfig, [n for n in _CONFIG_FIELDS if n not in ("seed", "split_seed")], defaults=preset,
               help_suffix=suffix)
    add_fields(p, ExecutionSettings, RUN_FIELDS)
    p.add_argument("--out", default=None, help="run directory (default: runs/<model>__<task>__<config hash>)")
    p.add_argument("--json", action="store_true", help="print result.json to stdout")


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the preset options left unset: :data:`~cel_lens.config.QUICK` with ``--quick``, else
    the defaults (``None`` split sizes: the task's own), and the options a quick cut may set
    (:data:`~cel_lens.selection.plan_quick.QUICK_CUTS`) with their defaults. Records the options the
    user set (``args.explicit``) first: a cut never overrides them."""
    defaults = SearchConfig()
    args.explicit = {name for name in [*QUICK, *_CUT_OPTIONS] if getattr(args, name, None) is not None}
    for name, value in QUICK.items():
        if getattr(args, name) is None:
            setattr(args, name, value if args.quick else getattr(defaults, name, None))
    for name in _CUT_OPTIONS:
        if name not in QUICK and getattr(args, name, None) is None:
            setattr(args, name, getattr(defaults, name))
    return args


def fit_quick_args(args: argparse.Namespace, task: Any, config: SearchConfig, settings: ExecutionSettings
                   ) -> tuple[SearchConfig, Any, QuickFit, SearchPlan]:
    """``--quick`` within its budget: calibrate the preset's plan, take the cuts it needs
    (:func:`~cel_lens.selection.plan_quick.fit_quick`), and return the config, the task (cut to the
    new sizes), the choice and the chosen search's priced plan."""
    from cel_lens.pipeline import plan
    from cel_lens.selection.plan import plan_search

    timed = plan(args.model, task, config, settings=settings)
    controls = any(s.name.startswith("controls") for s in timed.stages)

    def cut(changes: Mapping[str, Any]) -> tuple[SearchConfig, dict[str, int]]:
        """The config and the split sizes (``n_dist``, ``n_test``) with ``changes`` applied."""
        sizes = {s: min(int(changes.get(f"n_{s}", len(task.split(s)))), len(task.split(s))) for s in ("dist", "test")}
        return replace(config, **{k: v for k, v in changes.items() if k in _CONFIG_FIELDS}), sizes

    def replan(changes: Mapping[str, Any]) -> SearchPlan:
        chosen, sizes = cut(changes)
        return plan_search(timed.n_layers, timed.n_heads, sizes["dist"], sizes["test"], config=chosen, controls=controls)

    fixed = set(args.explicit) | ({"scorer"} if RANK_RULES.resolve(config.rank_by).needs_scorer else set())
    fit = fit_quick(timed, replan, fixed, budget_s=QUICK_SEARCH_S)  # a rule that needs its scorer keeps it
    priced = timed if timed.seconds_per_unit is None else price_like(replan(fit.changes), timed)
    config, sizes = cut(fit.changes)
    splits = {s: task.split(s).subset(n) for s, n in sizes.items() if f"n_{s}" in fit.changes}
    for name in ("n_dist", "n_test"):
        setattr(args, name, fit.changes.get(name, getattr(args, name)))
    return config, replace(task, **splits), fit, priced


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
    fit = found = None
    if args.quick:
        with json_stdout(args.json):
            config, task, fit, found = fit_quick_args(args, task, config, settings)
        print("\n".join(fit.lines()), file=sys.stderr, flush=True)
    if args.plan:
        if found is None:
            with json_stdout(args.json):
                found = plan(args.model, task, config, settings=settings)
        if args.json:
            print_json(found.to_dict())
        else:
            print(f"{found}\n{found.estimate_line()}")
        return 0
    with json_stdout(args.json):
        result = search(args.model, task, config, out=args.out, settings=settings)
    if fit is not None:  # what --quick gave up, beside the run's record
        (Path(result.path) / QUICK_RECORD).write_text(json.dumps(fit.to_dict(), indent=1) + "\n", encoding="utf-8")
        print("\n".join(fit.lines()), file=sys.stderr, flush=True)
    if args.json:
        print_json(result.result.to_dict())
    else:
        print(result)
    return 0

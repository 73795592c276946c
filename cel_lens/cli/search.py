"""``cel-lens search``: Algorithm 1 on a model and a task, recorded in a run directory."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import (
    DEFAULTS,
    Formatter,
    add_model_task_options,
    allow_code_execution,
    check_names_first,
    json_stdout,
    load_task_from_args,
    print_json,
    settings_from_args,
)
from cel_lens.config import CI_METHODS, PARSIMONY_RULES, QUICK, SCORERS, STRATEGIES, OptionError, SearchConfig, check_split_sizes

__all__ = ["add", "run", "apply_quick", "FLAG_OF"]

FLAG_OF = {"n_dist": "--n-dist", "n_test": "--n-test", "k": "--k", "pool_size": "--pool", "n_null": "--n-null",
           "n_boot": "--n-boot"}
"""Option name -> the flag that sets it, for the options :data:`~cel_lens.config.QUICK` presets."""
_ATTR = {"pool_size": "pool"}


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
                   help=f"a first look in minutes: {quick} (options given explicitly still win)")
    p.add_argument("--plan", action="store_true",
                   help="print how many evaluations each stage runs and an estimate from one timed batch, then stop")
    p.add_argument("--k", type=int, default=None, help=f"largest subset size (default: {d.k}; --quick: {QUICK['k']})")
    p.add_argument("--pool", type=int, default=None,
                   help=f"candidate pool size, top heads by stage-1 score (default: {d.pool_size}; --quick: {QUICK['pool_size']})")
    p.add_argument("--scorer", choices=SCORERS, default=d.scorer, help="stage-1 scorer")
    p.add_argument("--strategy", choices=STRATEGIES, default=d.strategy, help="stage-2 search")
    p.add_argument("--beam-width", type=int, default=d.beam_width, help="beam width for --strategy beam")
    p.add_argument("--n-null", type=int, default=None,
                   help=f"random head sets in the null (default: {d.n_null}; --quick: {QUICK['n_null']})")
    p.add_argument("--n-boot", type=int, default=None,
                   help=f"paired bootstrap resamples (default: {d.n_boot}; --quick: {QUICK['n_boot']})")
    p.add_argument("--n-masks", type=int, default=d.n_masks, help="random masks for --scorer compressed")
    p.add_argument("--delta", type=float, default=d.delta,
                   help="--scorer racing: probability allowed for its pool to differ from exact scoring's")
    p.add_argument("--margin", type=float, default=d.margin,
                   help="--scorer racing: score difference (accuracy units) near the pool's boundary it may get wrong (0: none)")
    p.add_argument("--n-specificity", type=int, default=d.n_specificity,
                   help="random pools whose stage-2 winners S-hat's test gain is compared with (0: off)")
    p.add_argument("--parsimony", choices=PARSIMONY_RULES, default=d.parsimony,
                   help="stage 2's choice: the smallest subset within one standard error of the best (one_se), or the best")
    p.add_argument("--ci-method", choices=CI_METHODS, default=d.ci_method,
                   help="interval of the test gain: Tango's score interval, Newcombe's paired interval, or the paired bootstrap")
    p.add_argument("--n-adjusted", type=int, default=d.n_adjusted,
                   help="sign-flip permutations of the selection-adjusted test of 'any ablation helps' on D_dist (0: off)")
    p.add_argument("--posthoc", action="store_true",
                   help="also measure every stage-2 subset on D_test (exploratory: never choose by it)")
    p.add_argument("--no-store", action="store_true", help="no activation store: full forward passes")
    p.add_argument("--store-budget-mb", type=float, default=None, help="byte budget of the activation store")
    p.add_argument("--store-dtype", default=d.store_dtype, help="store the residual stream in this dtype (e.g. float16)")
    p.add_argument("--out", default=None, help="run directory (default: runs/<model>__<task>__<config hash>)")
    p.add_argument("--json", action="store_true", help="print result.json to stdout")
    p.add_argument("--backend", choices=["local", "ray"], default=DEFAULTS.backend,
                   help="where evaluations run: this process, or Ray actors (pip install \"cel_lens[ray]\")")
    p.add_argument("--address", default=DEFAULTS.ray_address,
                   help="Ray cluster to join: 'auto' (one started with 'ray start') or HOST:PORT; default: a local Ray")
    p.add_argument("--workers", type=int, default=DEFAULTS.workers,
                   help="Ray actors, one model replica each (default: cluster GPUs / --gpus-per-worker, else CPUs)")
    p.add_argument("--gpus-per-worker", type=float, default=DEFAULTS.gpus_per_worker,
                   help="GPUs per Ray actor (fractions share a GPU)")


def apply_quick(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the preset options left unset: :data:`~cel_lens.config.QUICK` with ``--quick``, else
    the defaults (``None`` split sizes: the task's own)."""
    defaults = SearchConfig()
    for name, value in QUICK.items():
        attr = _ATTR.get(name, name)
        if getattr(args, attr) is None:
            setattr(args, attr, value if args.quick else getattr(defaults, name, None))
    return args


def run(args: argparse.Namespace) -> int:
    """Run the search (the backend loads the model: locally here, or in each Ray actor). Every
    option is checked, then the task is read, before the model loads or anything is written."""
    from cel_lens.backends.base import get_backend
    from cel_lens.pipeline import check_task, plan, search

    apply_quick(args)
    config = SearchConfig(
        k=args.k, pool_size=args.pool, scorer=args.scorer, strategy=args.strategy, beam_width=args.beam_width,
        n_null=args.n_null, n_boot=args.n_boot, seed=args.seed, n_masks=args.n_masks, store_dtype=args.store_dtype,
        split_seed=args.split_seed, n_specificity=args.n_specificity, delta=args.delta, margin=args.margin,
        parsimony=args.parsimony, ci_method=args.ci_method, n_adjusted=args.n_adjusted, posthoc=args.posthoc,
    ).validate()
    budget = args.store_budget_mb
    if budget is not None and not 0 <= budget < float("inf"):
        raise OptionError("store_budget", f"store_budget must be a number of megabytes >= 0, got {budget}")
    settings = settings_from_args(
        args, use_store=not args.no_store, store_budget=None if budget is None else round(budget * 2**20),
        backend=args.backend, ray_address=args.address, workers=args.workers, gpus_per_worker=args.gpus_per_worker,
    )
    check_split_sizes(args.n_dist, args.n_test)
    get_backend(settings.backend)  # e.g. Ray missing: fail before the task is read
    allow_code_execution(args)
    if settings.backend == "local":  # Ray workers resolve the name where they run
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

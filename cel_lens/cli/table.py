"""``cel-lens table``: a model × task grid of searches and its side effects (the paper's Table 1)."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import DEFAULTS, Formatter, add_load_options, allow_code_execution, print_json
from cel_lens.config import SCORERS, STRATEGIES, ExecutionSettings, SearchConfig

__all__ = ["add", "run"]

DEFAULT_OUT = "runs/table"


def _add_search_options(p: argparse.ArgumentParser) -> None:
    """What every search of the grid computes, and how it runs (as ``cel-lens search``)."""
    d = SearchConfig()
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples per task (default: the paper's size)")
    p.add_argument("--n-test", type=int, default=None, help="test examples per task (default: the paper's size)")
    p.add_argument("--data-dir", default=None, help="read task files from this directory instead of the hub")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the splits, the null and the bootstrap")
    p.add_argument("--split-seed", type=int, default=None, help="seed of the splits alone (default: --seed)")
    p.add_argument("--chat-template", action="store_true",
                   help="wrap each prompt in the tokenizer's chat template (Instruct models; recorded in each run)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens the grid's generation tasks (MBPP) may generate (default: 256)")
    p.add_argument("--k", type=int, default=d.k, help="largest subset size")
    p.add_argument("--pool", type=int, default=d.pool_size, help="candidate pool size (top heads by stage-1 score)")
    p.add_argument("--scorer", choices=SCORERS, default=d.scorer, help="stage-1 scorer")
    p.add_argument("--strategy", choices=STRATEGIES, default=d.strategy, help="stage-2 search")
    p.add_argument("--beam-width", type=int, default=d.beam_width, help="beam width for --strategy beam")
    p.add_argument("--n-null", type=int, default=d.n_null, help="random head sets in each null")
    p.add_argument("--n-boot", type=int, default=d.n_boot, help="bootstrap resamples of each CI")
    p.add_argument("--n-masks", type=int, default=d.n_masks, help="random masks for --scorer compressed")
    p.add_argument("--store-dtype", default=d.store_dtype, help="store the residual stream in this dtype (e.g. float16)")
    add_load_options(p)
    p.add_argument("--no-store", action="store_true", help="no activation store: full forward passes")
    p.add_argument("--store-budget-mb", type=float, default=None, help="byte budget of each activation store")
    p.add_argument("--backend", choices=["local", "ray"], default=DEFAULTS.backend,
                   help="where evaluations run: this process, or Ray actors (pip install \"cel_lens[ray]\")")
    p.add_argument("--address", default=DEFAULTS.ray_address, help="Ray cluster to join ('auto' or HOST:PORT)")
    p.add_argument("--workers", type=int, default=DEFAULTS.workers, help="Ray actors, one model replica each")
    p.add_argument("--gpus-per-worker", type=float, default=DEFAULTS.gpus_per_worker, help="GPUs per Ray actor")
    p.add_argument("--parallel-pairs", type=int, default=1,
                   help="searches run at once (with --backend ray; the cluster's workers are shared among them)")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let MBPP run model-written code in the sandbox (without it, MBPP pairs fail in their rows)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


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


def _check(args: argparse.Namespace) -> None:
    """One line for a wrong combination of options."""
    if args.report is not None:
        if args.models or args.tasks or args.out:
            raise ValueError("--report DIR rebuilds an existing grid: give no --models, --tasks or --out with it")
    elif not args.models or not args.tasks:
        raise ValueError("give --models and --tasks (or --report DIR)")


def run(args: argparse.Namespace) -> int:
    """Run the grid (or rebuild its outputs) and print its table."""
    _check(args)
    from cel_lens.grids import grid, rebuild

    if args.report is not None:
        result = rebuild(args.report, png=not args.no_png)
    else:
        config = SearchConfig(
            k=args.k, pool_size=args.pool, scorer=args.scorer, strategy=args.strategy, beam_width=args.beam_width,
            n_null=args.n_null, n_boot=args.n_boot, seed=args.seed, n_masks=args.n_masks, store_dtype=args.store_dtype,
            split_seed=args.split_seed,
        ).validate()
        settings = ExecutionSettings(
            device=args.device, dtype=args.dtype, loader=args.loader, bos=args.bos, batch_size=args.batch_size,
            use_store=not args.no_store,
            store_budget=None if args.store_budget_mb is None else int(args.store_budget_mb * 2**20),
            progress=not args.no_progress, backend=args.backend, ray_address=args.address,
            workers=args.workers, gpus_per_worker=args.gpus_per_worker,
        ).validate()
        allow_code_execution(args)
        result = grid(
            args.models, args.tasks, out=args.out or DEFAULT_OUT, config=config, settings=settings,
            png=not args.no_png, n_dist=args.n_dist, n_test=args.n_test, data_dir=args.data_dir,
            chat_template=args.chat_template or None, max_new_tokens=args.max_new_tokens,
            parallel_pairs=args.parallel_pairs,
        )
    if args.json:
        print_json(result.table)
    else:
        print(result)
        print(f"wrote {', '.join(str(p) for p in result.outputs)}")
    return 0

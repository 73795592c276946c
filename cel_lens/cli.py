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
# search / evaluate / demo
# ---------------------------------------------------------------------------------------------
def _add_model_task_options(p: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    p.add_argument("--model", required=model_required, help="hub id, local checkpoint directory, or 'organism'")
    p.add_argument("--task", required=True, help="task name (see 'cel-lens tasks')")
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples (default: the paper's size)")
    p.add_argument("--n-test", type=int, default=None, help="test examples (default: the paper's size)")
    p.add_argument("--data-dir", default=None, help="read task files from this directory instead of the hub")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits, the null and the bootstrap")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default=None, help="model dtype, e.g. float32 or bfloat16")
    p.add_argument("--loader", choices=["auto", "hooked", "bridge"], default="auto",
                   help="HookedTransformer or TransformerBridge (auto: HookedTransformer where supported)")
    p.add_argument("--batch-size", type=int, default=8, help="examples per forward pass")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let generation tasks (MBPP) run model-written code in the sandbox")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _load(args: argparse.Namespace):
    import os

    from cel_lens.tasks import load_task

    if args.allow_code_execution:
        from cel_lens.sandbox import ALLOW_ENV

        os.environ[ALLOW_ENV] = "1"
    # the task first: it is cheap, so a wrong task name or data directory fails before a model loads
    task = load_task(args.task, n_dist=args.n_dist, n_test=args.n_test, seed=args.seed, data_dir=args.data_dir)
    if args.model == "organism":
        from cel_lens.organism import load_organism

        model = load_organism(device=args.device or "cpu")
    else:
        from cel_lens.models import load_model

        model = load_model(args.model, device=args.device, dtype=args.dtype, loader=args.loader)
    return model, task


def _add_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="run Algorithm 1: score heads, search subsets, report the held-out gain",
        formatter_class=_Formatter,
        description="Score single heads on D_dist, evaluate joint ablations of subsets of the best "
        "candidates, fix the best subset, then measure its gain on D_test with a paired CI, a McNemar "
        "p-value and a random-subset null. Everything is recorded in the run directory; running the "
        "same command again resumes.",
    )
    _add_model_task_options(p)
    p.add_argument("--k", type=int, default=3, help="largest subset size")
    p.add_argument("--pool", type=int, default=12, help="candidate pool size (top heads by stage-1 score)")
    p.add_argument("--scorer", choices=["exact", "attribution", "compressed"], default="exact", help="stage-1 scorer")
    p.add_argument("--strategy", choices=["exhaustive", "beam"], default="exhaustive", help="stage-2 search")
    p.add_argument("--beam-width", type=int, default=8, help="beam width for --strategy beam")
    p.add_argument("--n-null", type=int, default=100, help="random head sets in the null")
    p.add_argument("--n-masks", type=int, default=None, help="random masks for --scorer compressed")
    p.add_argument("--no-store", action="store_true", help="no activation store: full forward passes")
    p.add_argument("--store-budget-mb", type=float, default=None, help="byte budget of the activation store")
    p.add_argument("--store-dtype", default=None, help="store the residual stream in this dtype (e.g. float16)")
    p.add_argument("--out", default=None, help="run directory (default: runs/<model>__<task>__<config hash>)")
    p.add_argument("--json", action="store_true", help="print result.json to stdout")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="where evaluations run: this process, or Ray actors (pip install \"cel_lens[ray]\")")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join: 'auto' (one started with 'ray start') or HOST:PORT; default: a local Ray")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray actors, one model replica each (default: cluster GPUs / --gpus-per-worker, else CPUs)")
    p.add_argument("--gpus-per-worker", type=float, default=0, help="GPUs per Ray actor (fractions share a GPU)")


def _cmd_search(args: argparse.Namespace) -> int:
    from cel_lens.pipeline import search

    if args.backend == "ray":  # each Ray actor loads the model; the driver only needs the task
        from cel_lens.distributed import require_ray
        from cel_lens.tasks import load_task

        require_ray()
        model = args.model
        task = load_task(args.task, n_dist=args.n_dist, n_test=args.n_test, seed=args.seed, data_dir=args.data_dir)
    else:
        model, task = _load(args)
    run = search(
        model, task, k=args.k, pool_size=args.pool, scorer=args.scorer, out=args.out, seed=args.seed,
        n_null=args.n_null, strategy=args.strategy, beam_width=args.beam_width, batch_size=args.batch_size,
        use_store=not args.no_store,
        store_budget=None if args.store_budget_mb is None else int(args.store_budget_mb * 2**20),
        store_dtype=args.store_dtype, n_masks=args.n_masks, progress=not args.no_progress,
        device=args.device, dtype=args.dtype, backend=args.backend, ray_address=args.address,
        workers=args.workers, gpus_per_worker=args.gpus_per_worker,
    )
    if args.json:
        _print_json(run.result.to_dict())
    else:
        print(run)
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate", help="accuracy of a model on a task, intact and with heads ablated", formatter_class=_Formatter
    )
    _add_model_task_options(p)
    p.add_argument("--heads", default="", help="head set to ablate, e.g. L3H1,L12H7 (empty: intact only)")
    p.add_argument("--split", choices=["dist", "test"], default="test", help="which split to evaluate")
    p.add_argument("--json", action="store_true", help="print JSON")


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from cel_lens.evaluate import evaluate
    from cel_lens.heads import HeadSet
    from cel_lens.stats import accuracy_interval, mcnemar_exact, paired_bootstrap_ci

    model, task = _load(args)
    heads = HeadSet.parse(args.heads)
    sets = [HeadSet()] + ([heads] if heads else [])
    res = evaluate(model, task.split(args.split), sets, batch_size=args.batch_size, progress=not args.no_progress)
    out: dict = {"task": task.name, "split": args.split, "n": len(res.ids), "metric": task.metric}
    for name, row in zip(("intact", "ablated"), res.correct):
        lo, hi = accuracy_interval(row)
        out[name] = {"heads": str(sets[0 if name == "intact" else 1]), "accuracy": float(row.double().mean()), "ci": [lo, hi]}
    if heads:
        lo, hi = paired_bootstrap_ci(res.correct[0], res.correct[1], seed=args.seed)
        out["gain"] = out["ablated"]["accuracy"] - out["intact"]["accuracy"]
        out["gain_ci"] = [lo, hi]
        out["p_value"] = mcnemar_exact(res.correct[0], res.correct[1])
    if args.json:
        _print_json(out)
        return 0
    print(f"{task.name} / {args.split} (n={out['n']}, {task.metric})")
    for name in ("intact", "ablated"):
        if name in out:
            r = out[name]
            print(f"  {name:8s} {r['heads']:>20s}  {r['accuracy']:.4f}  95% CI [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]")
    if heads:
        print(f"  gain {out['gain']:+.4f}  95% CI [{out['gain_ci'][0]:+.4f}, {out['gain_ci'][1]:+.4f}]  McNemar p = {out['p_value']:.3g}")
    return 0


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="offline end-to-end search on the built-in model organism",
        formatter_class=_Formatter,
        description="Runs Algorithm 1 with default options on the shipped model organism (a small "
        "trained transformer whose two training tasks conflict on a shared feature), prints the "
        "held-out gain on task A with its CI, p-value and null, and the effect of the same ablation on "
        "task B. Needs no network and no GPU.",
    )
    p.add_argument("--out", default="runs/demo", help="run directory")
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples (default: the task's)")
    p.add_argument("--n-test", type=int, default=None, help="test examples (default: the task's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits, the null and the bootstrap")
    p.add_argument("--figures", default=None, help="write the figures here (default: OUT/figures)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--json", action="store_true", help="print the result (result.json keys + task_B_gain) as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _cmd_demo(args: argparse.Namespace) -> int:
    from cel_lens.demo import run_demo

    summary = run_demo(
        out=args.out, n_dist=args.n_dist, n_test=args.n_test, seed=args.seed,
        figures=None if args.no_figures else (args.figures or "default"), progress=not args.no_progress,
        verbose=not args.json,
    )
    if args.json:
        _print_json(summary)
    return 0


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="print a run's result table and write its figures",
        formatter_class=_Formatter,
        description="Reads RUN_DIR (result.json), prints the selected heads, accuracies, gain with CI, "
        "McNemar p-value and random-subset null, and writes the run's figures (gain heatmap with the "
        "ranked subsets; discovery vs test gain) as interactive HTML and static PNG.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory written by 'cel-lens search'")
    p.add_argument("--out", default=None, help="figure directory (default: RUN_DIR/figures)")
    p.add_argument("--no-figures", action="store_true", help="only print the result")
    p.add_argument("--json", action="store_true", help="print result.json (and the figure paths) as JSON")


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cel_lens.plots import format_result, result_dict, write_run_figures
    from cel_lens.runs import load_run

    if not Path(args.run_dir, "result.json").exists():
        raise FileNotFoundError(f"{args.run_dir} holds no result.json (not a run directory, or the search is unfinished)")
    run = load_run(args.run_dir)
    result = result_dict(run)
    figures: list = []
    if not args.no_figures:
        figures = write_run_figures(result, args.out or Path(args.run_dir) / "figures")
    if args.json:
        _print_json({**result, "figures": [str(f) for f in figures]})
        return 0
    print(f"run {run.path}")
    print(format_result(result))
    for f in figures:
        print(f"wrote {f}")
    return 0


# ---------------------------------------------------------------------------------------------
# theory
# ---------------------------------------------------------------------------------------------
def _add_theory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "theory",
        help="reproduce Section 4's theory numerically (prediction vs measurement, with CIs)",
        formatter_class=_Formatter,
        description="Trains the three-head, three-feature attention model of Section 4 from many small "
        "random initializations at once and prints each of the paper's predictions (Prop 4.1, Lemma B.1, "
        "Thm 4.2, Thm 4.3) next to the measured value and its 95% confidence interval.",
    )
    p.add_argument("--seeds", type=int, default=4000, help="random initializations trained at once")
    p.add_argument("--alpha", type=float, default=0.1, help="initialization scale (θ⁰ = α·G)")
    p.add_argument("--eta", type=float, default=0.5, help="gradient-descent step size")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--sweep-seeds", type=int, default=1000, help="seeds per α in the 2α, α, α/2 sweep")
    p.add_argument("--json", action="store_true", help="print {quantity: {predicted, measured, ci_low, ci_high, ...}} as JSON")
    p.add_argument("--figures", metavar="DIR", default=None, help="also write theory_trajectories and theory_escape figures to DIR")


def _cmd_theory(args: argparse.Namespace) -> int:
    from cel_lens.theory import save_theory_figures, theory_table

    table = theory_table(seeds=args.seeds, alpha=args.alpha, eta=args.eta, seed=args.seed, sweep_seeds=args.sweep_seeds)
    figures = save_theory_figures(table, args.figures) if args.figures else []
    if args.json:
        _print_json(table.to_json_dict())
        return 0
    print(table.format())
    for f in figures:
        print(f"wrote {f}")
    return 0


# ---------------------------------------------------------------------------------------------
# organism
# ---------------------------------------------------------------------------------------------
def _add_organism(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "organism",
        help="train, inspect or sweep the built-in model organism",
        formatter_class=_Formatter,
        description="The model organism is a one-layer attention-only transformer trained on two tasks "
        "that conflict on a shared feature (see docs/organism.md). 'train' retrains it from a seed and "
        "writes weights, tokenizer, training log and loss figure; 'info' describes the shipped (or a "
        "saved) organism and its ground-truth head; 'sweep' trains many seeds and tabulates how often a "
        "beneficial single-head ablation emerges.",
    )
    osub = p.add_subparsers(dest="organism_command", metavar="ACTION")
    osub.required = True
    t = osub.add_parser("train", help="train one organism from a seed", formatter_class=_Formatter)
    t.add_argument("--seed", type=int, default=0, help="training seed (initialization and data)")
    t.add_argument("--out", default=None, help="output directory (default: runs/organism_seed<S>)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change one OrganismConfig field, e.g. --set n_heads=6 (repeatable)")
    t.add_argument("--no-figure", action="store_true", help="skip the training figure")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    i = osub.add_parser("info", help="describe the shipped or a saved organism", formatter_class=_Formatter)
    i.add_argument("--path", default=None, help="organism directory (default: the shipped one)")
    i.add_argument("--json", action="store_true", help="print JSON")
    w = osub.add_parser("sweep", help="how often a beneficial head emerges over training seeds", formatter_class=_Formatter)
    w.add_argument("--seeds", default="0-8", help="seeds: '0-19' or '0,3,7'")
    w.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change one OrganismConfig field (repeatable)")
    w.add_argument("--n-test", type=int, default=2000, help="test examples per task")
    w.add_argument("--json", action="store_true", help="print the per-seed outcomes as JSON")


def _cmd_organism(args: argparse.Namespace) -> int:
    from cel_lens import organism_train as ot

    if args.organism_command == "train":
        config = ot.config_with(args.overrides)
        out = args.out or f"runs/organism_seed{args.seed}"
        summary = ot.train_and_save(args.seed, config, out, figure=not args.no_figure)
        if args.json:
            _print_json(summary)
        else:
            print(ot.format_summary(summary))
        return 0
    if args.organism_command == "info":
        info = ot.describe_organism(args.path)
        if args.json:
            _print_json(info)
        else:
            print(ot.format_summary(info))
        return 0
    seeds = ot.parse_seeds(args.seeds)
    outcomes = ot.emergence_sweep(seeds, ot.config_with(args.overrides), n_test=args.n_test)
    if args.json:
        _print_json([o.to_dict() for o in outcomes])
    else:
        print(ot.sweep_table(outcomes))
    return 0


# ---------------------------------------------------------------------------------------------
# registry of subcommands: name -> (add_parser, handler)
# ---------------------------------------------------------------------------------------------
_COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "models": (_add_models, _cmd_models),
    "search": (_add_search, _cmd_search),
    "evaluate": (_add_evaluate, _cmd_evaluate),
    "demo": (_add_demo, _cmd_demo),
    "tasks": (_add_tasks, _cmd_tasks),
    "report": (_add_report, _cmd_report),
    "theory": (_add_theory, _cmd_theory),
    "organism": (_add_organism, _cmd_organism),
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

"""``cel-lens evaluate``: accuracy of a model on a task, intact and with heads ablated."""

from __future__ import annotations

import argparse
import sys

from cel_lens.cli.common import Formatter, add_model_task_options, load_model_and_task, print_json
from cel_lens.config import PRECISIONS, SearchConfig

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "evaluate", help="accuracy of a model on a task, intact and with heads ablated", formatter_class=Formatter
    )
    add_model_task_options(p)
    p.add_argument("--heads", default="", help="head set to ablate, e.g. L3H1,L12H7 (empty: intact only)")
    p.add_argument("--split", choices=["dist", "test"], default="test",
                   help="which split to evaluate (test: recorded in the seal's ledger, and a later search of this "
                   "model on this task reports that D_test was read before its selection; explore on dist)")
    p.add_argument("--precision", choices=list(PRECISIONS), default=SearchConfig.precision,
                   help="compute precision: bf16 recomputes in float32 every decision within its error bound (the same "
                   "bits); auto: bf16 for a bfloat16 model, or on exact-match tasks for a float32 one of 20M+ parameters on a "
                   "CPU with native bf16")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.evaluation import evaluate
    from cel_lens.evaluation.context import EvalContext
    from cel_lens.evaluation.seal import SEAL_WARNING, SealReader
    from cel_lens.heads import HeadSet
    from cel_lens.model.identity import model_id
    from cel_lens.stats import accuracy_interval, mcnemar_exact, paired_bootstrap_ci

    model, task = load_model_and_task(args)
    heads = HeadSet.parse(args.heads)
    sets = [HeadSet()] + ([heads] if heads else [])
    if args.split == "test":  # one line, not a Python warning with its source line
        print("note: " + SEAL_WARNING.format(task=task.name, model=model_id(model)), file=sys.stderr)
    context = EvalContext.from_environment(args.precision, reader=SealReader("cel-lens evaluate"))
    res = evaluate(model, task.split(args.split), sets, batch_size=args.batch_size, progress=args.progress, context=context)
    out: dict = {"task": task.name, "split": args.split, "n": len(res.ids), "metric": task.metric,
                 "chat_template": bool(res.chat_template), "precision": res.precision,
                 "recomputed_share": res.recomputed_share}
    for name, row in zip(("intact", "ablated"), res.correct):
        lo, hi = accuracy_interval(row)
        out[name] = {"heads": str(sets[0 if name == "intact" else 1]), "accuracy": float(row.double().mean()), "ci": [lo, hi]}
    if heads:
        lo, hi = paired_bootstrap_ci(res.correct[0], res.correct[1], seed=args.seed)
        out["gain"] = out["ablated"]["accuracy"] - out["intact"]["accuracy"]
        out["gain_ci"] = [lo, hi]
        out["p_value"] = mcnemar_exact(res.correct[0], res.correct[1])
    if args.json:
        print_json(out)
        return 0
    chat = ", chat template" if res.chat_template else ""
    print(f"{task.name} / {args.split} (n={out['n']}, {task.metric}{chat})")
    for name in ("intact", "ablated"):
        if name in out:
            r = out[name]
            print(f"  {name:8s} {r['heads']:>20s}  {r['accuracy']:.4f}  95% CI [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]")
    if heads:
        print(f"  gain {out['gain']:+.4f}  95% CI [{out['gain_ci'][0]:+.4f}, {out['gain_ci'][1]:+.4f}]  McNemar p = {out['p_value']:.3g}")
    return 0

"""bf16 against float32 on SmolLM2-135M-Instruct: the error the bound covers, and what bf16 costs.

    python -m benchmarks.precision                          # Arithmetic 200, BoolQ 100, MBPP 3
    python -m benchmarks.precision --n-arith 40 --n-boolq 20 --n-mbpp 2   # a quick look

Two parts, written to ``benchmarks/precision.json`` (``docs/precision.md`` quotes them):

* ``error``: every scored position's logits in float32 and under bf16 autocast (the same batches,
  intact and with heads ablated): the largest change of the logit differences decisions are made
  by (top-1 minus top-2; target minus best other; for BoolQ `` yes`` minus `` no``), of any two
  logits (max minus min of the change), and of log-probabilities;
  :data:`~cel_lens.evaluation.precision.LOGIT_BOUND` must stay above the first with room to spare.
* ``evaluate``: :func:`cel_lens.evaluate` in ``float32`` and in ``bf16`` on the same splits and
  head sets: CPU and wall seconds, the decisions compared and how many differ (must be 0), the
  share recomputed in float32.

One torch thread; CPU seconds are the measure (the machine may be shared), wall beside them.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from cel_lens.evaluation.precision import LOGIT_BOUND

HEADS = ["intact", "L3H1", "L20H4", "L5H2+L12H7"]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tasks(n_arith: int, n_boolq: int, n_mbpp: int) -> dict[str, Any]:
    import cel_lens as cl

    return {
        "arithmetic": cl.load_task("arithmetic", n_dist=n_arith, n_test=10).dist,
        "boolq": cl.load_task("boolq", n_dist=n_boolq, n_test=10, dist_from="validation").dist,
        # the completions are compared; the judge is a plain function of them (no model code runs)
        "mbpp": replace(cl.load_task("mbpp", n_dist=n_mbpp, n_test=2).dist, judge=lambda ex, c: "return" in c),
    }


def error_heads(model, n_random: int, seed: int = 0) -> list[str]:
    """:data:`HEADS` plus ``n_random`` single heads drawn uniformly over every layer (seeded): the
    variants a stage-1 scan evaluates, for the error part."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    picks = torch.randperm(cfg.n_layers * cfg.n_heads, generator=g)[:n_random].tolist()
    return HEADS + [f"L{i // cfg.n_heads}H{i % cfg.n_heads}" for i in sorted(picks)]


YES_NO_GAPS = (0.25, 0.5, 1.0, 2.0)
"""Gaps at which the error part reports the share of BoolQ decisions whose float32 ` yes` - ` no`
gap is within them (what a recompute bound of that size would recompute)."""


def logit_error(model, split, yes_no: bool = False, heads: list[str] = HEADS) -> dict[str, float]:
    """Largest changes bf16 autocast makes at the scored positions of ``split`` (see the module docstring)."""
    import cel_lens.evaluation.teacher_forced as tf
    from cel_lens.evaluation import evaluate

    seen: list[torch.Tensor] = []  # filled by the wrapper below
    original = tf.unembed

    def recording(m, vectors, **kw):
        out = original(m, vectors, **kw)
        seen.append(out.float().clone())
        return out

    tf.unembed = recording
    logits = {}
    try:
        for name, ctx in (("float32", torch.autocast("cpu", enabled=False)), ("bf16", torch.autocast("cpu", dtype=torch.bfloat16))):
            seen.clear()
            with ctx:
                evaluate(model, split, heads, progress=False, precision="float32")
            logits[name] = torch.cat(seen)
    finally:
        tf.unembed = original
    a, b = logits["float32"], logits["bf16"]
    d = b - a
    top2 = a.topk(2, dim=-1).indices
    pair = (d.gather(-1, top2[:, :1]) - d.gather(-1, top2[:, 1:]))[:, 0].abs()
    lp = (b.log_softmax(-1) - a.log_softmax(-1)).abs()
    near = a >= a.amax(-1, keepdim=True) - 2 * LOGIT_BOUND  # the tokens a decision within the bound is between
    near_range = d.masked_fill(~near, float("-inf")).amax(-1) - d.masked_fill(~near, float("inf")).amin(-1)
    out = {
        "positions": int(a.shape[0]),
        "max_top1_top2_change": float(pair.max()),
        "q999_top1_top2_change": float(pair.quantile(0.999)),
        "max_near_top_pair_change": float(near_range.max()),
        "max_any_pair_change": float((d.amax(-1) - d.amin(-1)).max()),
        "max_logit_change": float(d.abs().max()),
        "max_logprob_change_top5": float(lp.gather(-1, a.topk(5, dim=-1).indices).max()),
        "logit_std_mean": float(a.std(-1).mean()),
    }
    if yes_no:
        tok = model.tokenizer
        yes, no = tok.encode(" yes", add_special_tokens=False)[-1], tok.encode(" no", add_special_tokens=False)[-1]
        change = (d[:, yes] - d[:, no]).abs()
        gap = (a[:, yes] - a[:, no]).abs()
        low = torch.minimum(a[:, yes], a[:, no]) - a.amax(-1)
        out["max_yes_no_change"] = float(change.max())
        out["q999_yes_no_change"] = float(change.quantile(0.999))
        out["yes_no_gap_quantiles"] = {str(q): float(gap.quantile(q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)}
        out["share_yes_no_gap_within"] = {str(b): float((gap <= b).float().mean()) for b in YES_NO_GAPS}
        out["yes_no_lower_below_top"] = {"max": float(-low.min()), "median": float(-low.median())}
    out["heads"] = len(heads)
    return out


def compare(model, split, **kwargs: Any) -> dict[str, Any]:
    """``evaluate`` in float32 and in bf16: seconds, decisions compared and differing, share recomputed."""
    from cel_lens.evaluation import evaluate

    rec: dict[str, Any] = {}
    results = {}
    for precision in ("float32", "bf16"):
        c0, w0 = _cpu(), time.time()
        results[precision] = evaluate(model, split, HEADS, progress=False, precision=precision, **kwargs)
        rec[f"{precision}_cpu_s"] = round(_cpu() - c0, 2)
        rec[f"{precision}_wall_s"] = round(time.time() - w0, 2)
    a, b = results["float32"], results["bf16"]
    rec["ratio_cpu"] = round(rec["float32_cpu_s"] / max(rec["bf16_cpu_s"], 1e-9), 2)
    rec["decisions"] = int(a.correct.numel())
    rec["differ"] = int((a.correct != b.correct).sum())
    rec["recomputed_share"] = round(b.recomputed_share, 4)
    rec["accuracy"] = [round(x, 4) for x in a.accuracy.tolist()]
    if a.completions is not None:
        rec["completions_differ"] = sum(x != y for va, vb in zip(a.completions, b.completions) for x, y in zip(va, vb))
    return rec


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-arith", type=int, default=200)
    parser.add_argument("--n-boolq", type=int, default=100)
    parser.add_argument("--n-mbpp", type=int, default=3)
    parser.add_argument("--mbpp-tokens", type=int, default=96, help="max_new_tokens of the MBPP prompts")
    parser.add_argument("--n-error", type=int, default=60, help="examples of each split whose logits are compared")
    parser.add_argument("--error-heads", type=int, default=0,
                        help="random single heads (over every layer) the error part adds to the fixed head sets")
    parser.add_argument("--error-tasks", default="arithmetic,boolq", help="the tasks the error part measures")
    parser.add_argument("--parts", default="error,evaluate")
    parser.add_argument("--tasks", default="arithmetic,boolq,mbpp", help="the tasks the evaluate part compares")
    parser.add_argument("--out", default=str(Path(__file__).with_name("precision.json")))
    args = parser.parse_args(argv)
    import cel_lens as cl

    torch.set_num_threads(1)
    model = cl.load_model("smollm2-135m")
    tasks = _tasks(args.n_arith, args.n_boolq, args.n_mbpp)
    out = Path(args.out)
    record: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}  # parts run apart merge
    record.update({"model": "smollm2-135m", "loader": type(model).__name__, "heads": HEADS, "torch": torch.__version__})
    parts = args.parts.split(",")
    if "error" in parts:
        heads = error_heads(model, args.error_heads)
        record.setdefault("error", {})
        for name in args.error_tasks.split(","):
            record["error"][name] = logit_error(model, tasks[name].subset(args.n_error), yes_no=name == "boolq", heads=heads)
        record.setdefault("commands", {})["error"] = "python -m benchmarks.precision " + " ".join(argv if argv is not None else sys.argv[1:])
        print(json.dumps(record["error"], indent=1), flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    if "evaluate" in parts:
        record.setdefault("evaluate", {})
        for name in args.tasks.split(","):
            split = tasks[name]
            kwargs = {"max_new_tokens": args.mbpp_tokens, "batch_size": 3} if name == "mbpp" else {}
            record["evaluate"][name] = {"n": len(split), **compare(model, split, **kwargs)}
            print(name, json.dumps(record["evaluate"][name]), flush=True)
            Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    main()

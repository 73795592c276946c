"""bf16 against float32 on a slice of an exact stage-1 scan of SmolLM2-135M-Instruct, one thread.

    python -m benchmarks.precision_scan --task arithmetic --n 48 --heads-per-layer 1
    python -m benchmarks.precision_scan --task boolq --n 24 --heads-per-layer 1

What a search's stage 1 does, on fewer prompts and heads: an activation store of the split
(float32), then :func:`cel_lens.evaluate` of single heads spread over every layer (``--heads-per-layer``
heads per layer, each resuming at its layer), in ``float32`` and in ``bf16`` (the bfloat16 weight
copy, its float32 re-checks included). Written to ``benchmarks/precision_scan.json``:

* CPU seconds of each (process CPU time; wall beside it, the machine may be shared), their ratio,
  the decisions and how many differ (must be 0), the share re-checked;
* the share the earlier rule (every exact-match margin within ``LOGIT_BOUND``) would re-check on
  the same bf16 margins, for comparison;
* the bound: the share of float32's CPU time in matrix products (a profile of one evaluation),
  the bf16 speed-up of a matrix product of the model's shapes on this CPU, and the ratio a scan
  would reach if every product ran at that speed-up and nothing else changed;
* the bf16 evaluation's profile (the operators taking the most CPU time).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import torch

TOP_OPS = 10


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def matmul_speedup(d_model: int, d_mlp: int, rows: int = 2048, repeat: int = 5) -> dict[str, float]:
    """One-thread time of ``[rows, d_model] x [d_model, d_mlp]`` in float32 and in bfloat16."""
    out = {}
    for name, dtype in (("float32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(rows, d_model).to(dtype), torch.randn(d_mlp, d_model).to(dtype)
        torch.nn.functional.linear(a, b)
        t0 = time.thread_time()
        for _ in range(repeat):
            torch.nn.functional.linear(a, b)
        out[f"{name}_ms"] = round((time.thread_time() - t0) / repeat * 1e3, 2)
    out["speedup"] = round(out["float32_ms"] / out["bf16_ms"], 2)
    return out


def _profile(fn) -> tuple[list[dict[str, Any]], float]:
    """The top operators of ``fn()`` by self CPU time, and the share of matrix products."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) or 1.0
    products = sum(e.self_cpu_time_total for e in rows if e.key in ("aten::mm", "aten::addmm", "aten::bmm"))
    top = [{"op": e.key, "share": round(e.self_cpu_time_total / total, 3)} for e in rows[:TOP_OPS]]
    return top, products / total


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="arithmetic", choices=["arithmetic", "boolq"])
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--heads-per-layer", type=int, default=1)
    parser.add_argument("--no-profile", action="store_true", help="skip the profiles, the bound and the earlier rule's share (a shorter run)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("precision_scan.json")))
    args = parser.parse_args(argv)
    import cel_lens as cl
    from cel_lens.evaluation import evaluate
    from cel_lens.evaluation.store import ActivationStore

    torch.set_num_threads(1)
    model = cl.load_model("smollm2-135m")
    opts = {"dist_from": "validation"} if args.task == "boolq" else {}
    split = cl.load_task(args.task, n_dist=args.n, n_test=10, **opts).dist
    cfg = model.cfg
    heads = [f"L{l}H{(l * 7 + k * 3) % cfg.n_heads}" for l in range(cfg.n_layers) for k in range(args.heads_per_layer)]
    store = ActivationStore.build(model, split, progress=False)
    rec: dict[str, Any] = {"task": args.task, "n": args.n, "head_sets": len(heads), "torch": torch.__version__}
    results = {}
    for precision in ("float32", "bf16"):
        evaluate(model, split.subset(2), heads[:2], progress=False, precision=precision)  # the copy is made here
        c0, w0 = _cpu(), time.time()
        results[precision] = evaluate(model, split, heads, store=store, progress=False, precision=precision)
        rec[f"{precision}_cpu_s"] = round(_cpu() - c0, 1)
        rec[f"{precision}_wall_s"] = round(time.time() - w0, 1)
    a, b = results["float32"], results["bf16"]
    rec["ratio_cpu"] = round(rec["float32_cpu_s"] / rec["bf16_cpu_s"], 2)
    rec["decisions"], rec["differ"] = int(a.correct.numel()), int((a.correct != b.correct).sum())
    rec["recomputed_share"] = round(b.recomputed_share, 4)
    if not args.no_profile:
        sub = split.subset(min(args.n, 16))
        _, share = _profile(lambda: evaluate(model, sub, heads, progress=False, precision="float32"))
        rec["float32_product_share"] = round(share, 3)
        rec["matmul"] = matmul_speedup(int(cfg.d_model), int(cfg.d_mlp))
        rec["bound_ratio"] = round(1 / ((1 - share) + share / rec["matmul"]["speedup"]), 2)
        rec["bf16_profile"], _ = _profile(lambda: evaluate(model, sub, heads, progress=False, precision="bf16"))
    if args.task == "arithmetic" and not args.no_profile:
        rec["earlier_rule_share"] = _earlier_share(model, split, heads, store)
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.exists() else {}
    record[args.task] = rec
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(rec), flush=True)
    return rec


def _earlier_share(model, split, heads, store) -> float:
    """The share of the same scan's decisions the earlier exact-match rule re-checks (every bf16
    margin within ``LOGIT_BOUND``): the same bf16 evaluation with the tight bound never confirmed."""
    import cel_lens.evaluation.precision_tight as tight
    from cel_lens.evaluation import evaluate

    before = tight.TIGHT_CHECK_MIN
    tight.TIGHT_CHECK_MIN = 1 << 62
    try:
        return round(evaluate(model, split, heads, store=store, progress=False, precision="bf16").recomputed_share, 4)
    finally:
        tight.TIGHT_CHECK_MIN = before


if __name__ == "__main__":
    main()

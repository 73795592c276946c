"""SmolLM2-135M-Instruct at real sizes on a CPU: exact stage 1 in float32 and bf16, today's FLOP count
against the bound with its savings, the shared-prefix saving, the pre-screen's recall of exact's
pool, and a ``--quick`` search against its ``--plan``; one command writes the section of RESULTS.md.

    python -m benchmarks.smollm2_speed                       # issue 35's sizes: Arithmetic 200, BoolQ 100
    python -m benchmarks.smollm2_speed --n-arith 32 --n-boolq 6 --quick-n 16   # what fits a loaded machine

Parts (``--parts``, default all; each part's record is merged into ``benchmarks/smollm2_speed.json``,
so parts run apart render one section):

* ``arith``, ``boolq``: exact stage 1 (the intact model and every head alone, one oracle call per
  layer chunk) on Arithmetic and on BoolQ with D_dist drawn from validation, in float32 and, where
  ``cel_lens.evaluation.precision`` is committed, in bf16 with float32 re-checks: CPU and wall
  seconds, per-example decisions compared, share recomputed. Then the pre-screen on the same D_dist:
  attribution (measured) and a subsample scan (the full scan's decisions at the subsample's
  positions: the decisions a subsample scan makes), each at several kept fractions, against exact's
  pools of 6 and 12; today's FLOP count and the bound (:mod:`benchmarks.scan_bound`) at the float32
  and bf16 matmul peaks.
* ``plans``: ``cl.plan`` in float32 on both tasks at issue 35's sizes: its calibration's CPU seconds
  (under a minute on BoolQ) and its stage-1 CPU estimate per example against the measured scan's.
* ``planted``: the pre-screen's recall on planted tiny models (:func:`cel_lens.testing.planted_task`).
* ``prefix``: ``benchmarks.prefix``'s measure function, when that module exists.
* ``prompt_prefix``: the shared prompt start's FLOP saving on the prompt passes of MBPP's and
  Arithmetic's real prompts (token ids only).
* ``quick``: ``cl.plan`` then ``cl.search`` with :data:`cel_lens.config.QUICK` (exact stage 1) on
  Arithmetic in the default precision, CPU and wall seconds against the plan (``--quick-n`` cuts
  both splits), on the threads ``cel-lens search`` takes (the idle cores).

One torch thread per process (but the quick part, which runs last whatever ``--parts`` says: its
extra threads outlive it); CPU seconds are the measure (the machine is
shared), wall beside them. ``--resume-dir DIR`` saves the exact scans' chunks as they return, so a
BoolQ part of several CPU hours survives an interrupted process (or, with DIR committed, a change
of machine); each chunk's seconds are the ones measured when it ran (:mod:`benchmarks.scan_chunks`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks.paths import MODEL, checkpoint_dir
from benchmarks.scan_chunks import cpu_description

OUT = Path(__file__).with_name("smollm2_speed.json")
KEEP = (0.1, 0.25, 0.5)
POOLS = (6, 12)
PARTS = ("arith", "boolq", "plans", "planted", "prefix", "prompt_prefix", "quick")


def clocks() -> tuple[float, float]:
    """``(cpu, wall)`` now: this process's CPU seconds (every thread) and the wall clock."""
    return time.process_time(), time.perf_counter()


def since(t: tuple[float, float]) -> dict[str, float]:
    """CPU and wall seconds since ``t``."""
    cpu, wall = clocks()
    return {"cpu_s": cpu - t[0], "wall_s": wall - t[1]}


def precision_landed() -> bool:
    """Whether ``cel_lens/evaluation/precision.py`` is in git history (not only in a working tree)."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "log", "--oneline", "-1", "--", "cel_lens/evaluation/precision.py"], cwd=root,
                         capture_output=True, text=True)
    return out.returncode == 0 and bool(out.stdout.strip())


def precision_context(precision: str) -> tuple[Any, Callable[[], dict]]:
    """An evaluation context computing in ``precision``, and the reader of its recompute tally."""
    from cel_lens.evaluation.context import EvalContext
    from cel_lens.evaluation.precision import recompute_summary

    context = EvalContext(precision=precision)
    return context, lambda: recompute_summary(context.tally)


def exact_scan(model, task, precision: str, folder: Optional[Path] = None) -> dict[str, Any]:
    """Exact stage 1 (intact and every head alone on D_dist) in ``precision``: seconds, the
    per-example decisions ``[1 + heads, n]`` and the recompute tally. With ``folder``, the heads'
    chunks are saved as they return and a rerun resumes from them (:mod:`benchmarks.scan_chunks`)."""
    from benchmarks.scan_chunks import scan, sum_tallies, tally_delta
    from cel_lens.backends.local import LocalOracle
    from cel_lens.heads import Head, HeadSet
    from cel_lens.oracle import call_oracle
    from cel_lens.selection.memo import MemoOracle

    context, tally = precision_context(precision)
    oracle = MemoOracle(LocalOracle(model, task, batch_size=8, progress=False, context=context))
    L, H = oracle.n_layers, oracle.n_heads
    t = clocks()
    intact = oracle.evaluate("dist", [HeadSet()], stage="intact")
    intact_s = since(t)
    intact_tally = tally() if tally is not None else None
    heads = [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)]
    out = scan(lambda sets: call_oracle(oracle, "dist", sets, "stage1"), heads, H * 3, folder=folder,
               key=f"{task.dist.content_hash[:16]}-{precision}", tally=tally)
    return {"intact": intact_s, "scan": {"cpu_s": out["cpu_s"], "wall_s": out["wall_s"]},
            "bits": torch.cat([intact, out["bits"]]), "chunks_resumed": out["chunks_resumed"],
            "recompute": None if tally is None else sum_tallies([tally_delta({}, intact_tally), out["recompute"]])}


def recall(exact: torch.Tensor, kept: set, pool: int) -> float:
    """Recall of exact's pool of ``pool`` heads, up to ties: the share of its scores that the
    pre-screen's pool (the best ``pool`` of the kept heads by exact score) also holds (a multiset
    intersection: a kept head tied with a screened-out one in exact's pool recovers it; stage-1
    gains are multiples of 1/n, so ties at the pool's boundary are common)."""
    from collections import Counter

    from cel_lens.selection import candidate_pool

    only = torch.full_like(exact, float("nan"))
    for h in kept:
        only[h.layer, h.head] = exact[h.layer, h.head]
    ours = Counter(float(exact[h.layer, h.head]) for h in candidate_pool(only, pool) if h in kept)
    theirs = Counter(float(exact[h.layer, h.head]) for h in candidate_pool(exact, pool))
    return sum((ours & theirs).values()) / pool


def prescreen_rows(model, task, bits: torch.Tensor, scan_cpu_s: float, L: int, H: int) -> list[dict[str, Any]]:
    """Recall of exact's pools and the cost saved, per first pass and kept fraction (module docstring)."""
    from cel_lens.heads import Head
    from cel_lens.scoring.attribution import attribution_scores
    from cel_lens.scoring.prescreen import kept_count
    from cel_lens.selection import candidate_pool
    from cel_lens.splits import subsplit, subsplit_indices

    n = bits.shape[1]
    acc = bits.double().mean(1)
    exact = (acc[1:] - acc[0]).reshape(L, H)
    t = clocks()
    attribution = attribution_scores(model, task.dist, batch_size=8, progress=False).double()
    attr_s = since(t)
    m = max(1, min(32, n // 4))
    idx = subsplit_indices(subsplit(0, 0, m), n)
    sub = bits[:, idx].double().mean(1)
    firsts = {"attribution": (attribution, attr_s["cpu_s"]), f"subsample {m}": ((sub[1:] - sub[0]).reshape(L, H),
                                                                                scan_cpu_s * m / n)}
    weight = torch.tensor([L - l for l in range(L) for _ in range(H)], dtype=torch.float64)  # a head's layers run
    rows = []
    for name, (first, first_cpu) in firsts.items():
        order = candidate_pool(first, L * H)
        for keep in KEEP:
            kept = order[: kept_count(L * H, keep, max(POOLS))]
            kept_cost = float(weight[[h.layer * H + h.head for h in kept]].sum() / weight.sum()) * scan_cpu_s
            row = {"first": name, "keep": keep, "kept": len(kept), "first_cpu_s": first_cpu,
                   "cost_cpu_s": first_cpu + kept_cost, "saving": scan_cpu_s / (first_cpu + kept_cost)}
            for p in POOLS:
                pool = candidate_pool(exact, p)
                row[f"recall_{p}"] = recall(exact, set(kept), p)
                row[f"missed_{p}"] = [str(h) for h in pool if h not in set(kept)]
            rows.append(row)
    return rows


def bound_record(model, task, scan_cpu_s: float) -> dict[str, Any]:
    """Today's FLOP count and the bound with its savings, in seconds at the float32 and bf16 peaks."""
    from benchmarks.floor import encode_for_floor
    from benchmarks.limit import Shape
    from benchmarks.scan_bound import matmul_peaks, scan_bound

    shape = Shape.from_hf_config(json.loads((checkpoint_dir(MODEL) / "config.json").read_text()))
    rec = scan_bound(shape, encode_for_floor(model, task.dist))
    rec.update(matmul_peaks(d_in=shape.d_model, d_out=shape.d_mlp))
    for what in ("today", "bound"):
        for peak in ("fp32", "bf16"):
            rec[f"{what}_s_{peak}"] = rec[f"{what}_gflop"] / rec[f"{peak}_gflops"]
    rec["scan_cpu_s"] = scan_cpu_s
    return rec


def task_part(model, name: str, n: int, folder: Optional[Path] = None) -> dict[str, Any]:
    """One task's record: stage 1 in each precision, the pre-screen, the bound (module docstring)."""
    import cel_lens as cl

    options = {"dist_from": "validation"} if name == "boolq" else {}
    task = cl.load_task(name, n_dist=n, n_test=1, seed=0, **options)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    rec: dict[str, Any] = {"task": name, "n_dist": n, "heads": L * H, "bf16_landed": precision_landed()}
    f32 = exact_scan(model, task, "float32", folder)
    rec["float32"] = {k: v for k, v in f32.items() if k != "bits"}
    if rec["bf16_landed"]:
        bf = exact_scan(model, task, "bf16", folder)
        rec["bf16"] = {k: v for k, v in bf.items() if k != "bits"}
        rec["bf16"]["decisions"] = int(bf["bits"].numel())
        rec["bf16"]["differing"] = int((bf["bits"] != f32["bits"]).sum())
    rec["prescreen"] = prescreen_rows(model, task, f32["bits"], f32["scan"]["cpu_s"], L, H)
    rec["bound"] = bound_record(model, task, f32["scan"]["cpu_s"])
    return rec


def planted_part() -> dict[str, Any]:
    """The pre-screen's recall of exact's pool on planted tiny models (4 layers x 8 heads)."""
    from cel_lens.backends.local import LocalOracle
    from cel_lens.selection.memo import MemoOracle
    from cel_lens.scoring import exact_scores
    from cel_lens.scoring.prescreen import PrescreenOptions, prescreen_scores
    from cel_lens.selection import candidate_pool
    from cel_lens.testing import planted_task, tiny_hooked_transformer

    rows = []
    for seed, heads in ((0, "L1H2"), (1, "L2H5"), (2, "L0H3+L3H1")):
        model = tiny_hooked_transformer(n_layers=4, n_heads=8, n_key_value_heads=4, seed=seed)
        task = planted_task(model, n=48, heads=heads, name=f"planted_{seed}")
        oracle = MemoOracle(LocalOracle(model, task, batch_size=16, progress=False))
        exact = exact_scores(oracle)
        for first in ("attribution", "subsample"):
            for keep in KEEP:
                out = prescreen_scores(oracle, PrescreenOptions(first, keep, 12, pool_size=max(POOLS)), model=model,
                                       split=task.dist)
                row = {"model": f"seed {seed}, planted {heads}", "first": first, "keep": keep, "kept": len(out.kept)}
                for p in POOLS:
                    row[f"recall_{p}"] = recall(exact, set(out.kept), p)
                    row[f"pool_equal_{p}"] = candidate_pool(out.scores, p) == candidate_pool(exact, p)
                rows.append(row)
    return {"rows": rows}


def prefix_part(model, n_arith: int, n_mbpp: int) -> dict[str, Any]:
    """``benchmarks.prefix``'s measure function, when present, on ``n_arith`` Arithmetic and
    ``n_mbpp`` MBPP prompts."""
    try:
        from benchmarks import prefix
    except ImportError:
        return {"missing": "benchmarks/prefix.py is not in this tree"}
    fn = getattr(prefix, "measure", None)
    if fn is None:
        return {"missing": "benchmarks/prefix.py has no measure function"}
    return {"result": fn(model, n_arith=n_arith, n_mbpp=n_mbpp)}


def prompt_prefix_part(model, n_mbpp: int) -> dict[str, Any]:
    """The prefix saving in FLOPs of a stage-1 scan's prompt passes (:func:`benchmarks.scan_bound.scan_bound`,
    each prompt scored at its last position) on MBPP's and Arithmetic's real D_dist prompts: counted
    from the token ids, nothing run but the tokenizer."""
    import cel_lens as cl
    from benchmarks.limit import Shape
    from benchmarks.scan_bound import scan_bound
    from cel_lens.evaluation.generation import generation_prompts

    shape = Shape.from_hf_config(json.loads((checkpoint_dir(MODEL) / "config.json").read_text()))
    out = {}
    for name, n in (("mbpp", n_mbpp), ("arithmetic", 200)):
        task = cl.load_task(name, n_dist=n, n_test=1, seed=0)
        prompts = generation_prompts(model, task.dist, False, 256) if name == "mbpp" else None
        if prompts is None:
            from cel_lens.evaluation.encode import encode_prompt

            prompts = [encode_prompt(model, ex.prompt) for ex in task.dist]
        rec = scan_bound(shape, [(p[:-1], [[p[-1]]]) for p in prompts])
        out[name] = {"n": len(prompts), "mean_tokens": rec["mean_tokens"], "prefix_tokens": rec["prefix_tokens"],
                     "prefix_saving": rec["prefix_saving"]}
    return out


def quick_part(model, n: Optional[int], threads: int) -> dict[str, Any]:
    """``cl.plan`` then ``cl.search`` with the ``--quick`` preset on Arithmetic (exact stage 1), on
    ``threads`` torch threads: what ``cel-lens search`` takes (the cores the machine left idle when
    this process started, before its own work counted in the load)."""
    from cel_lens.config import QUICK

    options = {**QUICK, **({"n_dist": n, "n_test": n} if n else {})}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rec = _quick_run(model, options)
    finally:
        torch.set_num_threads(before)
    return {**rec, "threads": threads}


def _quick_run(model, options: dict[str, Any]) -> dict[str, Any]:
    """The plan and the search of :func:`quick_part`, timed."""
    import tempfile

    import cel_lens as cl

    t = clocks()
    plan = cl.plan(model, "arithmetic", scorer="exact", progress=False, **options)
    plan_s = since(t)
    with tempfile.TemporaryDirectory() as out:
        t = clocks()
        run = cl.search(model, "arithmetic", scorer="exact", out=Path(out) / "run", progress=False, **options)
        search_s = since(t)
        # the default precision ("auto") as the search resolved it, and its recompute tally
        precision = json.loads((Path(out) / "run" / "manifest.json").read_text()).get("precision", {})
    return {"options": options, "precision": precision, "plan_cost": plan_s, "plan_cpu_s": plan.seconds(), "plan_wall_s": plan.wall_seconds(),
            "plan_share": plan.cpu_share, "plan_calibration_cpu_s": plan.calibration_cpu_s, "search": search_s,
            "heads": run.result.heads, "search_estimate_cpu_s": run.plan.seconds() if run.plan else None}


def plans_part(model, n_arith: int, n_boolq: int) -> dict[str, Any]:
    """``cl.plan`` (float32, exact stage 1) on both tasks at issue 35's sizes (``n_arith``,
    ``n_boolq``): what its calibration cost (it must stay under a CPU minute on BoolQ) and its stage-1
    CPU estimate, which the section sets per example against the measured float32 scan."""
    import cel_lens as cl

    out = {}
    for name, n in (("arith", n_arith), ("boolq", n_boolq)):
        options = {"dist_from": "validation"} if name == "boolq" else {}
        task = cl.load_task("arithmetic" if name == "arith" else "boolq", n_dist=n, n_test=1, seed=0, **options)
        t = clocks()
        plan = cl.plan(model, task, scorer="exact", precision="float32", k=1, pool_size=12, progress=False)
        cost = since(t)
        stage1 = next(s for s in plan.stages if s.name.startswith("stage 1"))
        out[name] = {"n_dist": n, "cost": cost, "calibration_cpu_s": plan.calibration_cpu_s, "share": plan.cpu_share,
                     "stage1_cpu_s": plan.seconds(stage1), "stage1_wall_s": plan.wall_seconds(stage1)}
    return out


def ordered_parts(spec: str) -> list[str]:
    """The parts named in ``spec`` (comma-separated), ``quick`` last whatever its place: its torch
    threads beyond the first stay alive after it and keep a core busy (one was measured at half a core
    with the process back on one thread), which the later parts' CPU clocks would count as their own."""
    parts = [x for x in spec.split(",") if x]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    return [p for p in parts if p != "quick"] + ["quick"] * ("quick" in parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=MODEL, help="model name (default: %(default)s, loaded by name)")
    p.add_argument("--n-arith", type=int, default=200, help="Arithmetic D_dist examples (issue 35: 200)")
    p.add_argument("--n-boolq", type=int, default=100, help="BoolQ D_dist examples, from validation (issue 35: 100)")
    p.add_argument("--quick-n", type=int, default=None, help="cut the --quick search's splits to this size (default: QUICK's)")
    p.add_argument("--prefix-n-arith", type=int, default=100, help="Arithmetic prompts of the prefix part")
    p.add_argument("--prefix-n-mbpp", type=int, default=4, help="MBPP prompts of the prefix part")
    p.add_argument("--plan-n-arith", type=int, default=200, help="Arithmetic D_dist of the plans part (issue 35: 200)")
    p.add_argument("--plan-n-boolq", type=int, default=100, help="BoolQ D_dist of the plans part (issue 35: 100)")
    p.add_argument("--quick-threads", type=int, default=None,
                   help="torch threads of the quick part (default: what cel-lens search would take now)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run (default: all)")
    p.add_argument("--record", type=Path, default=OUT, help="the JSON record parts merge into (default: %(default)s)")
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="records of parts run apart (e.g. in parallel processes) merged into --record first")
    p.add_argument("--resume-dir", type=Path, default=None,
                   help="save the exact scans' chunks here as they return; a rerun resumes from them")
    p.add_argument("--no-write", action="store_true", help="print the section; write neither the JSON nor RESULTS.md")
    args = p.parse_args()
    import cel_lens as cl
    from benchmarks.smollm2_speed_report import render

    from cel_lens.threads import ENV as THREADS_ENV, choose_threads

    # as `cel-lens search` at its start, before any work here (CEL_LENS_THREADS pins it), unless given
    quick_threads = args.quick_threads or choose_threads(look_at_load=True)
    os.environ.pop(THREADS_ENV, None)  # cl.evaluate re-applies a pinned count at each call: the other parts
    torch.set_num_threads(1)            # would run on it, where they are measured on one thread
    rec = json.loads(args.record.read_text()) if args.record.exists() else {}
    for other in args.merge:
        rec.update(json.loads(other.read_text()))
    parts = ordered_parts(args.parts)
    run = f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, pid {os.getpid()}"  # this command's identity
    model = cl.load_model(args.model) if set(parts) - {"planted"} else None
    if not args.no_write and args.merge:
        args.record.write_text(json.dumps(rec, indent=1, default=str) + "\n")
    for part in parts:
        t = clocks()
        if part in ("arith", "boolq"):
            rec[part] = task_part(model, "arithmetic" if part == "arith" else "boolq",
                                  args.n_arith if part == "arith" else args.n_boolq, args.resume_dir)
        elif part == "plans":
            rec[part] = plans_part(model, args.plan_n_arith, args.plan_n_boolq)
        elif part == "prompt_prefix":
            rec[part] = prompt_prefix_part(model, args.prefix_n_mbpp or 4)
        elif part == "planted":
            rec[part] = planted_part()
        elif part == "prefix":
            rec[part] = prefix_part(model, args.prefix_n_arith, args.prefix_n_mbpp)
        elif part == "quick":
            rec[part] = quick_part(model, args.quick_n, quick_threads)
        rec[part]["part_s"] = since(t)
        rec[part]["load_average"] = os.getloadavg()[0]
        rec[part]["cpu"] = cpu_description()
        rec[part]["run"] = run
        rec[part]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if not args.no_write:
            args.record.write_text(json.dumps(rec, indent=1, default=str) + "\n")
        print(f"{part}: {rec[part]['part_s']}", flush=True)
    text = render(rec)
    if args.no_write or args.record != OUT:
        print(text)
    else:
        from benchmarks.racing import write_section

        write_section(text, "smollm2-speed")


if __name__ == "__main__":
    main()

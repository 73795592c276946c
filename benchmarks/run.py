"""Benchmark entry point: cel_lens's stage-1 scans against the true floor and two loops people run.

    python -m benchmarks.run            # full suite: writes benchmarks/RESULTS.md, results.json and
                                        # figures/bench_scaling.{html,png}
    python -m benchmarks.run --quick    # a few minutes: a smaller model and splits, writes nothing

One random Llama checkpoint (:func:`benchmarks.workload.bench_checkpoint`) is read by every
implementation: cel_lens on a HookedTransformer and on a TransformerBridge, ``transformers`` (the
floor, :mod:`benchmarks.floor`), lm-evaluation-harness (:mod:`benchmarks.lm_eval_loop`) and
TransformerLens's ``run_with_hooks``/``generate`` (:mod:`benchmarks.naive`,
:mod:`benchmarks.generation`). For each model type and task (Arithmetic, real-length BoolQ, a
HellaSwag-shaped workload): cel_lens's exact scan of every head (the activation store built inside
the timed region), the floor ``(1 + N (L+1)/(2L))`` x the fastest ``transformers`` pass, the same
with cel_lens's own intact pass, and the loops on a few heads per repetition, extrapolated to all
(their cost per head does not depend on the head). Per-example decisions are compared wherever two
loops evaluated the same head; the run fails (exit status 1, after writing its results) if any
differ. MBPP: a generation scan against TransformerLens's ``generate`` per head, with identical
text and pass@1. All times are CPU seconds of one thread (wall seconds beside them).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.bounds import adjacent_pass, generation_bound, limit_caption, limit_case  # noqa: E402
from benchmarks.measure import cpu_seconds, machine_info, measure, median, own_cpu_seconds, own_pass_seconds  # noqa: E402
from benchmarks.scan import BATCH, GPU_JSON, STORE_BUDGET, cel_scan  # noqa: E402,F401 - re-exported
from benchmarks.workload import REPO  # noqa: E402

warnings.filterwarnings("ignore")

RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"
RESULTS_JSON = REPO / "benchmarks" / "results.json"
FIGURE = REPO / "figures" / "bench_scaling"


def naive_heads(n_layers: int, n_heads: int, per_rep: Optional[int], rep: int) -> list[tuple[int, int]]:
    """Heads a loop runs in repetition ``rep``: all, or ``per_rep`` heads on evenly spaced layers,
    the head index shifted by ``rep`` so repetitions check different heads."""
    if per_rep is None or per_rep >= n_layers * n_heads:
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    if per_rep <= n_layers:
        layers = sorted({round(i * (n_layers - 1) / max(1, per_rep - 1)) for i in range(per_rep)})
        return [(l, (l + rep) % n_heads) for l in layers]
    return [(i % n_layers, (i // n_layers + rep) % n_heads) for i in range(per_rep)]


def floor_factor(n_layers: int, n_heads_total: int) -> float:
    """Intact passes a scan of every head costs at least: ``1 + N (L+1) / (2L)``."""
    return 1 + n_heads_total * (n_layers + 1) / (2 * n_layers)


def _decisions(cel_correct: torch.Tensor, loop: dict[str, Any], H: int, name: str) -> list[str]:
    """Heads (and the intact model) where a loop's per-example decisions differ from cel_lens's
    (``cel_correct``: intact row, then every head layer-major)."""
    bad = [] if torch.equal(loop["intact"], cel_correct[0]) else [f"intact ({name})"]
    for (l, h), row in zip(loop["heads"], loop["correct"]):
        if not torch.equal(row, cel_correct[1 + l * H + h]):
            bad.append(f"L{l}H{h} ({name})")
    return bad


def _all_decisions(oracle, L: int, H: int) -> torch.Tensor:
    """The scan's per-example decisions: intact, then every head layer-major."""
    from cel_lens.heads import Head, HeadSet

    sets = [HeadSet()] + [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)]
    return torch.stack([oracle.seen[str(s)] for s in sets])


def run_case(w: dict[str, Any], kind: str, task_key: str, reps: int, loops: dict[str, Any], log) -> dict[str, Any]:
    """cel_lens's scan ``reps`` times on one model type and task, alternating with the naive loop
    (HookedTransformer only); the floors; decisions against every loop."""
    from cel_lens.model import model_shape
    from cel_lens.evaluation.teacher_forced import variants_per_pass
    from cel_lens.evaluation.encode import default_max_tokens

    from benchmarks.naive import naive_scan

    model, task = w["models"][kind], w["tasks"][task_key]
    L, H = model_shape(model)
    N = L * H
    per_rep = w["naive_per_rep"][task_key]
    cel_runs, naive_runs, mismatches, beside = [], [], [], []
    oracle = None
    for rep in range(reps):
        order = ("naive", "cel") if rep % 2 == 0 else ("cel", "naive")
        for which in order:
            if which == "naive" and kind == "hooked" and per_rep:
                heads = naive_heads(L, H, per_rep, rep)
                m = measure(lambda: naive_scan(model, task.dist, heads, batch_size=BATCH))
                naive_runs.append((m, len(heads) + 1))
                scan, m.value = m.value, None
                w.setdefault("naive_results", {}).setdefault((kind, task_key), []).append(
                    {"heads": scan.heads, "intact": scan.intact, "correct": scan.correct})
                log(f"    rep {rep + 1} naive ({len(heads)} heads + intact) {m.cpu_s:7.2f} s cpu {m.wall_s:7.2f} s wall")
            elif which == "cel":
                beside.append(adjacent_pass(w, task_key))  # the floor's pass again, in the machine's state now
                m = measure(lambda: cel_scan(model, task))
                gains, oracle = m.value
                m.value = None
                cel_runs.append(m)
                log(f"    rep {rep + 1} cel_lens scan      {m.cpu_s:7.2f} s cpu {m.wall_s:7.2f} s wall")
    cel_correct = _all_decisions(oracle, L, H)
    for res in w.get("naive_results", {}).get((kind, task_key), []):
        mismatches += _decisions(cel_correct, res, H, "naive")
    lm = loops.get(task_key)
    if lm is not None:
        mismatches += _decisions(cel_correct, lm["result"], H, "lm-eval")
    store = oracle.store("dist")
    repeat = max(1, min(H, variants_per_pass(store.batches[0], default_max_tokens(BATCH))))
    own = min(own_pass_seconds(model, store.batches, repeat) for _ in range(2))
    hf = {**w["floors"][task_key], "pass_cpu_s": min(beside)}
    cel_cpu = median([m.cpu_s for m in cel_runs])
    out: dict[str, Any] = {
        "key": f"{kind}/{task_key}", "kind": kind, "task": task_key, "task_label": w["task_labels"][task_key],
        "n_dist": len(task.dist), "n_layers": L, "n_heads_per_layer": H, "n_heads": N, "reps": reps,
        "cel_cpu_s": cel_cpu, "cel_wall_s": median([m.wall_s for m in cel_runs]),
        "cel_cpu_runs": [m.cpu_s for m in cel_runs], "peak_rss_cel": median([m.peak_rss_delta or 0 for m in cel_runs]),
        "hf_pass_cpu_s": hf["pass_cpu_s"], "hf_pass_at_start_cpu_s": w["floors"][task_key]["pass_cpu_s"],
        "hf_pass_beside_cpu_s": beside, "hf_best": hf["best"], "hf_all": hf["all"],
        "floor_cpu_s": hf["pass_cpu_s"] * floor_factor(L, N), "own_pass_cpu_s": own,
        "own_floor_cpu_s": own * floor_factor(L, N), "variants_per_forward": repeat,
        "tokens_real": sum(b.real_tokens for b in store.batches),
        "tokens_computed": sum(b.computed_tokens for b in store.batches), "n_batches": len(store.batches),
        "layout": store.batches[0].layout, "store_bytes": store.bytes_used, "store_layers": list(store.stored_layers),
        "intact_acc": float(cel_correct[0].float().mean()), "gains_min": float(gains.min()),
        "gains_max": float(gains.max()), "gains_distinct": len(set(gains.tolist())),
        "mismatches": mismatches[:20], "identical": not mismatches,
    }
    out["efficiency_hf"] = out["floor_cpu_s"] / cel_cpu
    out["efficiency_own"] = out["own_floor_cpu_s"] / cel_cpu
    out.update(limit_case(w, task_key, cel_cpu, hf["pass_cpu_s"]))
    if naive_runs:
        per_eval = median([m.cpu_s / k for m, k in naive_runs])
        out.update(naive_eval_cpu_s=per_eval, naive_cpu_s=per_eval * (N + 1), ratio_naive=per_eval * (N + 1) / cel_cpu,
                   naive_heads=sum(k - 1 for _, k in naive_runs))
    if lm is not None:
        out.update(lmeval_eval_cpu_s=lm["eval_cpu_s"], lmeval_cpu_s=lm["eval_cpu_s"] * (N + 1),
                   ratio_lmeval=lm["eval_cpu_s"] * (N + 1) / cel_cpu, lmeval_heads=len(lm["result"]["heads"]),
                   lmeval_own_cpu_s=lm["eval_own_cpu_s"] * (N + 1), ratio_lmeval_own=lm["eval_own_cpu_s"] * (N + 1) / cel_cpu)
    w["cel_correct"][(kind, task_key)] = cel_correct
    del oracle, store
    return out


def lm_eval_case(w: dict[str, Any], task_key: str, per_rep: int, reps: int, log) -> dict[str, Any]:
    """The lm-eval loop on a few heads per repetition (intact first): CPU seconds per harness call."""
    from benchmarks.lm_eval_loop import LmEvalLoop

    loop = LmEvalLoop(w["hf"], w["tokenizer"], w["tasks"][task_key].dist, f"cel_bench_{task_key}", batch_size=BATCH)
    L, H = w["shape"]["n_layers"], w["shape"]["n_heads"]
    loop.evaluate(None)  # the dataset's first load is cached by `datasets`: not part of a call's cost
    heads, rows, times, own = [], [], [], []
    t0, o0 = cpu_seconds(), own_cpu_seconds()
    intact = loop.evaluate(None)
    times.append(cpu_seconds() - t0)
    own.append(own_cpu_seconds() - o0)
    for rep in range(reps):
        for head in naive_heads(L, H, per_rep, rep + 1):
            t0, o0 = cpu_seconds(), own_cpu_seconds()
            rows.append(loop.evaluate(head))
            times.append(cpu_seconds() - t0)
            own.append(own_cpu_seconds() - o0)
            heads.append(head)
    log(f"  lm-eval {task_key}: {len(times)} harness calls, median {median(times):.2f} s cpu each "
        f"({median(own):.2f} s in its own process)")
    return {"eval_cpu_s": median(times), "eval_own_cpu_s": median(own), "calls": times,
            "result": {"heads": heads, "intact": intact, "correct": torch.stack(rows)}}


def forward_table(w: dict[str, Any], log) -> dict[str, dict[str, float]]:
    """CPU seconds of one intact pass per task: ``transformers`` (the floor's), and cel_lens on each
    model type with the fused-attention stack and with the model's own forward (each at cel_lens's
    batches, as many variants per forward as the scan puts there)."""
    from cel_lens.evaluation import encode_split
    from cel_lens.model import fused_attention, model_shape

    from benchmarks.scaling import variants

    out: dict[str, dict[str, float]] = {}
    for key, task in w["tasks"].items():
        row = {"transformers (SDPA)": w["floors"][key]["pass_cpu_s"]}
        for kind, model in w["models"].items():
            H = model_shape(model)[1]
            for fused in (True, False):
                with fused_attention(fused):
                    batches = encode_split(model, task.dist, BATCH)
                    rep = variants(batches[0], H)
                    row[f"{kind} ({'stack' if fused else 'own forward'})"] = min(
                        own_pass_seconds(model, batches, rep) for _ in range(2))
        out[key] = row
        log(f"  forward {key}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    return out


def own_forward_scans(w: dict[str, Any], log) -> dict[str, float]:
    """The Arithmetic scan with fused attention off (TransformerLens's forward; the bridge's own
    layers): what the stack buys on top of resuming and batching variants."""
    from cel_lens.model import fused_attention

    out = {}
    for kind, model in w["models"].items():
        with fused_attention(False):
            m = measure(lambda: cel_scan(model, w["tasks"]["arith"]))
        m.value = None
        out[kind] = m.cpu_s
        log(f"  arith scan on the {kind} model's own forward: {m.cpu_s:.2f} s cpu")
    return out


def mbpp_case(w: dict[str, Any], reps: int, naive_per_rep: int, log) -> dict[str, Any]:
    """The MBPP generation scan on each model type (``reps`` runs on the HookedTransformer, alternating
    with the naive ``generate`` loop on a few heads; one on the bridge), and ``transformers``'
    ``generate`` as the floor."""
    from cel_lens.evaluation.generation import generation_prompts
    from cel_lens.model import model_shape

    from benchmarks.floor import hf_generate_seconds
    from benchmarks.generation import cel_generation_scan, compare_completions, naive_generation_scan

    task, max_new = w["mbpp"], w["mbpp_max_new"]
    hooked = w["models"]["hooked"]
    L, H = model_shape(hooked)
    N = L * H
    out: dict[str, Any] = {"n_dist": len(task.dist), "max_new_tokens": max_new, "n_heads": N}
    prompts = generation_prompts(hooked, task.dist, False, max_new)
    out["prompt_tokens"] = [len(p) for p in prompts]
    eos = w["tokenizer"].eos_token_id
    timed = [hf_generate_seconds(w["hf"], prompts, max_new, eos) for _ in range(2)]
    hf_s, hf_out = min(t for t, _ in timed), timed[0][1]
    out.update(hf_generate_cpu_s=hf_s, floor_cpu_s=hf_s * (N + 1))
    naive_runs, mismatches = [], []
    beside: dict[str, list[float]] = {}
    for kind, model in w["models"].items():
        runs = []
        for rep in range(reps if kind == "hooked" else 1):  # the bound's generate timed beside each scan too
            beside.setdefault(kind, []).extend(hf_generate_seconds(w["hf"], prompts, max_new, eos)[0] for _ in range(2))
            m = measure(lambda: cel_generation_scan(model, task.dist, BATCH))
            cel, m.value = m.value, None
            runs.append(m.cpu_s)
            log(f"    mbpp {kind} rep {rep + 1} cel_lens {m.cpu_s:7.2f} s cpu {m.wall_s:7.2f} s wall")
            if kind == "hooked":
                heads = naive_heads(L, H, naive_per_rep, rep)
                m = measure(lambda: naive_generation_scan(model, task.dist, heads, max_new))
                naive, m.value = m.value, None
                naive_runs.append((m.cpu_s, len(heads) + 1))
                mismatches += compare_completions(naive, cel, H)
                log(f"    mbpp naive ({len(heads)} heads + intact) {m.cpu_s:7.2f} s cpu {m.wall_s:7.2f} s wall")
        out[f"cel_cpu_s_{kind}"] = median(runs)
        out[f"pass_at_1_{kind}"] = float(cel["correct"][0].float().mean())
        out[f"completions_distinct_{kind}"] = len({c for row in cel["completions"] for c in row})
    per_eval = median([s / k for s, k in naive_runs])
    out.update(naive_eval_cpu_s=per_eval, naive_cpu_s=per_eval * (N + 1), naive_heads=sum(k - 1 for _, k in naive_runs),
               mismatches=mismatches[:20], identical=not mismatches)
    for kind in w["models"]:
        out[f"ratio_naive_{kind}"] = out["naive_cpu_s"] / out[f"cel_cpu_s_{kind}"]
        out[f"efficiency_hf_{kind}"] = out["floor_cpu_s"] / out[f"cel_cpu_s_{kind}"]
    out.update(generation_bound(w, prompts, cel, hf_out, beside))
    return out


def build_workload(quick: bool, log) -> dict[str, Any]:
    """The checkpoint, its three readers (HookedTransformer, TransformerBridge, transformers) and the tasks."""
    from cel_lens.model import load_model

    from benchmarks import workload as W
    from benchmarks.floor import encode_for_floor, hf_causal_lm, hf_floor

    data = W.default_data_dir()
    if data is None:
        raise FileNotFoundError("the benchmarks need the offline data: set CEL_LENS_DATA_DIR (arithmetic/, boolq/, mbpp/)")
    if quick:
        tok = W.train_bench_tokenizer(list(W.task_corpus(data, max_boolq=400))[::4], vocab_size=1024)
        shape = dict(n_layers=4, n_heads=4, d_head=16, n_kv_heads=2)
        sizes = dict(arith=16, boolq=8, hellaswag=8, mbpp=2, mbpp_new=8)
        per_rep = {"arith": 2, "boolq": 2, "hellaswag": 2}
    else:
        tok = W.bench_tokenizer()
        shape = dict(n_layers=8, n_heads=8, d_head=64, n_kv_heads=4)
        sizes = dict(arith=48, boolq=16, hellaswag=16, mbpp=4, mbpp_new=32)
        per_rep = {"arith": 4, "boolq": 3, "hellaswag": 2}
    path = W.bench_checkpoint(Path(tempfile.mkdtemp(prefix="cel_lens_bench_")), tok, **shape)
    hooked = load_model(str(path), loader="hooked", device="cpu")
    bridge = load_model(str(path), loader="bridge", device="cpu")
    arith, replaced = W.self_labelled(hooked, W.arithmetic_task(sizes["arith"], data_dir=data))
    tasks = {"arith": arith, "boolq": W.boolq_task(sizes["boolq"], data_dir=data),
             "hellaswag": W.hellaswag_shaped_task(sizes["hellaswag"], data_dir=data)}
    labels = {
        "arith": f"Arithmetic ({sizes['arith']} prompts, {replaced} targets self-labelled)",
        "boolq": f"BoolQ ({sizes['boolq']} real validation prompts, no length filter)",
        "hellaswag": f"HellaSwag-shaped ({sizes['hellaswag']} contexts x 4 endings, acc_norm)",
    }
    hf = hf_causal_lm(path)
    encoded = {key: encode_for_floor(hooked, task.dist) for key, task in tasks.items()}  # the ids every reader scores
    floors = {}
    for key in tasks:
        floors[key] = hf_floor(hf, encoded[key], pad=tok.pad_token_id, budgets=(0, 1024, 4096), reps=2)
        log(f"  floor {key}: transformers pass {floors[key]['pass_cpu_s']:.2f} s cpu ({floors[key]['best']})")
    d = shape["n_heads"] * shape["d_head"]
    label = (f"random Llama checkpoint, {shape['n_layers']}L x {shape['n_heads']}H, d_model {d}, "
             f"{shape['n_kv_heads']} KV heads, d_mlp {2 * d}, vocab {len(tok)}, float32")
    return {"models": {"hooked": hooked, "bridge": bridge}, "hf": hf, "tokenizer": tok, "tasks": tasks,
            "task_labels": labels, "encoded": encoded, "floors": floors, "shape": shape, "model_label": label, "naive_per_rep": per_rep,
            "mbpp": W.mbpp_task(sizes["mbpp"], sizes["mbpp_new"], data_dir=data), "mbpp_max_new": sizes["mbpp_new"],
            "cel_correct": {}, "quick": quick}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the suite; 0 when every comparison of decisions and texts agreed, 1 otherwise."""
    from benchmarks.report import print_rows, write_report

    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model and splits, a few minutes, writes nothing")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each scan (medians)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: CPU time of one thread)")
    ap.add_argument("--only", default=None, help="comma list of tasks (arith, boolq, hellaswag, mbpp)")
    ap.add_argument("--no-extras", action="store_true", help="skip the profile, scaling and own-forward scans")
    ap.add_argument("--report-only", action="store_true", help="rewrite RESULTS.md from results.json")
    args = ap.parse_args(argv)
    if args.report_only:
        rec = json.loads(RESULTS_JSON.read_text())
        write_report(rec, RESULTS_MD)
        print(f"wrote {RESULTS_MD.relative_to(REPO)} from {RESULTS_JSON.relative_to(REPO)}")
        return 0
    os.environ.setdefault("CEL_LENS_ALLOW_CODE_EXECUTION", "1")  # MBPP's judge runs generated code in the sandbox
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

    machine_before = machine_info()
    w = build_workload(args.quick, log)
    only = set(args.only.split(",")) if args.only else {"arith", "boolq", "hellaswag", "mbpp"}
    loops = {}
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        log("lm-eval not installed (pip install 'cel_lens[bench]'): its loop is left out")
        only_loops: tuple[str, ...] = ()
    else:
        only_loops = ("arith", "boolq")
    for key in only_loops:
        if key in only:
            loops[key] = lm_eval_case(w, key, 2 if args.quick else 3, 1, log)
    rows = []
    for key in ("arith", "boolq", "hellaswag"):
        if key not in only:
            continue
        for kind in ("hooked", "bridge"):
            log(f"case {kind}/{key}: {w['task_labels'][key]}")
            rows.append(run_case(w, kind, key, args.reps, loops, log))
    rec: dict[str, Any] = {"cases": rows, "lm_eval": {k: {"calls": v["calls"], "eval_cpu_s": v["eval_cpu_s"]} for k, v in loops.items()}}
    rec["forward"] = forward_table(w, log) if rows else {}
    if "mbpp" in only:
        log("case mbpp (generation)")
        rec["mbpp"] = mbpp_case(w, args.reps, 1 if args.quick else 2, log)
    if not args.quick and not args.no_extras and "arith" in only:
        from benchmarks.scaling import profile_scan, scaling, scaling_figure

        rec["own_forward_scans"] = own_forward_scans(w, log)
        log("profiling one scan")
        rec["profile"] = profile_scan(w["models"]["hooked"], w["tasks"]["arith"])
        log("scaling")
        r = next(r for r in rows if r["key"] == "hooked/arith")
        n = len(w["tasks"]["arith"].dist)
        rec["scaling"] = scaling(w["models"]["hooked"], w["tasks"]["arith"], (r["n_heads"], n, r["cel_wall_s"], r["cel_cpu_s"]),
                                 n_points=(n // 4, n // 2))
        rec["figures"] = [str(p.relative_to(REPO)) for p in
                          scaling_figure(rec["scaling"], r["own_pass_cpu_s"], r["n_layers"], FIGURE, limit_caption(r))]
    rec["config"] = {"model": w["model_label"], "shape": w["shape"], "batch_size": BATCH, "reps": args.reps,
                     "threads": args.threads, "quick": args.quick, "argv": list(argv if argv is not None else sys.argv[1:]),
                     "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "total_s": time.perf_counter() - t_start}
    rec["machine"], rec["machine_after"] = machine_before, machine_info()
    print()
    print_rows(rec)
    if not args.quick:
        RESULTS_JSON.write_text(json.dumps(rec, indent=1, default=str) + "\n")
        write_report(rec, RESULTS_MD)
        log(f"wrote {RESULTS_MD.relative_to(REPO)}, {RESULTS_JSON.relative_to(REPO)}")
    bad = [r["key"] for r in rows if not r["identical"]] + (["mbpp"] if not rec.get("mbpp", {}).get("identical", True) else [])
    if bad:
        print(f"FAILED: decisions or texts differ for {', '.join(bad)}", file=sys.stderr)
        return 1
    log("decisions identical wherever two loops evaluated the same head; MBPP texts identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())

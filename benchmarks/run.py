"""Benchmark entry point: cel_lens's stage-1 exact scan against the naive loop and the compute floor.

    python -m benchmarks.run            # full suite: writes benchmarks/RESULTS.md, results.json and
                                        # figures/bench_scaling.{html,png}
    python -m benchmarks.run --quick    # < 1 minute: a smaller model, prints the table, writes nothing

For every (model, task) case, in one process and alternating (naive first in even repetitions,
cel_lens first in odd ones): the naive scan (:mod:`benchmarks.naive`) and cel_lens's scan
(``exact_scores(LocalOracle(model, task))``: the activation store is built inside the timed region,
then every single-head ablation runs as batched variants resumed from the store). Both give per-head
gains; the run fails (exit status 1, after writing its results) unless they are bit-identical on
every head both computed. Reported: medians over the repetitions of wall and CPU time, the ratio,
per-head cost, peak resident memory added, the store's bytes against its budget, analytic FLOPs,
and the compute floor ``t(intact pass over D_dist) x heads x (L+1)/(2L)`` with the efficiency
floor / scan time. The naive baseline's cost per head does not depend on the head (every pass is a
full pass), so in the full suite it runs on a few heads per repetition (different ones each time)
and its total is that per-evaluation median times (heads + 1); the table says so.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from benchmarks.measure import (  # noqa: E402
    Measurement,
    intact_pass_seconds,
    machine_info,
    measure,
    median,
    scan_flops,
)
from benchmarks.naive import naive_flops, naive_scan  # noqa: E402
from benchmarks.workload import REPO  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*fixture.*")

RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"
RESULTS_JSON = REPO / "benchmarks" / "results.json"
GPU_JSON = REPO / "benchmarks" / "gpu_scan.json"
FIGURE = REPO / "figures" / "bench_scaling"
STORE_BUDGET = 256 * 2**20
BATCH = 8


# ---------------------------------------------------------------------------------------------
# the two scans
# ---------------------------------------------------------------------------------------------
def cel_scan(model, task, heads: Optional[Sequence[tuple[int, int]]] = None, budget: Optional[int] = STORE_BUDGET):
    """cel_lens's stage-1 exact scan on ``task``'s D_dist: ``(gains in heads order, oracle)``.

    All heads: :func:`cel_lens.scoring.exact_scores` over a :class:`cel_lens.backends.LocalOracle`
    (the public path). A subset: the same two oracle calls exact_scores makes, on those heads."""
    from cel_lens.heads import Head, HeadSet
    from cel_lens.backends import LocalOracle
    from cel_lens.scoring import exact_scores

    oracle = LocalOracle(model, task, batch_size=BATCH, store_budget=budget, progress=False)
    if heads is None:
        return exact_scores(oracle).flatten(), oracle
    intact = oracle.evaluate("dist", [HeadSet()])[0]
    sets = [HeadSet([Head(l, h)]) for l, h in heads]
    correct = torch.cat([oracle.evaluate("dist", sets[i : i + 64]) for i in range(0, len(sets), 64)])
    return correct.to(torch.float64).mean(1) - intact.to(torch.float64).mean(), oracle


def naive_heads(n_layers: int, n_heads: int, per_rep: Optional[int], rep: int) -> list[tuple[int, int]]:
    """Heads the naive scan runs in repetition ``rep``: all, or ``per_rep`` heads on evenly spaced
    layers, the head index shifted by ``rep`` so repetitions check different heads."""
    if per_rep is None or per_rep >= n_layers * n_heads:
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    if per_rep <= n_layers:
        layers = sorted({round(i * (n_layers - 1) / max(1, per_rep - 1)) for i in range(per_rep)})
        return [(l, (l + rep) % n_heads) for l in layers]
    return [(i % n_layers, (i // n_layers + rep) % n_heads) for i in range(per_rep)]


def variants_per_forward(batches: Sequence, n_heads: int, max_rows: int = 16 * BATCH) -> int:
    """How many variants cel_lens puts in one forward for these batches (its ``max_rows`` rule,
    capped by the heads of one layer, which share a start layer)."""
    b = batches[0]
    return max(1, min(n_heads, max_rows // max(1, b.n_rows, b.n_examples)))


# ---------------------------------------------------------------------------------------------
# one case
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    """A model and a task to benchmark."""

    key: str
    model_label: str
    task_label: str
    model: Any
    task: Any
    naive_per_rep: Optional[int] = None  # None: the naive scan runs every head
    nocache_per_rep: int = 0  # exact match: also time the naive loop without a key/value cache
    notes: list[str] = field(default_factory=list)


def _tokens(batches: Sequence) -> tuple[int, int]:
    real = padded = 0
    for b in batches:
        if b.layout == "rows":
            real += int(b.rows.attention_mask.sum())
            padded += b.rows.tokens.numel()
        else:
            real += int(b.context_mask.sum())
            padded += b.context_tokens.numel()
    return real, padded


def run_case(case: Case, reps: int, log) -> dict[str, Any]:
    """Alternate the naive and cel_lens scans ``reps`` times; compare gains; measure the floor."""
    from cel_lens.model import model_shape

    model, task = case.model, case.task
    L, H = model_shape(model)
    split = task.dist
    n_heads = L * H
    naive_runs: list[tuple[Measurement, int]] = []
    nocache_runs: list[tuple[Measurement, int]] = []
    cel_runs: list[Measurement] = []
    floors: list[float] = []
    floors_cpu: list[float] = []
    compared: set[tuple[int, int]] = set()
    mismatches: list[str] = []
    info: dict[str, Any] = {}
    all_heads = [(l, h) for l in range(L) for h in range(H)]
    for rep in range(reps):
        heads = naive_heads(L, H, case.naive_per_rep, rep)
        order = ("naive", "cel") if rep % 2 == 0 else ("cel", "naive")
        results: dict[str, Any] = {}
        for which in order:
            if which == "naive":
                m = measure(lambda: naive_scan(model, split, heads, batch_size=BATCH))
                naive_runs.append((m, len(heads) + 1))
                results["naive"], m.value = m.value, None
            else:
                m = measure(lambda: cel_scan(model, task))
                cel_runs.append(m)
                results["cel"], m.value = m.value, None
            log(f"  rep {rep + 1}/{reps} {which:5s} {m.wall_s:8.2f} s wall {m.cpu_s:8.2f} s cpu")
        if case.nocache_per_rep and split.kind == "exact_match":
            nc_heads = naive_heads(L, H, case.nocache_per_rep, rep)
            m = measure(lambda: naive_scan(model, split, nc_heads, batch_size=BATCH, kv_cache=False))
            nocache_runs.append((m, len(nc_heads) + 1))
            log(f"  rep {rep + 1}/{reps} naive without KV cache ({len(nc_heads)} heads) {m.wall_s:8.2f} s")
            results["nocache"], m.value = m.value, None
        gains, oracle = results["cel"]
        for key in ("naive", "nocache"):
            if key not in results:
                continue
            scan = results[key]
            for (l, h), g in zip(scan.heads, scan.gains.tolist()):
                compared.add((l, h))
                cel_g = float(gains[all_heads.index((l, h))])
                if g != cel_g:
                    mismatches.append(f"L{l}H{h}: naive {g!r} vs cel_lens {cel_g!r} ({key})")
        store = oracle.store("dist")
        repeat = variants_per_forward(store.batches, H)
        floors.append(intact_pass_seconds(model, store.batches, repeat=repeat))
        floors_cpu.append(intact_pass_seconds(model, store.batches, repeat=repeat, clock="cpu"))
        if rep == 0:
            real, padded = _tokens(store.batches)
            naive_intact = results["naive"].intact
            info.update(
                store_bytes=store.bytes_used,
                store_layers=list(store.stored_layers),
                store_all_layers=len(store.stored_layers) == L - 1,
                variants_per_forward=repeat,
                tokens_real=real,
                tokens_padded=padded,
                intact_acc=float(naive_intact.float().mean()),
                gains_min=float(gains.min()),
                gains_max=float(gains.max()),
                gains_distinct=len(set(gains.tolist())),
                cel_flops=scan_flops(model.cfg, store.batches, [0] + [l for l, _ in all_heads]),
                naive_flops_per_eval=naive_flops(model, split, BATCH),
                naive_nocache_flops_per_eval=naive_flops(model, split, BATCH, kv_cache=False)
                if split.kind == "exact_match" else None,
            )
        del oracle, store, results
    naive_eval_s = median([m.wall_s / k for m, k in naive_runs])
    naive_eval_cpu = median([m.cpu_s / k for m, k in naive_runs])
    naive_total = naive_eval_s * (n_heads + 1)
    naive_total_cpu = naive_eval_cpu * (n_heads + 1)
    cel_s = median([m.wall_s for m in cel_runs])
    cel_cpu = median([m.cpu_s for m in cel_runs])
    floor_pass = median(floors)
    floor_s = floor_pass * n_heads * (L + 1) / (2 * L)
    floor_cpu = median(floors_cpu) * n_heads * (L + 1) / (2 * L)
    naive_heads_measured = sorted({k for _, k in naive_runs})
    out = {
        "key": case.key,
        "model": case.model_label,
        "task": case.task_label,
        "n_layers": L,
        "n_heads_per_layer": H,
        "n_heads": n_heads,
        "n_dist": len(split),
        "reps": reps,
        "naive_evals_per_rep": [k for _, k in naive_runs],
        "naive_extrapolated": naive_heads_measured != [n_heads + 1],
        "naive_eval_s": naive_eval_s,
        "naive_s": naive_total,
        "naive_cpu_s": naive_total_cpu,
        "naive_walls": [m.wall_s for m, _ in naive_runs],
        "cel_s": cel_s,
        "cel_cpu_s": cel_cpu,
        "cel_walls": [m.wall_s for m in cel_runs],
        "ratio": naive_total / cel_s,
        "ratio_cpu": naive_total_cpu / cel_cpu,
        "naive_ms_per_head": 1000 * naive_eval_s,
        "cel_ms_per_head": 1000 * cel_s / n_heads,
        "intact_pass_s": floor_pass,
        "floor_s": floor_s,
        "efficiency": floor_s / cel_s,
        "intact_pass_cpu_s": median(floors_cpu),
        "floor_cpu_s": floor_cpu,
        "efficiency_cpu": floor_cpu / cel_cpu,
        "store_budget": STORE_BUDGET,
        "peak_rss_naive": median([m.peak_rss_delta for m, _ in naive_runs if m.peak_rss_delta is not None]),
        "peak_rss_cel": median([m.peak_rss_delta for m in cel_runs if m.peak_rss_delta is not None]),
        "heads_compared": len(compared),
        "identical": not mismatches,
        "mismatches": mismatches[:20],
        "notes": case.notes,
        **info,
    }
    out["flop_ratio"] = out["naive_flops_per_eval"] * (n_heads + 1) / out["cel_flops"]
    out["cel_gflops_per_s"] = out["cel_flops"] / cel_s / 1e9
    out["naive_gflops_per_s"] = out["naive_flops_per_eval"] / naive_eval_s / 1e9
    if nocache_runs:
        nc_eval = median([m.wall_s / k for m, k in nocache_runs])
        out["nocache_eval_s"] = nc_eval
        out["nocache_s"] = nc_eval * (n_heads + 1)
        out["ratio_nocache"] = out["nocache_s"] / cel_s
        out["flop_ratio_nocache"] = out["naive_nocache_flops_per_eval"] * (n_heads + 1) / out["cel_flops"]
    return out


# ---------------------------------------------------------------------------------------------
# profile and scaling
# ---------------------------------------------------------------------------------------------
_GROUPS = {
    "matmul (projections, MLP, attention, unembedding)": ("addmm", "mm", "bmm", "matmul", "linear", "einsum", "baddbmm"),
    "softmax and attention masking": ("softmax", "_softmax", "where", "masked_fill", "ne", "fill_", "triu", "tril"),
    "copies (repeat, cat, contiguous, gather, index)": ("copy_", "cat", "repeat", "expand", "clone", "gather", "index", "contiguous", "stack", "_to_copy"),
}


def profile_scan(model, task) -> dict[str, Any]:
    """Where cel_lens's scan spends its time: torch profiler self-CPU time by op group, and the rest
    of the wall time (Python, hooks, dispatch, profiler overhead)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        _, oracle = cel_scan(model, task)
        wall = time.perf_counter() - t0
    del oracle
    groups: dict[str, float] = {g: 0.0 for g in _GROUPS}
    groups["other tensor ops (norms, rotary, activations, adds)"] = 0.0
    top = []
    for evt in prof.key_averages():
        name = evt.key.split("::")[-1]
        secs = evt.self_cpu_time_total / 1e6
        top.append((secs, evt.key, evt.count))
        for g, names in _GROUPS.items():
            if name in names:
                groups[g] += secs
                break
        else:
            groups["other tensor ops (norms, rotary, activations, adds)"] += secs
    ops = sum(groups.values())
    threads = max(1, torch.get_num_threads())
    groups["outside tensor ops (Python, hooks, dispatch)"] = max(0.0, wall - ops / threads)
    top.sort(reverse=True)
    return {"wall_s": wall, "groups": groups, "top": [(k, s, c) for s, k, c in top[:8]], "threads": threads}


def scaling(model, task, table_point: tuple[int, int, float, float], head_counts=(2, 4), n_points=(8, 16)) -> dict[str, Any]:
    """cel_lens scan time (wall and CPU) against the number of heads (the first k heads of every
    layer) and against |D_dist| (the first n examples, all heads); one run a point, the table's
    medians for the largest point. Also the intact pass (CPU) per |D_dist| for the floor line."""
    from dataclasses import replace

    from cel_lens.model import model_shape

    L, H = model_shape(model)
    heads_n, n_full, wall_full, cpu_full = table_point
    by_heads = []
    for k in head_counts:
        heads = [(l, h) for l in range(L) for h in range(k)]
        m = measure(lambda: cel_scan(model, task, heads))
        m.value = None
        by_heads.append((len(heads), m.wall_s, m.cpu_s))
    by_heads.append((heads_n, wall_full, cpu_full))
    by_n = []
    floors = []
    for n in n_points:
        sub = replace(task, dist=task.dist.subset(n))
        m = measure(lambda: cel_scan(model, sub))
        _, oracle = m.value
        store = oracle.store("dist")
        rep = variants_per_forward(store.batches, H)
        floors.append((n, intact_pass_seconds(model, store.batches, rep, clock="cpu")))
        by_n.append((n, m.wall_s, m.cpu_s))
        del oracle, store
        m.value = None
    by_n.append((n_full, wall_full, cpu_full))
    return {"by_heads": by_heads, "by_n": by_n, "floor_pass_cpu_by_n": floors, "columns": ["x", "wall_s", "cpu_s"]}


def _fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares line ``y = a + b x`` and its R^2."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return a, b, r2


def scaling_figure(scale: dict[str, Any], floor_pass_cpu: float, L: int, path_stem: Path) -> list[Path]:
    """Two panels (CPU seconds against heads, against |D_dist|; wall seconds as open markers) with
    least-squares lines and the compute floor; saved as HTML and PNG by
    :func:`cel_lens.report.save_figure`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from cel_lens.report.save import save_figure

    fig = make_subplots(rows=1, cols=2, subplot_titles=("scan time vs heads scanned", "scan time vs |D_dist|"))
    heads_max = max(p[0] for p in scale["by_heads"])
    for col, key, xlabel in ((1, "by_heads", "heads scanned"), (2, "by_n", "|D_dist| (examples)")):
        pts = sorted(scale[key])
        xs = [p[0] for p in pts]
        a, b, r2 = _fit([(p[0], p[2]) for p in pts])
        first = col == 1
        fig.add_trace(go.Scatter(x=xs, y=[p[2] for p in pts], mode="markers", name="cel_lens scan (CPU s)",
                                 marker=dict(size=10, color="#1f77b4"), showlegend=first), row=1, col=col)
        fig.add_trace(go.Scatter(x=xs, y=[p[1] for p in pts], mode="markers", name="cel_lens scan (wall s)",
                                 marker=dict(size=9, color="#1f77b4", symbol="circle-open"), showlegend=first),
                      row=1, col=col)
        fig.add_trace(go.Scatter(x=[0, max(xs)], y=[a, a + b * max(xs)], mode="lines",
                                 name=f"least squares, CPU (R² {r2:.3f})" if first else f"least squares (R² {r2:.3f})",
                                 line=dict(color="#1f77b4", dash="dot" if first else "dashdot")), row=1, col=col)
        if key == "by_heads":
            fig.add_trace(go.Scatter(x=[0, max(xs)], y=[0, floor_pass_cpu * max(xs) * (L + 1) / (2 * L)], mode="lines",
                                     name="compute floor (CPU s)", line=dict(color="#d62728", dash="dash")),
                          row=1, col=col)
        else:
            fl = sorted(scale["floor_pass_cpu_by_n"]) + [(max(xs), floor_pass_cpu)]
            fig.add_trace(go.Scatter(x=[n for n, _ in fl], y=[f * heads_max * (L + 1) / (2 * L) for _, f in fl],
                                     mode="lines+markers", name="compute floor (CPU s)", showlegend=False,
                                     line=dict(color="#d62728", dash="dash")), row=1, col=col)
        fig.update_xaxes(title_text=xlabel, rangemode="tozero", row=1, col=col)
        fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=col)
    fig.update_layout(width=1100, height=440, template="plotly_white",
                      title="cel_lens stage-1 exact scan (random 8x8 Llama-shaped model, Arithmetic): linear in heads and |D_dist|")
    return save_figure(fig, path_stem)


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------
def build_cases(quick: bool, log) -> tuple[list[Case], dict[str, Any]]:
    """The benchmark cases: the small Llama-shaped model on Arithmetic and BoolQ, and the organism."""
    from benchmarks import workload as W

    cfg: dict[str, Any] = {}
    t0 = time.perf_counter()
    data = W.default_data_dir()
    if data is None:
        raise FileNotFoundError("the benchmarks need the offline data: set CEL_LENS_DATA_DIR (arithmetic/, boolq/)")
    if quick:
        corpus = list(W.task_corpus(data, max_boolq=400))[::4]
        tok = W.train_bench_tokenizer(corpus, vocab_size=1024)
        shape = dict(n_layers=4, n_heads=4, d_head=16, n_key_value_heads=2)
        n_arith, n_boolq, boolq_max, n_org = 16, 8, 96, 128
        per_rep = {"arith": None, "boolq": None, "nocache": 0}
    else:
        tok = W.bench_tokenizer()
        shape = dict(n_layers=8, n_heads=8, d_head=64, n_key_value_heads=4)
        n_arith, n_boolq, boolq_max, n_org = 32, 16, 128, 512
        per_rep = {"arith": 8, "boolq": 4, "nocache": 2}
    model = W.bench_model(tokenizer=tok, **shape)
    label = (
        f"random Llama-shaped, {shape['n_layers']}L x {shape['n_heads']}H, d_model "
        f"{shape['n_heads'] * shape['d_head']}, {shape['n_key_value_heads']} KV heads, vocab {len(tok)}"
    )
    cfg.update(model=label, tokenizer_vocab=len(tok), setup_s=None)
    log(f"model: {label} ({time.perf_counter() - t0:.1f} s to build)")
    arith, replaced = W.self_labelled(model, W.arithmetic_task(n_arith, data_dir=data))
    boolq = W.boolq_task(n_boolq, data_dir=data, max_tokens=boolq_max, tokenizer=tok)
    cases = [
        Case("arith", label, f"Arithmetic (self-labelled, {replaced}/{n_arith} targets)", model, arith,
             naive_per_rep=per_rep["arith"], nocache_per_rep=per_rep["nocache"],
             notes=["prompts from the offline GPT-3 files; each target replaced by the intact model's own greedy "
                    "answer of the same token length where it round-trips (a random model answers none)"]),
        Case("boolq", label, f"BoolQ (prompts <= {boolq_max} tokens)", model, boolq, naive_per_rep=per_rep["boolq"],
             notes=["D_dist drawn from the real validation file (train is not available offline)"]),
    ]
    try:
        from cel_lens.organism import load_organism
        from cel_lens.tasks import load_task

        org = load_organism()
        org_task = load_task("organism_a", n_dist=n_org, n_test=16)
        cases.append(Case("organism", "model organism (1 layer, 4 heads, attention only)", "organism_a",
                          org, org_task, naive_per_rep=None,
                          notes=["the organism's own task: its word-level tokenizer reads no Arithmetic or BoolQ text"]))
    except Exception as err:  # noqa: BLE001 - the organism is optional
        cfg["organism_skipped"] = f"{type(err).__name__}: {err}"
        log(f"organism skipped: {cfg['organism_skipped']}")
    cfg["setup_s"] = time.perf_counter() - t0
    return cases, cfg


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _mib(x: Optional[float]) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x / 2**20:.1f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The headline table in Markdown."""
    head = (
        "| model | task | \\|D_dist\\| | heads | naive s | cel_lens s | ratio (wall) | ratio (CPU) | naive ms/head "
        "| cel_lens ms/head | floor s | efficiency (wall / CPU) | store MiB (budget) | peak RSS MiB naive / cel_lens | gains identical |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        star = "*" if r["naive_extrapolated"] else ""
        lines.append(
            f"| {r['model']} | {r['task']} | {r['n_dist']} | {r['n_heads']} | {r['naive_s']:.1f}{star} | {r['cel_s']:.2f} "
            f"| **{r['ratio']:.1f}x** | {r['ratio_cpu']:.1f}x | {r['naive_ms_per_head']:.0f} | {r['cel_ms_per_head']:.0f} "
            f"| {r['floor_s']:.2f} | {r['efficiency']:.2f} / {r['efficiency_cpu']:.2f} "
            f"| {_mib(r['store_bytes'])} ({_mib(r['store_budget'])}) "
            f"| {_mib(r['peak_rss_naive'])} / {_mib(r['peak_rss_cel'])} "
            f"| {'yes' if r['identical'] else 'NO'} ({r['heads_compared']} heads) |"
        )
    return head + "\n".join(lines) + "\n"


def print_summary(rows: Sequence[dict[str, Any]], log) -> None:
    """One line per case: the ratio and whether gains matched."""
    for r in rows:
        star = " (naive extrapolated from a head subset)" if r["naive_extrapolated"] else ""
        log(
            f"{r['key']:9s} naive {r['naive_s']:8.2f} s{star}  cel_lens {r['cel_s']:7.2f} s  ratio {r['ratio']:5.1f}x "
            f"(CPU {r['ratio_cpu']:.1f}x)  floor {r['floor_s']:.2f} s  efficiency {r['efficiency']:.2f} "
            f"(CPU {r['efficiency_cpu']:.2f})  "
            f"gains identical: {r['identical']} ({r['heads_compared']} heads)"
        )


def _reading(by: dict[str, dict[str, Any]]) -> list[str]:
    """What the numbers say about each speed goal (text built from the measured values)."""
    out = ["### Reading the goals", ""]
    if "arith" in by:
        r = by["arith"]
        out.append(
            f"- Arithmetic: cel_lens does {r['flop_ratio']:.1f}x fewer FLOPs than the naive scan with a key/value "
            f"cache; it is {r['ratio']:.1f}x faster because the naive loop averages {r['naive_gflops_per_s']:.0f} "
            f"GFLOP/s against cel_lens's {r['cel_gflops_per_s']:.0f} (its one-token generation steps, batch 8 x 1 "
            "position, are small matrix products with a whole pass's per-call overhead). "
            f"cel_lens runs at {r['efficiency_cpu']:.2f} of its compute floor, so no change inside cel_lens can add much "
            "on this CPU: 20x needs a baseline that wastes more (without a cache it is "
            + (f"{r['ratio_nocache']:.1f}x" if "ratio_nocache" in r else "not measured")
            + ") or hardware where small batches are latency-bound rather than compute-bound (a GPU: "
            "`benchmarks/gpu_scan.py` times the same naive loop there)."
        )
    if "boolq" in by:
        r = by["boolq"]
        out.append(
            f"- BoolQ: the measured {r['ratio']:.1f}x is the FLOP ratio ({r['flop_ratio']:.1f}x): both loops run "
            f"full-size passes at the same GFLOP/s ({r['naive_gflops_per_s']:.0f} and {r['cel_gflops_per_s']:.0f}). "
            "The naive loop runs each context twice (one row per choice, as lm-eval's plain request loop does); "
            "cel_lens runs it once and resumes at the ablated layer. cel_lens's left-padded context batches cost "
            f"{r['tokens_padded'] / r['tokens_real'] - 1:.0%} padding at this |D_dist| (fewer with more examples, "
            "which sort into batches of like length)."
        )
    if "organism" in by:
        r = by["organism"]
        out.append(
            f"- Organism: one layer, so there is nothing to skip ((L+1)/(2L) = 1), and at batch 8 every pass is a "
            "fixed per-forward cost: the store's intact pass costs as much as the four ablations together, and the "
            f"floor leaves out the intact evaluation that both scans need (at most {r['n_heads']}/{r['n_heads'] + 1} "
            f"= {r['n_heads'] / (r['n_heads'] + 1):.2f} even with no overhead). Efficiency {r['efficiency_cpu']:.2f}."
        )
    out.append("")
    return out


def write_results(rows, cfg, prof, scale, machine_before, machine_after, figure_paths, argv) -> str:
    """RESULTS.md text."""
    by = {r["key"]: r for r in rows}
    goals = []
    if "arith" in by:
        r = by["arith"]
        goals.append(f"| stage-1 scan >= 20x faster than naive, Arithmetic | {r['ratio']:.1f}x | "
                     f"{'met' if r['ratio'] >= 20 else 'missed'} |")
    if "boolq" in by:
        r = by["boolq"]
        goals.append(f"| stage-1 scan >= 5x faster than naive, BoolQ | {r['ratio']:.1f}x | "
                     f"{'met' if r['ratio'] >= 5 else 'missed'} |")
    goals.append("| identical per-head gains | " + ", ".join(f"{r['key']}: {'yes' if r['identical'] else 'NO'}" for r in rows)
                 + f" | {'met' if all(r['identical'] for r in rows) else 'missed'} |")
    eff = [(r["key"], r["efficiency"], r["efficiency_cpu"]) for r in rows]
    goals.append("| efficiency >= 0.8 of the compute floor (wall / CPU; judged on CPU time) | "
                 + ", ".join(f"{k}: {w:.2f} / {c:.2f}" for k, w, c in eff) + " | "
                 + ", ".join(f"{k} {'met' if c >= 0.8 else 'missed'}" for k, w, c in eff) + " |")
    goals.append("| store within its budget | " + ", ".join(f"{r['key']}: {_mib(r['store_bytes'])} MiB" for r in rows)
                 + f" of {_mib(STORE_BUDGET)} MiB | {'met' if all(r['store_bytes'] <= STORE_BUDGET for r in rows) else 'missed'} |")

    flops = ["| case | naive GFLOP / evaluation | cel_lens GFLOP / scan | FLOP ratio naive/cel_lens | measured ratio | "
             "naive GFLOP/s | cel_lens GFLOP/s | tokens (real / padded) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flops.append(f"| {r['key']} | {r['naive_flops_per_eval'] / 1e9:.3g} | {r['cel_flops'] / 1e9:.4g} | "
                     f"{r['flop_ratio']:.2f} | {r['ratio']:.2f} | {r['naive_gflops_per_s']:.3g} | {r['cel_gflops_per_s']:.3g} | "
                     f"{r['tokens_real']} / {r['tokens_padded']} |")
    nocache = [r for r in rows if "ratio_nocache" in r]
    m = machine_before
    lines = [
        "# Benchmarks: cel_lens stage-1 exact scan vs the naive loop and the compute floor",
        "",
        f"Written by `{' '.join(['python -m benchmarks.run', *argv])}` on {cfg.get('date', '?')}"
        f" in {cfg['total_s'] / 60:.1f} min. Raw numbers: `benchmarks/results.json`.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores, {_mib(m['memory_bytes'])} MiB RAM; {m['platform']}",
        f"- torch {m['torch']} ({m['torch_threads']} thread(s) for every run: the machine is shared; with 2 OpenMP "
        "threads and other processes on the two cores, every tensor op waited on a descheduled thread and ran ~7x slower)",
        f"- Python {m['python']}, transformer_lens {m['transformer_lens']}, transformers {m['transformers']}",
        f"- load average (1, 5, 15 min) at start {tuple(round(x, 2) for x in m['loadavg'])}, at end "
        f"{tuple(round(x, 2) for x in machine_after['loadavg'])}: other processes shared the machine, so wall times "
        "carry noise; naive and cel_lens runs alternate within one process, and the CPU-time ratio is given beside the "
        "wall-time ratio",
        "",
        "## What is compared",
        "",
        f"- **Model**: {cfg['model']} (`benchmarks/workload.py`: `cel_lens.testing.tiny_hooked_transformer` at this "
        "shape, gated MLP with d_mlp = 2 d_model, float32). The tokenizer is a byte-level BPE trained on the offline "
        "task files with digits one per token (Qwen2.5's convention), so an Arithmetic answer is several tokens.",
        "- **Naive** (`benchmarks/naive.py`): TransformerLens `run_with_hooks` with one zeroing hook "
        "(`z[:, :, head] = 0` at `hook_z`) per evaluation, batches of 8, every pass from the embedding through every "
        "layer. Arithmetic: greedy generation with TransformerLens' key/value cache, left padded, stopped after the "
        "answer's token count; correct iff the generated tokens are the answer's. BoolQ: one right-padded row per "
        "choice, full logits, `log_softmax`, summed log-likelihood, argmax. Inputs are tokenized once and sorted by "
        "length (as lm-eval does).",
        "- **cel_lens**: `exact_scores(LocalOracle(model, task, batch_size=8, store_budget=256 MiB))`: the "
        "activation store is built (one intact pass) inside the timed region, then every single-head ablation runs "
        "as a batched variant resumed from the store at its layer, scoring teacher-forced (Arithmetic) or by one "
        "shared context pass per example (BoolQ's one-token choices).",
        "- **Compute floor**: one intact forward pass over D_dist (cel_lens's encoding and batch shape: each batch "
        "repeated as many times as the scan puts variants in one forward, time divided by that), times the number "
        "of heads, times (L+1)/(2L). **Efficiency** = floor / cel_lens scan time (store build included).",
        f"- Medians over {rows[0]['reps'] if rows else '?'} repetitions, naive and cel_lens alternating (naive first in "
        "even repetitions). Peak RSS: the process's peak resident memory above its level at the start of the run "
        "(Linux `clear_refs` resets the peak before each run).",
        "- `*` naive total extrapolated: the naive scan ran on a few heads per repetition (one per evenly spaced "
        "layer, a different head index each repetition) plus the intact model, and its total is the per-evaluation "
        "median times (heads + 1). Its cost does not depend on the head: every evaluation is the same full passes. "
        "Gains were compared on every head the naive scan ran.",
        "",
        "## Results",
        "",
        table(rows),
        "",
        "## Goals (issue 7)",
        "",
        "| goal | measured | |",
        "|---|---|---|",
        *goals,
        "",
    ]
    if nocache:
        lines += ["Naive Arithmetic *without* a key/value cache (each generated token re-runs the whole sequence, "
                  "the literal reading of 'full forward passes'):", ""]
        for r in nocache:
            lines.append(f"- {r['key']}: {r['nocache_eval_s'] * 1000:.0f} ms per evaluation, {r['nocache_s']:.1f} s for "
                         f"the scan (extrapolated), **{r['ratio_nocache']:.1f}x** cel_lens's time "
                         f"(FLOP ratio {r['flop_ratio_nocache']:.1f}).")
        lines.append("")
    lines += [
        "## Why: FLOPs",
        "",
        "On a CPU both loops are compute-bound, so the speed-up is bounded by how much less arithmetic cel_lens "
        "does. Analytic forward FLOPs (`benchmarks/measure.py`: projections, attention over the padded width, "
        "gated MLP, unembedding of what each method unembeds; padding counted):",
        "",
        *flops,
        "",
        "cel_lens saves (a) the layers below each head's layer, (L-1)/(2L) of the layer work on average, "
        "(b) the generation loop (one teacher-forced pass instead of a prompt pass plus one pass per answer token), "
        "(c) the second row per BoolQ example (both one-token choices read the context's last position), "
        "(d) logits at unscored positions. What remains is the floor: ~(L+1)/(2L) of an intact pass per head.",
        "",
        *_reading(by),
    ]
    if prof:
        lines += [f"## Where cel_lens's scan spends its time (Arithmetic, one profiled run, {prof['wall_s']:.1f} s wall "
                  "under the profiler)", "", "| part | seconds | share |", "|---|---|---|"]
        total = sum(prof["groups"].values())
        for g, s in sorted(prof["groups"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {g} | {s:.2f} | {100 * s / total:.0f}% |")
        lines += ["", "Top ops by self CPU time: " + ", ".join(f"`{k}` {s:.2f} s ({c} calls)" for k, s, c in prof["top"]), ""]
    if scale:
        a1, b1, r1 = _fit([(p[0], p[2]) for p in scale["by_heads"]])
        a2, b2, r2 = _fit([(p[0], p[2]) for p in scale["by_n"]])
        lines += [
            "## Scaling (cel_lens scan, Arithmetic)",
            "",
            "One run a point; the largest point is the table's median. CPU seconds are the steadier measure on this "
            "shared machine (one thread: on an idle machine wall = CPU).",
            "",
            "| heads scanned | CPU s | wall s |", "|---|---|---|",
            *[f"| {n} | {c:.2f} | {w:.2f} |" for n, w, c in sorted(scale["by_heads"])],
            "",
            f"Least squares (CPU): {a1:.2f} s + {b1 * 1000:.0f} ms x heads, R^2 = {r1:.3f}.",
            "",
            "| \\|D_dist\\| | CPU s | wall s |", "|---|---|---|",
            *[f"| {n} | {c:.2f} | {w:.2f} |" for n, w, c in sorted(scale["by_n"])],
            "",
            f"Least squares (CPU): {a2:.2f} s + {b2 * 1000:.0f} ms x examples, R^2 = {r2:.3f}.",
            "",
            "![scaling](../figures/bench_scaling.png)" if any(p.suffix == ".png" for p in figure_paths)
            else "Figure: `figures/bench_scaling.html` (PNG export unavailable on this machine).",
            "",
        ]
    lines += ["## Notes", ""]
    for r in rows:
        for n in r["notes"]:
            lines.append(f"- {r['key']}: {n}.")
        lines.append(f"- {r['key']}: intact accuracy {r['intact_acc']:.3f}; gains from {r['gains_min']:+.4f} to "
                     f"{r['gains_max']:+.4f} ({r['gains_distinct']} distinct values); store keeps layers "
                     f"{r['store_layers']} + layer 0 from the tokens; {r['variants_per_forward']} variants per forward.")
        if r["mismatches"]:
            lines.append(f"- {r['key']}: MISMATCHES: " + "; ".join(r["mismatches"]))
    if cfg.get("organism_skipped"):
        lines.append(f"- organism not benchmarked: `load_organism()` failed ({cfg['organism_skipped']}).")
    lines += ["", "## GPU (H200)", ""]
    if GPU_JSON.is_file():
        g = json.loads(GPU_JSON.read_text())
        naive = (f"{g['naive_scan_s']:.0f} (from {g['naive_evals']} evaluations on {g['naive_prompts']} prompts) | "
                 f"**{g['ratio_vs_naive']:.1f}x**") if g.get("naive_scan_s") else "not measured | n/a"
        lines += [
            f"`benchmarks/gpu_scan.py` on {g.get('device')}: {g['shape']['n_layers']} layers x {g['shape']['n_heads']} heads, "
            f"{g['dtype']}, {g['n_prompts']} Arithmetic prompts ({g['prompts']}); "
            f"{'extrapolated from layers ' + str(g['layers_measured']) if g['extrapolated'] else 'every layer measured'}; "
            f"{g['wall_s']:.0f} s for the whole script.",
            "",
            f"| scan s | per head ms | tokens/s | TFLOP/s | fraction of {g['peak_tflops']:.0f} TFLOP/s | floor s | efficiency "
            "| store GiB | naive scan s (extrapolated) | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {g['scan_s']:.1f} | {g['per_head_ms']:.1f} | {g['tokens_per_s']:.3g} | {g['scan_tflops']:.1f} | "
            f"{g['fraction_of_peak']:.3f} | {g['floor_s']:.1f} | {g['efficiency']:.2f} | {g['store_bytes'] / 2**30:.2f} | {naive} |",
            "",
        ]
    else:
        lines += ["Not run here (no GPU on this machine). On an H200: `python benchmarks/gpu_scan.py` (prints one JSON "
                  "line; with `OUT` set, also `$OUT/gpu_scan.json`; copy it to `benchmarks/gpu_scan.json` and rerun "
                  "`make bench` to include it here).", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the suite; 0 when every case's gains were identical, 1 otherwise."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model and splits, < 1 minute, writes nothing")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per case (>= 3 for medians)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: see RESULTS.md)")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--only", default=None, help="comma list of cases to run (arith, boolq, organism)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md from results.json (and gpu_scan.json) without running anything")
    args = ap.parse_args(argv)
    argv_used = list(argv if argv is not None else sys.argv[1:])
    if args.report_only:
        rec = json.loads(RESULTS_JSON.read_text())
        figs = [p for p in (FIGURE.with_suffix(".html"), FIGURE.with_suffix(".png")) if p.is_file()]
        RESULTS_MD.write_text(write_results(rec["cases"], rec["config"], rec["profile"], rec["scaling"], rec["machine"],
                                            rec["machine_after"], figs, rec["config"].get("argv", [])))
        print(f"wrote {RESULTS_MD.relative_to(REPO)} from {RESULTS_JSON.relative_to(REPO)}")
        return 0
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", flush=True)

    machine_before = machine_info()
    cases, cfg = build_cases(args.quick, log)
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c.key in keep]
    rows = []
    for case in cases:
        log(f"case {case.key}: {case.model_label} / {case.task_label}, |D_dist| = {len(case.task.dist)}")
        rows.append(run_case(case, args.reps, log))
    prof = scale = None
    figure_paths: list[Path] = []
    arith = next((c for c in cases if c.key == "arith"), None)
    if not args.quick and arith is not None:
        r = next(r for r in rows if r["key"] == "arith")
        if not args.no_profile:
            log("profiling one cel_lens scan")
            prof = profile_scan(arith.model, arith.task)
        if not args.no_scaling:
            log("scaling")
            n = len(arith.task.dist)
            scale = scaling(arith.model, arith.task, (r["n_heads"], n, r["cel_s"], r["cel_cpu_s"]),
                            n_points=(n // 4, n // 2))
            figure_paths = scaling_figure(scale, r["intact_pass_cpu_s"], r["n_layers"], FIGURE)
    print()
    print(table(rows))
    print_summary(rows, log)
    cfg["total_s"] = time.perf_counter() - t_start
    cfg["date"] = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    cfg["argv"] = argv_used
    if not args.quick:
        record = {"config": cfg, "machine": machine_before, "machine_after": machine_info(), "cases": rows,
                  "profile": prof, "scaling": scale}
        RESULTS_JSON.write_text(json.dumps(record, indent=1, default=str) + "\n")
        RESULTS_MD.write_text(write_results(rows, cfg, prof, scale, machine_before, machine_info(), figure_paths, argv_used))
        log(f"wrote {RESULTS_MD.relative_to(REPO)}, {RESULTS_JSON.relative_to(REPO)}"
            + (f", {', '.join(str(p.relative_to(REPO)) for p in figure_paths)}" if figure_paths else ""))
    bad = [r["key"] for r in rows if not r["identical"]]
    if bad:
        print(f"FAILED: per-head gains differ between naive and cel_lens for {', '.join(bad)}", file=sys.stderr)
        for r in rows:
            for mm in r["mismatches"]:
                print(f"  {r['key']}: {mm}", file=sys.stderr)
        return 1
    log("per-head gains identical (naive vs cel_lens) in every case")
    return 0


if __name__ == "__main__":
    sys.exit(main())

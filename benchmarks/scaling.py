"""Where cel_lens's scan spends its time (profile) and how it scales with heads and |D_dist|."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import torch

from benchmarks.measure import measure, own_pass_seconds
from benchmarks.scan import cel_scan

__all__ = ["profile_scan", "scaling", "scaling_figure", "fit_line", "variants"]


def variants(batch, n_heads: int) -> int:
    """Variants of one layer cel_lens puts in one forward pass of ``batch`` (default budget)."""
    from cel_lens.evaluation.encode import default_max_tokens
    from cel_lens.evaluation.teacher_forced import variants_per_pass

    return max(1, min(n_heads, variants_per_pass(batch, default_max_tokens(8))))


_GROUPS = {
    "matmul (projections, MLP, attention, unembedding)": ("addmm", "mm", "bmm", "matmul", "linear", "einsum", "baddbmm"),
    "softmax and attention masking": ("softmax", "_softmax", "where", "masked_fill", "ne", "fill_", "triu", "tril"),
    "copies (repeat, cat, contiguous, gather, index)": ("copy_", "cat", "repeat", "expand", "clone", "gather", "index", "contiguous", "stack", "_to_copy"),
}


def profile_scan(model, task) -> dict[str, Any]:
    """Where cel_lens's scan spends its time: torch profiler self-CPU time by op group, and the rest
    of the CPU time (Python, hooks, dispatch, profiler overhead)."""
    from torch.profiler import ProfilerActivity, profile


    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.process_time()
        _, oracle = cel_scan(model, task)
        wall = time.process_time() - t0
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
        floors.append((n, own_pass_seconds(model, store.batches, variants(store.batches[0], H))))
        by_n.append((n, m.wall_s, m.cpu_s))
        del oracle, store
        m.value = None
    by_n.append((n_full, wall_full, cpu_full))
    return {"by_heads": by_heads, "by_n": by_n, "floor_pass_cpu_by_n": floors, "columns": ["x", "wall_s", "cpu_s"]}


def fit_line(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares line ``y = a + b x`` and its R^2."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return a, b, r2


def scaling_figure(scale: dict[str, Any], floor_pass_cpu: float, L: int, path_stem: Path, caption: str = "") -> list[Path]:
    """Two panels (CPU seconds against heads, against |D_dist|; wall seconds as open markers) with
    least-squares lines and the compute floor, ``caption`` below (the run's own numbers, e.g.
    :func:`benchmarks.bounds.limit_caption`); saved as HTML and PNG by
    :func:`cel_lens.report.save_figure`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from cel_lens.report.save import save_figure

    fig = make_subplots(rows=1, cols=2, subplot_titles=("scan time vs heads scanned", "scan time vs |D_dist|"))
    heads_max = max(p[0] for p in scale["by_heads"])
    for col, key, xlabel in ((1, "by_heads", "heads scanned"), (2, "by_n", "|D_dist| (examples)")):
        pts = sorted(scale[key])
        xs = [p[0] for p in pts]
        a, b, r2 = fit_line([(p[0], p[2]) for p in pts])
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
                                     name="floor: N (L+1)/(2L) intact passes (CPU s)", line=dict(color="#d62728", dash="dash")),
                          row=1, col=col)
        else:
            fl = sorted(scale["floor_pass_cpu_by_n"]) + [(max(xs), floor_pass_cpu)]
            fig.add_trace(go.Scatter(x=[n for n, _ in fl], y=[f * heads_max * (L + 1) / (2 * L) for _, f in fl],
                                     mode="lines+markers", name="floor", showlegend=False,
                                     line=dict(color="#d62728", dash="dash")), row=1, col=col)
        fig.update_xaxes(title_text=xlabel, rangemode="tozero", row=1, col=col)
        fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=col)
    fig.update_layout(width=1100, height=500, template="plotly_white", margin=dict(b=130),
                      title="cel_lens stage-1 exact scan (random 8x8 Llama checkpoint, HookedTransformer, Arithmetic): linear in heads and |D_dist|")
    if caption:
        fig.add_annotation(text=caption, x=0.0, y=-0.3, xref="paper", yref="paper", xanchor="left", yanchor="top",
                           showarrow=False, align="left", font=dict(size=11, color="#444444"))
    return save_figure(fig, path_stem)



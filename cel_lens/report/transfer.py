"""Does selection on D_dist transfer to D_test? Discovery gain against post-hoc test gain of every
evaluated subset, with the random-subset null as a band."""

from __future__ import annotations

from typing import Optional

import numpy as np
import plotly.graph_objects as go
from scipy.stats import spearmanr

from cel_lens.heads import HeadSet
from cel_lens.report.data import ResultLike, null_gains, ranked_subsets, result_dict
from cel_lens.report.style import FONT, NULL_COLOUR, SELECTED_COLOUR, as_float
from cel_lens.selection.result import format_p

__all__ = ["plot_discovery_vs_test"]


def _add_null_band(fig: go.Figure, null: list[float], size: int, lo: float, hi: float) -> None:
    """The null's 95% range on test as a band across ``[lo, hi]``, and its mean as a dotted line."""
    q_lo, q_hi = float(np.quantile(null, 0.025)), float(np.quantile(null, 0.975))
    fig.add_trace(
        go.Scatter(
            x=[lo, hi, hi, lo, lo], y=[q_lo, q_lo, q_hi, q_hi, q_lo], fill="toself", mode="lines",
            line=dict(width=0), fillcolor=NULL_COLOUR, hoverinfo="skip",
            name=f"null: random {size}-head sets on test, 95% range (n={len(null)})",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[lo, hi], y=[float(np.mean(null))] * 2, mode="lines", line=dict(color="#666666", dash="dot"),
            name="null mean", hoverinfo="skip",
        )
    )


def plot_discovery_vs_test(obj: ResultLike, *, title: Optional[str] = None) -> go.Figure:
    """Discovery gain vs post-hoc test gain of every evaluated subset (selected one starred), the
    y = x line, and the random-subset null (its 95% range on test) as a horizontal band."""
    r = result_dict(obj)
    selected = str(HeadSet.parse(r.get("heads")))
    pts = [
        s for s in ranked_subsets(r)
        if s.get("test_gain_posthoc") is not None and s.get("dist_gain") is not None
    ]
    xs = np.array([as_float(s["dist_gain"]) for s in pts])
    ys = np.array([as_float(s["test_gain_posthoc"]) for s in pts])
    null = null_gains(r)

    fig = go.Figure()
    vals = [*xs.tolist(), *ys.tolist(), *null, 0.0]
    pad = max(0.08 * (max(vals) - min(vals)), 0.01)
    lo, hi = min(vals) - pad, max(vals) + pad
    fmt = "+.0%" if hi - lo > 0.08 else "+.1%"
    if null:
        _add_null_band(fig, null, len(HeadSet.parse(selected)), lo, hi)
    fig.add_trace(
        go.Scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="black", dash="dash", width=1),
            name="test gain = discovery gain", hoverinfo="skip",
        )
    )
    others = [i for i, s in enumerate(pts) if s["heads"] != selected]
    sel = [i for i, s in enumerate(pts) if s["heads"] == selected]
    star = dict(size=17, symbol="star", color=SELECTED_COLOUR, line=dict(width=1.5, color="black"))
    for idx, name, marker in (
        (others, "pool subsets", dict(size=9, color="#3b6fb6", opacity=0.75)),
        (sel, f"selected Ŝ = {selected}", star),
    ):
        if not idx:
            continue
        fig.add_trace(
            go.Scatter(
                x=xs[idx].tolist(), y=ys[idx].tolist(), mode="markers", marker=marker, name=name,
                customdata=[pts[i]["heads"] for i in idx],
                hovertemplate=(
                    "%{customdata}<br>discovery gain (selection-biased): %{x:+.1%}<br>test gain: %{y:+.1%}<extra></extra>"
                ),
            )
        )
    subtitle = ""
    if len(pts) >= 3 and np.ptp(xs) > 0 and np.ptp(ys) > 0:
        rho, p = spearmanr(xs, ys)
        subtitle = f"<br><sup>Spearman ρ = {rho:.2f} (p={format_p(p)}) over {len(pts)} subsets</sup>"
    fig.update_layout(
        width=820,
        height=660,
        font=FONT,
        template="plotly_white",
        title=dict(text=(title or "Does discovery gain transfer to the test split?") + subtitle, x=0.01),
        xaxis=dict(title="discovery gain (D_dist, selection-biased)", tickformat=fmt, range=[lo, hi], zeroline=True),
        yaxis=dict(title="test gain, post hoc (D_test)", tickformat=fmt, range=[lo, hi], zeroline=True),
        legend=dict(orientation="h", x=0.0, y=-0.14, xanchor="left", yanchor="top"),
        margin=dict(l=80, r=30, t=90, b=140),
    )
    return fig

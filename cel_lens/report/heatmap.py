"""The gain heatmap: what stage 1 saw, what stage 2 chose, and how it fared on the test split.

One figure, three panels side by side: the stage-1 gains over layers x heads (diverging scale
centred at zero; pool heads boxed, the selected heads starred), the evaluated subsets ranked by
discovery accuracy (the selected one highlighted; each labelled with how often stage 2 picks it on
bootstrap resamples of D_dist, its selection stability; discovery numbers are selection-biased),
and the selected subset's test gain with its 95% CI against the random-subset null band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import plotly.graph_objects as go

from cel_lens.heads import HeadSet
from cel_lens.report.data import ResultLike, is_accuracy_scorer, null_gains, ranked_subsets, result_dict, stage1_scores
from cel_lens.report.style import (
    DIVERGING,
    FONT,
    NULL_COLOUR,
    OTHER_COLOUR,
    POOL_COLOUR,
    SELECTED_COLOUR,
    as_float,
    tick_step,
)
from cel_lens.selection.result import format_p, pp

__all__ = ["plot_gain_heatmap", "heatmap_title", "stability_wins"]

_STAR = dict(symbol="star", color=SELECTED_COLOUR, line=dict(width=1.5, color="black"))


@dataclass(frozen=True)
class _Geometry:
    """Figure size and the x domains of the three panels (heatmap, subsets, test gain): the gap
    between heatmap and subsets holds the colourbar (~125 px) and the subset labels."""

    n_layers: int
    n_heads: int
    plot_h: int
    width: int
    height: int
    d_heat: tuple[float, float]
    d_sub: tuple[float, float]
    d_gain: tuple[float, float]

    @property
    def marker_size(self) -> int:
        """Size of the pool and selected markers: most of one heatmap cell."""
        cell_w = (self.width - 90) * (self.d_heat[1] - self.d_heat[0]) / max(self.n_heads, 1)
        return max(6, int(0.62 * min(self.plot_h / max(self.n_layers, 1), cell_w)))


def _geometry(n_layers: int, n_heads: int, ranked: list[dict[str, Any]], shown: list[dict[str, Any]]) -> _Geometry:
    """Cells of 14-40 px a layer, a row a shown subset, and room for the longest subset label."""
    cell = max(14, min(40, 560 // max(n_layers, 1)))
    plot_h = max(300, cell * n_layers, 19 * len(shown))
    label_px = 7 * max([len(f"#{len(ranked)} {s['heads']}") for s in shown] or [0])
    width = max(1350, int((125 + label_px) / 0.17) + 90)
    d_sub, d_gain = (0.615, 0.835), (0.905, 1.0)
    d_heat = (0.0, d_sub[0] - (125 + label_px) / (width - 90))
    return _Geometry(n_layers, n_heads, plot_h, width, plot_h + 210, d_heat, d_sub, d_gain)


def _add_scores(fig: go.Figure, scores: np.ndarray, scorer: str, geo: _Geometry) -> None:
    """The stage-1 gains as a heatmap centred at zero, each cell named ``L{l}H{h}`` on hover."""
    acc_units = is_accuracy_scorer(scorer)
    zfmt = "+.2%" if acc_units else "+.3g"
    fig.add_trace(
        go.Heatmap(
            z=scores.tolist(),
            x=list(range(geo.n_heads)),
            y=list(range(geo.n_layers)),
            customdata=[[f"L{l}H{h}" for h in range(geo.n_heads)] for l in range(geo.n_layers)],
            colorscale=DIVERGING,
            zmid=0.0,
            colorbar=dict(
                title=dict(text=f"stage-1 gain<br>({scorer})", side="top"),
                x=geo.d_heat[1] + 0.01,
                xanchor="left",
                len=0.9,
                thickness=14,
                tickformat=".1%" if acc_units else ".2g",
            ),
            hovertemplate=f"%{{customdata}}<br>gain: %{{z:{zfmt}}}<br>scorer: {scorer}<extra></extra>",
            name="stage-1 gain",
            xaxis="x",
            yaxis="y",
        )
    )


def _add_marked_heads(
    fig: go.Figure, scores: np.ndarray, scorer: str, pool: HeadSet, selected: HeadSet, size: int
) -> None:
    """Markers on the heatmap: the rest of the candidate pool boxed, the selected heads starred."""
    zfmt = "+.2%" if is_accuracy_scorer(scorer) else "+.3g"
    pool_marker = dict(symbol="square-open", color=POOL_COLOUR, line=dict(width=2))
    for marked, tag, name, marker in (
        ([h for h in pool if h not in selected], "pool", "candidate pool", pool_marker),
        (list(selected), "selected", f"selected Ŝ = {selected}", _STAR),
    ):
        if not marked:
            continue
        fig.add_trace(
            go.Scatter(
                x=[h.head for h in marked],
                y=[h.layer for h in marked],
                mode="markers",
                marker=dict(marker, size=size),
                name=name,
                customdata=[[str(h), float(scores[h.layer, h.head])] for h in marked],
                hovertemplate=f"%{{customdata[0]}} ({tag})<br>gain: %{{customdata[1]:{zfmt}}}<extra></extra>",
                xaxis="x",
                yaxis="y",
            )
        )


def stability_wins(r: Mapping[str, Any]) -> Optional[dict[str, float]]:
    """How often each subset won stage 2 on bootstrap resamples of D_dist (canonical heads ->
    fraction; subsets that never won are absent), or ``None`` when the result has no stability."""
    st = r.get("selection_stability")
    if not st:
        return None
    return {str(HeadSet.parse(w["heads"])): float(w["frequency"]) for w in st.get("wins", [])}


def _add_ranked_subsets(
    fig: go.Figure, ranked: list[dict[str, Any]], shown: list[dict[str, Any]], selected: HeadSet, r: Mapping[str, Any]
) -> None:
    """The shown subsets by discovery accuracy (rank in the label, the selected one starred, each
    marked with its selection stability) and the intact model's discovery accuracy as a dashed line."""
    if not shown:
        return
    is_sel = [s["heads"] == str(selected) for s in shown]
    wins = stability_wins(r)
    won = [wins.get(s["heads"], 0.0) if wins is not None else float("nan") for s in shown]
    fig.add_trace(
        go.Scatter(
            x=[as_float(s.get("dist_acc")) for s in shown],
            y=[f"#{ranked.index(s) + 1} {s['heads']}" for s in shown],
            mode="markers+text" if wins is not None else "markers",
            text=[f"{w:.0%}" for w in won] if wins is not None else None,
            textposition="middle right",
            textfont=dict(size=10, color="#555555"),
            cliponaxis=False,  # the best subset's label may run past the axis into the gap
            marker=dict(
                size=[13 if sel else 8 for sel in is_sel],
                color=[SELECTED_COLOUR if sel else OTHER_COLOUR for sel in is_sel],
                symbol=["star" if sel else "circle" for sel in is_sel],
                line=dict(width=[1.5 if sel else 0 for sel in is_sel], color="black"),
            ),
            customdata=[
                [s["heads"], as_float(s.get("dist_gain")), as_float(s.get("test_gain_posthoc")), w]
                for s, w in zip(shown, won)
            ],
            hovertemplate=(
                "%{customdata[0]}<br>discovery acc: %{x:.1%}<br>discovery gain: %{customdata[1]:+.1%} "
                "(selection-biased)<br>test gain (post hoc): %{customdata[2]:+.1%}"
                + ("<br>selected on %{customdata[3]:.0%} of bootstrap resamples of D_dist" if wins is not None else "")
                + "<extra></extra>"
            ),
            name="subsets (discovery)",
            showlegend=False,
            xaxis="x2",
            yaxis="y2",
        )
    )
    intact = r.get("dist_acc_intact")
    if intact is not None:
        fig.add_shape(
            type="line", xref="x2", yref="y2 domain", x0=float(intact), x1=float(intact), y0=0, y1=1,
            line=dict(color="black", dash="dash", width=1.2),
        )
        fig.add_annotation(
            x=float(intact), y=0.0, xref="x2", yref="y2 domain", text="intact", showarrow=False,
            xanchor="left", yanchor="bottom", xshift=3, font=dict(size=11),
        )


def _add_test_gain(fig: go.Figure, r: Mapping[str, Any], selected: HeadSet) -> None:
    """The selected subset's test gain with its CI as error bars, over the null's 95% band."""
    null = null_gains(r)
    if null:
        lo, hi = float(np.quantile(null, 0.025)), float(np.quantile(null, 0.975))
        fig.add_shape(
            type="rect", xref="x3 domain", yref="y3", x0=0, x1=1, y0=lo, y1=hi, fillcolor=NULL_COLOUR,
            line=dict(width=0), layer="below",
        )
        fig.add_annotation(
            x=0.0, y=hi, xref="x3 domain", yref="y3", text="null 95%", showarrow=False, xanchor="left",
            yanchor="bottom", font=dict(size=10, color="#555555"),
        )
    fig.add_shape(type="line", xref="x3 domain", yref="y3", x0=0, x1=1, y0=0, y1=0, line=dict(color="black", width=1))
    if r.get("gain") is None:
        return
    g, lo_ci, hi_ci = as_float(r.get("gain")), as_float(r.get("ci_low")), as_float(r.get("ci_high"))
    has_ci = not (math.isnan(lo_ci) or math.isnan(hi_ci))
    fig.add_trace(
        go.Scatter(
            x=[f"{pp(g)}<br>[{pp(lo_ci)},<br>{pp(hi_ci)}]" if has_ci else pp(g)],
            y=[g],
            mode="markers",
            marker=dict(_STAR, size=15),
            error_y=dict(
                type="data", symmetric=False, array=[hi_ci - g if has_ci else 0],
                arrayminus=[g - lo_ci if has_ci else 0], color="black", thickness=1.5, width=8,
            ),
            hovertemplate=(
                f"{selected}<br>test gain: {pp(g)}<br>95% CI [{pp(lo_ci)}, {pp(hi_ci)}]"
                f"<br>McNemar p={format_p(r.get('p_value'))}<extra></extra>"
            ),
            name="test gain (95% CI)",
            showlegend=False,
            xaxis="x3",
            yaxis="y3",
        )
    )


def _padded(values: list[float], frac: float) -> list[float]:
    """``[min, max]`` of the non-NaN ``values`` widened by ``frac`` of their spread (at least 0.01)."""
    values = [v for v in values if not math.isnan(v)] or [0.0]
    pad = max(frac * (max(values) - min(values)), 0.01)
    return [min(values) - pad, max(values) + pad]


def _axes(r: Mapping[str, Any], geo: _Geometry, shown: list[dict[str, Any]]) -> dict[str, Any]:
    """The layout's six axes: heatmap (x, y), subsets (x2, y2) and test gain (x3, y3)."""
    gain_range = _padded([as_float(r.get(k)) for k in ("gain", "ci_low", "ci_high")] + null_gains(r) + [0.0], 0.15)
    intact = r.get("dist_acc_intact")
    acc_range = _padded([as_float(s.get("dist_acc")) for s in shown] + ([float(intact)] if intact is not None else []), 0.08)
    return dict(
        xaxis=dict(
            domain=list(geo.d_heat), title="head", tickmode="linear", dtick=tick_step(geo.n_heads),
            showgrid=False, zeroline=False, constrain="domain",
        ),
        yaxis=dict(
            title="layer", autorange="reversed", tickmode="linear", dtick=tick_step(geo.n_layers),
            showgrid=False, zeroline=False,
        ),
        xaxis2=dict(
            domain=list(geo.d_sub), title="discovery accuracy", anchor="y2",
            tickformat=".0%" if acc_range[1] - acc_range[0] > 0.08 else ".1%", range=acc_range,
        ),
        yaxis2=dict(anchor="x2", autorange="reversed", type="category", tickfont=dict(size=11), dtick=1),
        xaxis3=dict(domain=list(geo.d_gain), anchor="y3", type="category"),
        yaxis3=dict(
            anchor="x3", title=dict(text="test gain", standoff=4), tickformat="+.1%", zeroline=False, range=gain_range,
        ),
    )


def heatmap_title(r: Mapping[str, Any], selected: HeadSet) -> str:
    """The gain heatmap's default title: S-hat, its test accuracies, gain, CI and McNemar p."""
    return (
        f"Ŝ = {selected}: test accuracy {pp(r.get('test_acc_intact'), False)} -> "
        f"{pp(r.get('test_acc_ablated'), False)}, gain {pp(r.get('gain'))} "
        f"[{pp(r.get('ci_low'))}, {pp(r.get('ci_high'))}], p={format_p(r.get('p_value'))}"
    )


def _subset_heading(r: Mapping[str, Any], shown: int, total: int) -> str:
    """The subset panel's heading: what is ranked, that it is selection-biased, what the % are."""
    st = r.get("selection_stability")
    wins = f"; % = selected on {st['n_resamples']} resamples of D_dist" if st else ""
    return f"subsets by discovery accuracy (top {shown} of {total})<br><sup>selection-biased{wins}</sup>"


def plot_gain_heatmap(obj: ResultLike, *, max_subsets: int = 20, title: Optional[str] = None) -> go.Figure:
    """Stage-1 gains as a layer x head heatmap (diverging, centred at zero; pool heads boxed, the
    selected heads starred), the evaluated subsets ranked by discovery accuracy (selected one
    highlighted, top ``max_subsets`` shown, each with its selection stability) and the selected
    subset's test gain with its 95% CI against the random-subset null band."""
    r = result_dict(obj)
    scores = stage1_scores(r)
    scorer = str(r.get("scorer", "?"))
    selected = HeadSet.parse(r.get("heads"))
    ranked = ranked_subsets(r)
    shown = ranked[:max_subsets]
    if selected and str(selected) not in {s["heads"] for s in shown}:
        shown += [s for s in ranked if s["heads"] == str(selected)]
    geo = _geometry(*scores.shape, ranked, shown)

    fig = go.Figure()
    _add_scores(fig, scores, scorer, geo)
    _add_marked_heads(fig, scores, scorer, HeadSet.parse(r.get("pool") or []), selected, geo.marker_size)
    _add_ranked_subsets(fig, ranked, shown, selected, r)
    _add_test_gain(fig, r, selected)
    fig.update_layout(
        width=geo.width,
        height=geo.height,
        font=FONT,
        template="plotly_white",
        title=dict(text=title or heatmap_title(r, selected), x=0.01, xanchor="left", font=dict(size=16)),
        margin=dict(l=70, r=20, t=95, b=120),
        legend=dict(orientation="h", x=0.0, y=0.02, xanchor="left", yanchor="bottom", yref="container"),
        **_axes(r, geo, shown),
    )
    for text, (a, b) in (
        (f"stage-1 gains ({geo.n_layers} layers x {geo.n_heads} heads)", geo.d_heat),
        (_subset_heading(r, len(shown), len(ranked)), geo.d_sub),
        ("Ŝ on test", geo.d_gain),
    ):
        fig.add_annotation(
            text=f"<b>{text}</b>", x=(a + b) / 2, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
            showarrow=False, font=dict(size=13), yshift=6,
        )
    return fig

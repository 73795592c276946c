"""Attention patterns, intact vs ablated, as figures: which heads attend differently once the
selected heads are zeroed, and what each chosen head looks at.

Figures take an :class:`AttentionPatterns` (token strings and ``[layer, head, query, key]``
tensors) and never run a model; :func:`cel_lens.analysis.attention_patterns` records one.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Optional, Sequence

import plotly.graph_objects as go
import torch
from jaxtyping import Float
from plotly.subplots import make_subplots
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.report.style import DIVERGING, FONT, SELECTED_COLOUR, tick_step

__all__ = [
    "AttentionPatterns", "pattern_change", "plot_pattern_change", "plot_attention_patterns", "plot_direct_effect",
    "default_heads", "token_label",
]


@dataclass(frozen=True)
class AttentionPatterns:
    """Attention patterns of one example, intact and with ``ablated_heads`` zero-ablated.

    ``intact`` and ``ablated`` are ``[layer, head, query, key]`` (query heads; rows sum to one over
    the causal keys); ``tokens`` are the string tokens. ``direct_effect`` (optional) is what
    ablating each of ``ablated_heads`` (rows, in order) does to the logits of ``logit_tokens`` at
    position ``logit_position`` through the direct path alone (token ids ``logit_token_ids``);
    ``answer_index`` marks the example's answer among ``logit_tokens``.
    """

    tokens: list[str]
    ablated_heads: HeadSet
    intact: Float[Tensor, "layer head query key"]
    ablated: Float[Tensor, "layer head query key"]
    logit_position: Optional[int] = None
    logit_tokens: Sequence[str] = ()
    logit_token_ids: Sequence[int] = ()
    direct_effect: Optional[Float[Tensor, "ablated token"]] = None
    answer_index: Optional[int] = None


def pattern_change(patterns: AttentionPatterns) -> Float[Tensor, "layer head"]:
    """How much each head's pattern moves under the ablation: total-variation distance between
    intact and ablated attention rows, averaged over query positions (0 = unchanged, 1 = disjoint)."""
    tv = 0.5 * (patterns.ablated - patterns.intact).abs().sum(-1)
    return tv.mean(-1)


def plot_pattern_change(patterns: AttentionPatterns, *, title: Optional[str] = None) -> go.Figure:
    """Layer x head heatmap of :func:`pattern_change`: which heads attend differently once the
    ablated heads (starred) are zeroed. Layers up to the first ablated one cannot change."""
    change = pattern_change(patterns).numpy()
    n_layers, n_heads = change.shape
    fig = go.Figure(
        go.Heatmap(
            z=change.tolist(), x=list(range(n_heads)), y=list(range(n_layers)), colorscale="Viridis",
            zmin=0.0, colorbar=dict(title="mean TV<br>distance"),
            customdata=[[f"L{l}H{h}" for h in range(n_heads)] for l in range(n_layers)],
            hovertemplate="%{customdata}<br>pattern change: %{z:.3f}<extra></extra>",
        )
    )
    if patterns.ablated_heads:
        fig.add_trace(
            go.Scatter(
                x=[h.head for h in patterns.ablated_heads], y=[h.layer for h in patterns.ablated_heads],
                mode="markers", name=f"ablated: {patterns.ablated_heads}",
                marker=dict(symbol="star", size=16, color=SELECTED_COLOUR, line=dict(width=1.5, color="black")),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        width=560 + 22 * n_heads,
        height=max(360, 28 * n_layers + 180),
        font=FONT,
        template="plotly_white",
        title=dict(text=title or "How much each head's attention moves under the ablation", x=0.01),
        xaxis=dict(title="head", tickmode="linear", dtick=tick_step(n_heads), showgrid=False),
        yaxis=dict(title="layer", autorange="reversed", tickmode="linear", dtick=tick_step(n_layers), showgrid=False),
        legend=dict(orientation="h", x=0.0, y=-0.15, xanchor="left", yanchor="top"),
        margin=dict(l=70, r=30, t=70, b=110),
    )
    return fig


def default_heads(patterns: AttentionPatterns, n_downstream: int) -> list[Head]:
    """The heads worth showing: the ablated ones, then the ``n_downstream`` heads after the first
    ablated layer whose patterns move most (only those that move at all); ``L0H0`` when nothing
    is ablated."""
    chosen = list(patterns.ablated_heads)
    first = patterns.ablated_heads.first_layer
    if first is None or n_downstream <= 0:
        return chosen or [Head(0, 0)]
    change = pattern_change(patterns)
    change[: first + 1] = -1.0  # downstream only: layers after the first ablated one
    order = torch.argsort(change.flatten(), descending=True).tolist()
    n_heads = change.shape[1]
    for i in order[:n_downstream]:
        if change.flatten()[i] > 0:
            chosen.append(Head(i // n_heads, i % n_heads))
    return chosen


def token_label(token: str) -> str:
    """A visible label for a token (spaces and newlines shown), HTML-escaped: plotly reads labels
    as HTML, so a token such as ``<s>`` would otherwise be taken for a tag and swallow the text."""
    text = token.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·")
    text = text if len(text) <= 12 else text[:11] + "…"
    return html.escape(text, quote=False)


def _subplot_titles(patterns: AttentionPatterns, rows: list[Head]) -> list[str]:
    """Three titles a head: intact, ablated (with how far its pattern moved), difference."""
    change = pattern_change(patterns)
    titles: list[str] = []
    for h in rows:
        moved = f"pattern change {change[h.layer, h.head]:.3f}"
        tag = f" (output zeroed; {moved})" if h in patterns.ablated_heads else f" ({moved})"
        titles += [f"{h} intact", f"{h} ablated{tag}", f"{h} ablated - intact"]
    return titles


def _add_head_row(
    fig: go.Figure, row: int, h: Head, patterns: AttentionPatterns, start: int, labels: list[str], diff_max: float
) -> None:
    """Row ``row`` of the grid: head ``h``'s intact pattern, ablated pattern and their difference
    over positions ``start:``; colourbars on the first row only."""
    pos = list(range(start, len(patterns.tokens)))
    n_shown = len(pos)
    a = patterns.intact[h.layer, h.head, start:, start:]
    b = patterns.ablated[h.layer, h.head, start:, start:]
    custom = [[[labels[q], labels[k]] for k in range(n_shown)] for q in range(n_shown)]
    panels = (
        (a, "Blues", 0.0, 1.0, dict(title="attention", x=1.0, y=1.0, yanchor="top", len=0.45, thickness=12)),
        (b, "Blues", 0.0, 1.0, None),
        (b - a, DIVERGING, -diff_max, diff_max, dict(title="ablated - intact", x=1.0, y=0.0, yanchor="bottom", len=0.45, thickness=12)),
    )
    for col, (z, scale, zmin, zmax, cbar) in enumerate(panels, start=1):
        fig.add_trace(
            go.Heatmap(
                z=z.tolist(), x=pos, y=pos, customdata=custom, colorscale=scale, zmin=zmin, zmax=zmax,
                zmid=0.0 if col == 3 else None, showscale=cbar is not None and row == 1, colorbar=cbar,
                hovertemplate="query %{y} %{customdata[0]}<br>key %{x} %{customdata[1]}<br>%{z:.3f}<extra></extra>",
            ),
            row=row, col=col,
        )
        fig.update_xaxes(
            tickmode="array", tickvals=pos, ticktext=labels, tickangle=-90, tickfont=dict(size=9),
            showgrid=False, row=row, col=col,
        )
        fig.update_yaxes(
            tickmode="array", tickvals=pos, ticktext=labels if col == 1 else [""] * n_shown,
            tickfont=dict(size=9), autorange="reversed", showgrid=False, row=row, col=col,
        )


def plot_attention_patterns(
    patterns: AttentionPatterns,
    heads: HeadsLike = None,
    *,
    n_downstream: int = 3,
    max_tokens: int = 40,
    title: Optional[str] = None,
) -> go.Figure:
    """Intact vs ablated attention patterns (and their difference) of ``heads``, one row a head.

    ``heads`` defaults to the ablated heads plus the ``n_downstream`` later heads whose patterns the
    ablation changes most (:func:`default_heads`). Long inputs show their last ``max_tokens``
    positions (queries and keys); the difference panels share one colour scale. When no head's
    pattern moves (nothing reads the ablated heads' output downstream, e.g. they sit in the last
    layer) and ``patterns`` carries direct effects, the figure shows what changed instead:
    :func:`plot_direct_effect`.
    """
    rows = list(HeadSet.parse(heads)) if heads is not None else default_heads(patterns, n_downstream)
    if not rows:
        raise ValueError("no heads to show")
    unmoved = all(float(pattern_change(patterns)[h.layer, h.head]) == 0.0 for h in rows)
    if heads is None and unmoved and patterns.direct_effect is not None:
        return plot_direct_effect(patterns, max_tokens=max_tokens, title=title)
    n_tok = len(patterns.tokens)
    start = max(0, n_tok - max_tokens)
    labels = [token_label(t) for t in patterns.tokens[start:]]
    fig = make_subplots(
        rows=len(rows), cols=3, subplot_titles=_subplot_titles(patterns, rows), horizontal_spacing=0.07,
        vertical_spacing=min(0.12, 0.35 / len(rows)),
    )
    diffs = [patterns.ablated[h.layer, h.head] - patterns.intact[h.layer, h.head] for h in rows]
    diff_max = max([0.0, *(float(d[start:, start:].abs().max()) for d in diffs)]) or 1e-6
    for i, h in enumerate(rows, start=1):
        _add_head_row(fig, i, h, patterns, start, labels, diff_max)
    n_shown = n_tok - start
    side = 300 if n_shown <= 24 else 360
    crop = f", last {n_shown} of {n_tok} tokens" if start else ""
    fig.update_layout(
        width=3 * side + 260,
        height=len(rows) * (side + 110) + 130,
        font=dict(FONT, size=11),
        template="plotly_white",
        title=dict(
            text=title or f"Attention patterns, intact vs {patterns.ablated_heads} ablated{crop}",
            x=0.01, font=dict(size=15),
        ),
        margin=dict(l=110, r=110, t=90, b=60),
    )
    fig.update_annotations(font=dict(size=12))
    return fig


def plot_direct_effect(patterns: AttentionPatterns, *, max_tokens: int = 40, title: Optional[str] = None) -> go.Figure:
    """What ablating each head changes when no attention pattern can: one row a head, its attention
    pattern (left; its own ablation leaves it as it is) and its direct effect on the logits at the
    answer position (right: ablated - intact, through the direct path, the answer token marked)."""
    if patterns.direct_effect is None or patterns.logit_position is None:
        raise ValueError("these patterns carry no direct effects (cel_lens.analysis.attention_patterns records them)")
    rows = list(patterns.ablated_heads)
    n_tok = len(patterns.tokens)
    start = max(0, n_tok - max_tokens)
    labels = [token_label(t) for t in patterns.tokens[start:]]
    bars = [token_label(t) + (" (answer)" if i == patterns.answer_index else "") for i, t in enumerate(patterns.logit_tokens)]
    where = f"position {patterns.logit_position} ({token_label(patterns.tokens[patterns.logit_position])})"
    titles = [t for h in rows for t in (f"{h} attention (unchanged by its ablation)", f"{h} ablated: logit change at {where}")]
    fig = make_subplots(rows=len(rows), cols=2, subplot_titles=titles, horizontal_spacing=0.24,
                        vertical_spacing=min(0.12, 0.35 / len(rows)), column_widths=[0.5, 0.5])
    pos = list(range(start, n_tok))
    bound = float(patterns.direct_effect.abs().max()) or 1.0
    for i, h in enumerate(rows, start=1):
        z = patterns.intact[h.layer, h.head, start:, start:]
        custom = [[[labels[q], labels[k]] for k in range(len(pos))] for q in range(len(pos))]
        fig.add_trace(go.Heatmap(
            z=z.tolist(), x=pos, y=pos, customdata=custom, colorscale="Blues", zmin=0.0, zmax=1.0, showscale=i == 1,
            colorbar=dict(title="attention", x=0.40, len=0.45, y=1.0, yanchor="top", thickness=12),
            hovertemplate="query %{y} %{customdata[0]}<br>key %{x} %{customdata[1]}<br>%{z:.3f}<extra></extra>",
        ), row=i, col=1)
        fig.update_xaxes(tickmode="array", tickvals=pos, ticktext=labels, tickangle=-90, tickfont=dict(size=9),
                         showgrid=False, row=i, col=1)
        fig.update_yaxes(tickmode="array", tickvals=pos, ticktext=labels, tickfont=dict(size=9),
                         autorange="reversed", showgrid=False, row=i, col=1)
        effect = patterns.direct_effect[i - 1].tolist()
        fig.add_trace(go.Bar(
            x=effect, y=bars, orientation="h", name=str(h), showlegend=False,
            marker=dict(color=["#2166ac" if v > 0 else "#b2182b" for v in effect]),
            hovertemplate="%{y}: %{x:+.3f}<extra></extra>",
        ), row=i, col=2)
        fig.update_xaxes(title_text="direct effect on the logit (ablated - intact)", range=[-1.1 * bound, 1.1 * bound],
                         zeroline=True, zerolinecolor="black", row=i, col=2)
        fig.update_yaxes(autorange="reversed", row=i, col=2)
    side = 300 if len(pos) <= 24 else 360
    fig.update_layout(
        width=2 * side + 420, height=len(rows) * (side + 110) + 130, font=dict(FONT, size=11),
        template="plotly_white", margin=dict(l=110, r=40, t=110, b=60),
        title=dict(x=0.01, font=dict(size=15), text=title or (
            f"{patterns.ablated_heads} ablated: no attention pattern changes (no head downstream reads it);"
            "<br>what changes are the logits at the answer position (direct effect)")),
    )
    fig.update_annotations(font=dict(size=12))
    return fig

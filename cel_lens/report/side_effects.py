"""The paper's "damage elsewhere": what each task's selected subset does to every task, drawn from
a matrix (:func:`cel_lens.analysis.side_effect_matrix` computes one)."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import numpy as np
import plotly.graph_objects as go

from cel_lens.report.style import DIVERGING, FONT

__all__ = ["plot_side_effects"]


def plot_side_effects(
    matrix: Union[np.ndarray, Sequence[Sequence[float]]], labels: Sequence[str], *, title: Optional[str] = None
) -> go.Figure:
    """The side-effect matrix as a diverging heatmap centred at zero: row = task whose subset is
    ablated, column = task evaluated; cells annotated in percentage points, each row's own task
    outlined. Rows of tasks without a selection (all NaN) are left out."""
    m = np.asarray(matrix, dtype=float)
    n = len(labels)
    if m.shape != (n, n):
        raise ValueError(f"matrix of shape {m.shape} does not match {n} labels")
    rows = [i for i in range(n) if not np.isnan(m[i]).all()]
    if not rows:
        raise ValueError("the side-effect matrix has no selection (every row is NaN)")
    shown = m[rows]
    fig = go.Figure(
        go.Heatmap(
            z=[[None if math.isnan(v) else float(v) for v in row] for row in shown],
            x=list(labels),
            y=[f"Ŝ({labels[i]})" for i in rows],
            text=[["n/a" if math.isnan(v) else f"{100 * v:+.1f}" for v in row] for row in shown],
            texttemplate="%{text}",
            textfont=dict(size=14),
            colorscale=DIVERGING,
            zmid=0.0,
            colorbar=dict(title="gain", tickformat="+.0%"),
            hovertemplate="ablate %{y}<br>evaluate on %{x}<br>gain: %{z:+.1%}<extra></extra>",
        )
    )
    for r, i in enumerate(rows):
        fig.add_shape(
            type="rect", x0=i - 0.5, x1=i + 0.5, y0=r - 0.5, y1=r + 0.5, line=dict(color="black", width=2)
        )
    cell = max(130, 380 // max(n, 1))
    fig.update_layout(
        width=cell * n + 360,
        height=cell * len(rows) + 220,
        font=FONT,
        template="plotly_white",
        title=dict(text=title or "Side effects: gain (pp) of each task's Ŝ on every task", x=0.01),
        xaxis=dict(title="evaluated on", side="bottom", showgrid=False),
        yaxis=dict(title="ablated subset", autorange="reversed", showgrid=False),
        margin=dict(l=150, r=40, t=80, b=90),
    )
    return fig

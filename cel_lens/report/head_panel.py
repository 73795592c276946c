"""The layer x head panel of stage-1 scores: one cell a head, the pool and S-hat outlined.

Shared by the gain heatmap (:mod:`cel_lens.report.heatmap`) and the comparison of two runs
(:mod:`cel_lens.report.compare`). The colour scale is centred at zero and labelled in the scorer's
own unit, as its class says (:meth:`~cel_lens.scoring.base.Scorer.score_unit`): percentage
points of accuracy for ``exact`` (and the ``compressed`` estimate of it), nats of the
log-probability metric for ``attribution`` (a ranking, not an accuracy). Pool and
selected heads are outlined, never covered, and a grid small enough for it prints each value in
its cell, so a static PNG keeps the numbers. Heads not scored yet (an unfinished run) are blank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import plotly.graph_objects as go

from cel_lens.heads import Head, HeadSet
from cel_lens.report.style import DIVERGING, POOL_COLOUR, SELECTED_COLOUR, symmetric_ticks, tick_step
from cel_lens.scoring.base import score_unit

__all__ = ["ScoreUnits", "score_units", "cell_labels", "add_head_panel", "head_axes"]


@dataclass(frozen=True)
class ScoreUnits:
    """How a scorer's stage-1 scores read: ``noun`` (``"gain"`` or ``"score"``), the colour bar
    ``title``, the ``scale`` from a score to its display unit (100: percentage points) and the
    ``unit`` written after a value."""

    scorer: str
    noun: str
    title: str
    scale: float
    unit: str

    def text(self, value: float, decimals: int) -> str:
        """``value`` in display units with a sign (``+1.25 pp``, ``-0.031 nats``)."""
        if value is None or math.isnan(value):
            return "not scored yet"
        return f"{value * self.scale:+.{decimals}f} {self.unit}"


def score_units(scorer: Any) -> ScoreUnits:
    """The units of ``scorer``'s stage-1 scores, from its class (see the module docstring); a
    plain score for a name no longer registered."""
    name = str(scorer)
    unit = score_unit(name)
    where = f"{unit.symbol}, {name}" if unit.symbol else name
    where = where if len(where) <= 14 else where.replace(", ", ",<br>")  # a narrow colour bar
    return ScoreUnits(name, unit.noun, f"{unit.quantity}<br>({where})", unit.scale, unit.symbol)


def _max_abs(scores: np.ndarray) -> float:
    finite = np.abs(scores[np.isfinite(scores)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1e-3


def _value_decimals(max_abs: float, units: ScoreUnits) -> int:
    """Decimals for two significant digits of the largest value (at most 4)."""
    top = max_abs * units.scale
    return int(min(4, max(0, 1 - math.floor(math.log10(top))))) if top > 0 else 1


def cell_labels(scores: np.ndarray, units: ScoreUnits) -> list[list[str]]:
    """Each cell's value as printed in it (display units, signed, no unit; blank when not scored)."""
    d = _value_decimals(_max_abs(scores), units)
    return [["" if not math.isfinite(v) else "0" if v == 0 else f"{v * units.scale:+.{d}f}" for v in row]
            for row in scores.tolist()]


def _status(pool: HeadSet, selected: HeadSet, layer: int, head: int) -> str:
    h = Head(layer, head)
    return " (selected Ŝ)" if h in selected else " (pool)" if h in pool else ""


def add_head_panel(
    fig: go.Figure,
    scores: np.ndarray,
    scorer: str,
    pool: HeadSet,
    selected: HeadSet,
    *,
    axes: tuple[str, str] = ("x", "y"),
    colorbar: Optional[dict[str, Any]] = None,
    box_px: float = 20.0,
    show_values: bool = False,
    legend: bool = True,
    max_abs: Optional[float] = None,
) -> None:
    """Draw ``scores`` ``[layer, head]`` on ``axes`` with a zero-centred diverging scale labelled
    in the scorer's units, the pool heads outlined in black and the selected heads in gold (boxes of
    ``box_px``, the cell's size, each on a contrasting halo, so the cell's colour stays visible), and, with ``show_values``, each value
    in its cell. ``max_abs`` fixes the scale's end (two panels on one scale); ``colorbar`` ``None``
    hides the bar."""
    units = score_units(scorer)
    top = max_abs if max_abs is not None else _max_abs(scores)
    tickvals, ticktext = symmetric_ticks(top, units.scale, per_side=3)
    n_layers, n_heads = scores.shape
    decimals = _value_decimals(top, units) + 1
    hover = [[f"L{l}H{h}{_status(pool, selected, l, h)}<br>{units.noun}: {units.text(scores[l, h], decimals)}"
              for h in range(n_heads)] for l in range(n_layers)]
    fig.add_trace(
        go.Heatmap(
            z=[[v if math.isfinite(v) else None for v in row] for row in scores.tolist()],
            x=list(range(n_heads)), y=list(range(n_layers)), customdata=hover,
            colorscale=DIVERGING, zmid=0.0, zmin=-top, zmax=top, showscale=colorbar is not None,
            colorbar=dict(dict(title=dict(text=units.title, side="top"), tickvals=tickvals, ticktext=ticktext,
                               len=0.9, thickness=14), **(colorbar or {})),
            text=cell_labels(scores, units) if show_values else None,
            texttemplate="%{text}" if show_values else None, textfont=dict(size=11),
            hovertemplate=f"%{{customdata}}<br>scorer: {scorer}<extra></extra>",
            name=f"stage-1 {units.noun}", xaxis=axes[0], yaxis=axes[1],
        )
    )
    others = [h for h in pool if h not in selected]
    box = dict(symbol="square-open", size=max(6.0, 0.9 * box_px))
    for heads, name, colour, width in (  # each box over a wider one in a contrasting colour
        (others, None, "white", 4), (others, "candidate pool", POOL_COLOUR, 2),
        (list(selected), None, "black", 5), (list(selected), f"selected Ŝ = {selected}", SELECTED_COLOUR, 3),
    ):
        if heads:
            fig.add_trace(go.Scatter(
                x=[h.head for h in heads], y=[h.layer for h in heads], mode="markers",
                marker=dict(box, color=colour, line=dict(width=width, color=colour)),
                name=name, showlegend=legend and name is not None, hoverinfo="skip", xaxis=axes[0], yaxis=axes[1],
            ))


def head_axes(
    n_layers: int, n_heads: int, domain: tuple[float, float], anchors: Optional[tuple[str, str]] = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The x (head) and y (layer, top to bottom) axes of a head grid: ticks at heads and layers
    only (the range ends half a cell outside them, so no tick falls off the grid); ``anchors``: the
    ``(x, y)`` axis names when they are not the first pair."""
    x = dict(domain=list(domain), title="head", tickmode="linear", tick0=0, dtick=tick_step(n_heads),
             range=[-0.5, n_heads - 0.5], showgrid=False, zeroline=False)
    y = dict(title="layer", tickmode="linear", tick0=0, dtick=tick_step(n_layers), range=[n_layers - 0.5, -0.5],
             showgrid=False, zeroline=False)
    if anchors is not None:
        x["anchor"], y["anchor"] = anchors[1], anchors[0]
    return x, y

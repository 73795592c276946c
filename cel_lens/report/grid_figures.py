"""Figures of a model × task grid, drawn from its table (``table.json``) alone: the side-effect
matrices of every model side by side, and a one-picture summary (the table above the matrices)."""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Any, Mapping, Optional, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cel_lens.report.style import DIVERGING, FONT
from cel_lens.selection.calibration_text import calibrated_gain_text
from cel_lens.selection.result import format_p, pp

__all__ = ["short_model", "row_cells", "ROW_HEADER", "plot_grid_side_effects", "plot_grid_summary"]

ROW_HEADER: tuple[str, ...] = (
    "model", "task", "|D_dist|", "|D_test|", "intact", "ablated", "Δ (95% CI)", "calibrated Δ (one-sided 95% bounds)", "McNemar p",
    "Holm p (one-sided)", "Ŝ",
    "stability",
)
"""Column titles of a grid row as figures and tables show it (the run directory comes after)."""



def _seal_words(selected_before_test: Optional[bool]) -> str:
    """What a grid figure adds to a pair's heads about its seal: nothing when S-hat was fixed before
    D_test, a warning when it was not, and that it was not recorded when the result did not say."""
    if selected_before_test is None:
        return " (not recorded whether fixed before D_test)"
    return "" if selected_before_test else " (NOT fixed before D_test)"

def short_model(name: str) -> str:
    """A model's name without its organisation or directory (``Qwen/Qwen2.5-3B`` -> ``Qwen2.5-3B``)."""
    return PurePath(str(name)).name or str(name)


def _int(value: Any) -> str:
    return "n/a" if value is None else f"{int(value):,}"


def _stability(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.0f}%"


def row_cells(row: Mapping[str, Any], *, short: bool = False) -> list[str]:
    """A grid row as the texts of :data:`ROW_HEADER`; a pair without a result shows its status
    (and error) in place of Ŝ. ``short``: the model without its organisation, Δ in bare points."""
    model = short_model(row["model"]) if short else str(row["model"])
    if row.get("status") != "ok":
        note = row.get("status", "not run") + (f": {row['error']}" if row.get("error") else "")
        return [model, row["task"], _int(row.get("n_dist")), _int(row.get("n_test")), "", "", "", "", "", "", note, ""]
    if short:  # the figure's table: points without their unit (the header says pp)
        delta = f"{100 * row['gain']:+.2f} [{100 * row['ci_low']:+.2f}, {100 * row['ci_high']:+.2f}]"
    else:
        delta = f"{pp(row['gain'])} [{pp(row['ci_low'])}, {pp(row['ci_high'])}]"
    return [
        model, row["task"], _int(row["n_dist"]), _int(row["n_test"]), pp(row["test_acc_intact"], False),
        pp(row["test_acc_ablated"], False), delta, calibrated_gain_text(row, unit="" if short else " pp"),
        format_p(row["p_value"]), format_p(row.get("p_holm")),
        str(row["heads"]) + _seal_words(row.get("selected_before_test")),
        _stability(row.get("selection_stability")),
    ]


def _matrix_rows(block: Mapping[str, Any]) -> list[int]:
    """Indices of the tasks whose Ŝ has at least one measured cell."""
    return [i for i, row in enumerate(block["gain"]) if any(v is not None for v in row)]


def _heatmap(block: Mapping[str, Any], heads: Mapping[str, str]) -> Optional[go.Heatmap]:
    """One model's matrix as a heatmap trace (rows: Ŝ of each task; columns: task evaluated)."""
    rows = _matrix_rows(block)
    if not rows:
        return None
    tasks = block["tasks"]
    z = [[None if v is None else float(v) for v in block["gain"][i]] for i in rows]
    return go.Heatmap(
        z=z,
        x=list(tasks),
        y=[f"Ŝ({tasks[i]})" for i in rows],
        customdata=[[heads.get(tasks[i], "?")] * len(tasks) for i in rows],
        text=[["n/a" if v is None else f"{100 * v:+.1f}" for v in r] for r in z],
        texttemplate="%{text}",
        textfont=dict(size=13),
        coloraxis="coloraxis",
        hovertemplate="ablate %{y} = %{customdata}<br>evaluate on %{x}<br>gain: %{z:+.1%}<extra></extra>",
    )


def _selected_heads(table: Mapping[str, Any], model: str) -> dict[str, str]:
    return {r["task"]: str(r["heads"]) for r in table["rows"] if r["model"] == model and r.get("status") == "ok"}


def _add_matrices(fig: go.Figure, table: Mapping[str, Any], models: Sequence[str], row: int) -> float:
    """Add every model's matrix to row ``row`` of ``fig``; return the largest |gain| shown."""
    top = 0.0
    for col, model in enumerate(models, start=1):
        trace = _heatmap(table["side_effects"][model], _selected_heads(table, model))
        if trace is None:
            continue
        fig.add_trace(trace, row=row, col=col)
        fig.update_yaxes(autorange="reversed", row=row, col=col)
        top = max([top, *(abs(v) for r in trace.z for v in r if v is not None and not math.isnan(v))])
    return top


def _coloraxis(top: float) -> dict[str, Any]:
    bound = max(top, 0.01)
    return dict(colorscale=DIVERGING, cmin=-bound, cmax=bound, colorbar=dict(title="gain", tickformat="+.0%"))


def plot_grid_side_effects(table: Mapping[str, Any], *, title: Optional[str] = None) -> go.Figure:
    """Each model's side-effect matrix side by side, one colour scale centred at zero: row = the
    task whose Ŝ is ablated, column = the task evaluated, cells in percentage points. The diagonal
    is each pair's own test gain. Models without any measured cell are left out."""
    models = [m for m in table["grid"]["models"] if _matrix_rows(table["side_effects"][m])]
    if not models:
        raise ValueError("the grid has no side-effect cell to draw (no finished pair)")
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=[short_model(m) for m in models], horizontal_spacing=0.12)
    top = _add_matrices(fig, table, models, 1)
    n = max(len(table["side_effects"][m]["tasks"]) for m in models)
    fig.update_layout(
        width=max(760, 260 + (120 + 110 * n) * len(models)), height=150 + 70 * n, font=FONT,
        template="plotly_white", coloraxis=_coloraxis(top), margin=dict(l=130, r=40, t=90, b=60),
        title=dict(text=title or "Side effects: test gain (pp) of each Ŝ on its model's tasks", x=0.01),
    )
    return fig


def plot_grid_summary(table: Mapping[str, Any], *, title: Optional[str] = None) -> go.Figure:
    """The grid in one picture: the table (one row per pair) above every model's side-effect matrix."""
    models = [m for m in table["grid"]["models"] if _matrix_rows(table["side_effects"][m])] or [None]
    rows = [row_cells(r, short=True) for r in table["rows"]]
    n_tasks = max((len(table["side_effects"][m]["tasks"]) for m in models if m), default=1)
    specs = [[{"type": "table", "colspan": len(models)}] + [None] * (len(models) - 1), [{"type": "heatmap"}] * len(models)]
    table_h, matrix_h = 60 + 30 * len(rows), 90 + 60 * n_tasks
    fig = make_subplots(
        rows=2, cols=len(models), specs=specs, row_heights=[table_h, matrix_h], vertical_spacing=0.08,
        horizontal_spacing=0.12, subplot_titles=[""] + [short_model(m) if m else "" for m in models],
    )
    fig.add_trace(
        go.Table(
            header=dict(values=[h.replace("Δ (", "Δ pp (") for h in ROW_HEADER], fill_color="#e9eef5", align="left",
                        font=dict(size=12)),
            cells=dict(values=[list(c) for c in zip(*rows)] if rows else [[]] * len(ROW_HEADER), align="left",
                       font=dict(size=12), height=26),
            columnwidth=[110, 90, 55, 55, 60, 60, 185, 185, 65, 60, 100, 60],
        ),
        row=1, col=1,
    )
    top = _add_matrices(fig, table, [m for m in models if m], 2) if models != [None] else 0.0
    holm = table["holm"]
    fig.update_layout(
        width=max(1250, 260 + 420 * len(models)), height=table_h + matrix_h + 170, font=FONT, template="plotly_white", coloraxis=_coloraxis(top),
        margin=dict(l=130, r=40, t=80, b=40),
        title=dict(x=0.01, text=title or f"CEL grid: {len(rows)} model-task pairs; Holm-adjusted p ≤ {holm['alpha']:g} "
                   f"for {holm['rejected']} of {holm['family']}; below: side effects (pp) of each Ŝ on its model's tasks"),
    )
    return fig

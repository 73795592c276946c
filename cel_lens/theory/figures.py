"""Figures of the theory lab, from a :class:`TheoryTable`'s run (never trains anything).

:func:`plot_trajectories` shows one head taking each feature while the others stay small;
:func:`plot_escape_order` sets the measured escapes against the escape-time prediction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from cel_lens.report.save import save_figure
from cel_lens.theory.experiment import TheoryRun, in_event_e, take_head
from cel_lens.theory.toy_model import FEATURE_WEIGHTS, N_FEATURES, N_HEADS
from cel_lens.theory.predictions import TheoryTable

LOG_TICKS: dict[str, Any] = dict(
    tickvals=[v * 10**e for e in range(7) for v in (1, 2, 5)], ticktext=[f"{v * 10**e:,}" for e in range(7) for v in (1, 2, 5)],
    minor=dict(showgrid=False, ticks=""),
)
"""Log axes labelled 1, 2, 5 per decade, without the default's crowded minor labels and grid."""

_HEAD_COLORS = ("#1f77b4", "#d62728", "#2ca02c")


def plot_trajectories(table: Union[TheoryTable, TheoryRun], seeds: Optional[Sequence[int]] = None) -> Any:
    """Each head's ``c_hj`` over training for a few seeds: one feature per column.

    The predicted winner of each feature (smallest escape time ``T``) is drawn solid, the others
    dashed; subplot titles list the three heads' ``T``. By default shows the first tracked seed in
    the event E and the first one outside it.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    run = table.run if isinstance(table, TheoryTable) else table
    if run is None or run.result.track.numel() == 0:
        raise ValueError("no tracked trajectories: run theory_table with n_track > 0")
    res, cfg = run.result, run.config
    n_tracked = res.track.shape[1]
    meas = run.measured_winner
    in_e = in_event_e(meas)
    if seeds is None:
        picks = [next((s for s in range(n_tracked) if in_e[s]), None), next((s for s in range(n_tracked) if not in_e[s]), None)]
        seeds = [s for s in picks if s is not None]
    seeds = [s for s in seeds if s < n_tracked]
    beta = [cfg["a"] / 2, cfg["b"], cfg["c"]]
    titles = [
        f"seed {s}{' (in E)' if in_e[s] else ''}, feature {j}: T = " + " / ".join(f"{run.escape_times[s, h, j]:.3g}" for h in range(N_HEADS))
        for s in seeds for j in range(N_FEATURES)
    ]
    fig = make_subplots(rows=len(seeds), cols=N_FEATURES, subplot_titles=titles)
    steps = res.track_steps.numpy()
    cross = res.cross_step.numpy()[seeds]
    x_max = float(max(cross.max(), 1)) * 1.6
    shown: set[tuple[int, bool]] = set()
    for r, s in enumerate(seeds):
        for j in range(N_FEATURES):
            for h in range(N_HEADS):
                winner = bool(run.predicted_winner[s, j] == h)
                key = (h, winner)
                fig.add_trace(
                    go.Scatter(
                        x=steps, y=res.track[:, s, h, j].numpy(), mode="lines",
                        line=dict(color=_HEAD_COLORS[h], width=3 if winner else 1.5, dash="solid" if winner else "dash"),
                        name=f"head {h}" + (" (predicted winner: smallest T)" if winner else ""),
                        legendgroup=f"head{h}{winner}", showlegend=key not in shown,
                    ),
                    row=r + 1, col=j + 1,
                )
                shown.add(key)
            fig.add_hline(y=beta[j], line=dict(color="gray", dash="dot", width=1), row=r + 1, col=j + 1)
    fig.update_xaxes(range=[0, x_max])
    fig.update_xaxes(title_text="GD step", row=len(seeds))
    fig.update_yaxes(title_text="c_hj", col=1)
    fig.update_annotations(font_size=12)
    fig.update_layout(
        title=f"Training trajectories from θ⁰ = αG: one head takes each feature (α={cfg['alpha']}, η={cfg['eta']}; dotted: target β_j)",
        height=340 * len(seeds), width=1250, template="plotly_white",
    )
    return fig


def plot_escape_order(table: Union[TheoryTable, TheoryRun]) -> Any:
    """Predicted vs measured escape: step at which the winner reaches ``β_j/2`` against the
    escape time ``T(G)`` converted to steps (left), and predicted vs measured head ranks (right)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    run = table.run if isinstance(table, TheoryTable) else table
    if run is None:
        raise ValueError("table has no run attached")
    cfg = run.config
    p = np.asarray(FEATURE_WEIGHTS)
    beta = np.array([cfg["a"] / 2, cfg["b"], cfg["c"]])
    pred_step = run.escape_times / (cfg["alpha"] ** 2 * cfg["eta"] * p * beta)
    cross = run.result.cross_step.numpy()
    meas = run.measured_winner
    match = run.predicted_winner == meas
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4],
                        subplot_titles=("winner: measured vs predicted escape step", "head rank: by T(G) vs by final |c|"))
    for j in range(N_FEATURES):
        x = take_head(pred_step, meas)[:, j]
        y = take_head(cross, meas)[:, j].astype(float)
        ok = y >= 0
        fig.add_trace(go.Scattergl(x=x[ok & match[:, j]], y=y[ok & match[:, j]], mode="markers",
                                   marker=dict(size=3, opacity=0.35, color=_HEAD_COLORS[j]), name=f"feature {j}"), row=1, col=1)
    bad = (take_head(cross, meas) >= 0) & ~match
    fig.add_trace(go.Scattergl(x=take_head(pred_step, meas)[bad], y=take_head(cross, meas)[bad].astype(float), mode="markers",
                               marker=dict(size=8, symbol="x", color="black"),
                               name=f"winner ≠ argmin T ({int((~match).sum())} of {match.size})"), row=1, col=1)
    lim = [max(1.0, float(np.nanmin(pred_step[pred_step > 0]))), float(np.nanmax(take_head(pred_step, meas))) * 1.2]
    fig.add_trace(go.Scatter(x=lim, y=lim, mode="lines", line=dict(color="gray", dash="dot"), name="measured = predicted"), row=1, col=1)
    fig.update_xaxes(type="log", title_text="predicted: T(G)/(α²ηp_jβ_j)", row=1, col=1, **LOG_TICKS)
    fig.update_yaxes(type="log", title_text="measured: first step with |c| ≥ β_j/2", row=1, col=1, **LOG_TICKS)
    rank_pred = np.argsort(np.argsort(run.escape_times, axis=1), axis=1)  # 0 = escapes first
    rank_meas = np.argsort(np.argsort(-np.abs(run.result.contributions.numpy()), axis=1), axis=1)  # 0 = largest
    counts = np.zeros((N_HEADS, N_HEADS), dtype=int)
    np.add.at(counts, (rank_pred.ravel(), rank_meas.ravel()), 1)
    labels = ["1st", "2nd", "3rd"]
    fig.add_trace(go.Heatmap(z=counts, x=labels, y=labels, colorscale="Blues", showscale=False,
                             text=counts, texttemplate="%{text}"), row=1, col=2)
    fig.update_xaxes(title_text="measured rank (final |c|)", row=1, col=2)
    fig.update_yaxes(title_text="predicted rank (escape time)", autorange="reversed", row=1, col=2)
    fig.update_layout(title=f"Escape order: prediction from the auxiliary ODE vs gradient descent "
                            f"({cfg['seeds']} seeds, α={cfg['alpha']})",
                      height=520, width=1200, template="plotly_white")
    return fig


def save_theory_figures(table: TheoryTable, directory: Union[str, Path] = "figures", formats: Sequence[str] = ("html", "png")) -> list[Path]:
    """Write ``theory_trajectories`` and ``theory_escape`` into ``directory``; return the paths."""
    directory = Path(directory)
    paths = save_figure(plot_trajectories(table), directory / "theory_trajectories", formats)
    paths += save_figure(plot_escape_order(table), directory / "theory_escape", formats)
    return paths

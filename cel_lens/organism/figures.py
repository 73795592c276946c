"""Figures of the organism: training dynamics, per-head effects, emergence over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from cel_lens.organism.train import TrainingLog
from cel_lens.report.save import save_figure
from cel_lens.stats import accuracy_interval

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

__all__ = ["plot_training_log", "save_training_figure", "plot_head_effects", "plot_emergence"]


def plot_training_log(log: Union[TrainingLog, Mapping[str, Any]], title: Optional[str] = None) -> "go.Figure":
    """Plotly figure of a training run: losses (mix, task A rows, task B rows), probe accuracies, and
    each head's slope on the shared feature (``u -> skip``) and on the task feature (``v -> pos/neg``)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    log = log if isinstance(log, TrainingLog) else TrainingLog.from_dict(log)
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=True, vertical_spacing=0.12, horizontal_spacing=0.1,
        subplot_titles=("training loss", "probe accuracy", "per-head slope: shared feature u → skip",
                        "per-head slope: task feature v → pos/neg"),
    )
    x = log.step
    for name, ys, dash in (("loss (mix)", log.loss, "solid"), ("loss, task A rows", log.loss_a, "dot"),
                           ("loss, task B rows", log.loss_b, "dash")):
        fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines", line=dict(dash=dash)), row=1, col=1)
    for name, ys in (("task A", log.acc_a), ("task B", log.acc_b)):
        fig.add_trace(go.Scatter(x=x, y=ys, name=f"accuracy {name}", mode="lines"), row=1, col=2)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    n_heads = len(log.shared_coef[0]) if log.shared_coef else 0
    for h in range(n_heads):
        color = palette[h % len(palette)]
        fig.add_trace(go.Scatter(x=x, y=[c[h] for c in log.shared_coef], name=f"L0H{h}", mode="lines",
                                 line=dict(color=color), legendgroup=f"h{h}"), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=[c[h] for c in log.task_coef], name=f"L0H{h}", mode="lines",
                                 line=dict(color=color), legendgroup=f"h{h}", showlegend=False), row=2, col=2)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=2)
    fig.update_yaxes(title_text="cross-entropy", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=2)
    fig.update_yaxes(title_text="logit per unit x_u", row=2, col=1)
    fig.update_yaxes(title_text="logit per unit x_v", row=2, col=2)
    fig.update_layout(title=title or f"Model organism training (seed {log.seed})", height=650, width=1000,
                      template="plotly_white")
    return fig


def save_training_figure(log: Union[TrainingLog, Mapping[str, Any]], stem: Union[str, Path]) -> list[Path]:
    """Write the training figure as HTML (and PNG where the exporter works)."""
    return save_figure(plot_training_log(log), stem)


def plot_head_effects(info: Mapping[str, Any], title: Optional[str] = None) -> "go.Figure":
    """Plotly figure of one organism (:func:`describe_organism`'s dict): per head, the test-accuracy
    change of task A (with its 95% CI) and of task B when that head alone is ablated, beside the
    head's share of the shared-feature and task-feature slopes and its push toward task B's answer."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    test, attr = info["test"], info["attribution"]
    heads = [f"L0H{h}" for h in range(len(test["gain_a"]))]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "single-head ablation: test accuracy change", "direct logit attribution (random prompts)"))
    err = dict(type="data", symmetric=False,
               array=[hi - g for g, hi in zip(test["gain_a"], test["ci_high"])],
               arrayminus=[g - lo for g, lo in zip(test["gain_a"], test["ci_low"])])
    fig.add_trace(go.Bar(x=heads, y=test["gain_a"], name="task A (organism_a)", error_y=err, marker_color="#1f77b4"),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=heads, y=test["gain_b"], name="task B (organism_b)", marker_color="#d62728"), row=1, col=1)
    fig.add_trace(go.Bar(x=heads, y=attr["shared_share"], name="share of u → skip slope", marker_color="#9467bd"),
                  row=1, col=2)
    fig.add_trace(go.Bar(x=heads, y=attr["task_share"], name="share of v → pos/neg slope", marker_color="#2ca02c"),
                  row=1, col=2)
    push = attr["conflict"]
    scale = max(abs(p) for p in push) or 1.0
    fig.add_trace(go.Scatter(x=heads, y=[p / scale for p in push], mode="markers+lines", name="push toward B's answer "
                             "(scaled to max |push| = 1)", marker=dict(size=10, color="black")), row=1, col=2)
    fig.update_yaxes(title_text="accuracy change (ablated - intact)", row=1, col=1)
    fig.update_yaxes(title_text="share / scaled push", row=1, col=2)
    fig.update_layout(barmode="group", template="plotly_white", height=450, width=1000,
                      title=title or f"Model organism (seed {info['seed']}): ground truth {info['ground_truth_heads']}, "
                      f"task A {test['acc_a']:.3f} intact")
    return fig


def plot_emergence(rows: Sequence[Mapping[str, Any]], title: Optional[str] = None) -> "go.Figure":
    """Bar chart of how often a beneficial head emerged per design (``rows``: ``label``,
    ``beneficial``, ``seeds`` and optionally ``strong``, the seeds whose best head also fixes at least
    half of task A's errors), with Wilson 95% intervals, beside the theory's 4/9 and the starting
    point's 2/9."""
    import plotly.graph_objects as go


    labels = [f"{r['label']}  ({r['beneficial']}/{r['seeds']})" for r in rows]
    fig = go.Figure()
    for key, name, color in (("beneficial", "beneficial head (task A CI above 0)", "#1f77b4"),
                             ("strong", "... that also fixes >= half of task A's errors", "#aec7e8")):
        if not all(key in r for r in rows):
            continue
        rate = [r[key] / r["seeds"] for r in rows]
        ci = [accuracy_interval(r[key], r["seeds"]) for r in rows]
        fig.add_trace(go.Bar(
            y=labels, x=rate, orientation="h", name=name, marker_color=color,
            error_x=dict(type="data", symmetric=False, array=[hi - p for p, (_, hi) in zip(rate, ci)],
                         arrayminus=[p - lo for p, (lo, _) in zip(rate, ci)], thickness=1),
        ))
    for x, name, side in ((2 / 9, "issue's starting point 2/9", "right"), (4 / 9, "theory (Thm 4.3) 4/9", "left")):
        fig.add_vline(x=x, line_dash="dot", line_color="gray")
        # labelled above the plot area (under the legend), where no bar can sit beneath the text
        fig.add_annotation(x=x, y=1.0, xref="x", yref="paper", yanchor="bottom", xanchor=side, text=name,
                           showarrow=False, font=dict(size=11, color="#555555"), xshift=-3 if side == "right" else 3)
    fig.update_xaxes(title_text="fraction of training seeds (Wilson 95% CI)", range=[0, 1.02])
    fig.update_yaxes(autorange="reversed")
    height = 180 + 44 * len(rows)
    fig.update_layout(template="plotly_white", barmode="group", height=height, width=1000,
                      title=title or "How often a beneficial single head emerges over training seeds",
                      # the legend between the title and the reference lines' labels (85 px from the top)
                      legend=dict(orientation="h", y=1 - 85 / height, yanchor="middle", yref="container", x=0.05, xanchor="left"),
                      margin=dict(l=300, t=130, b=70))
    return fig

"""Plotly figures of a CEL search and of what an ablation does to a model.

* :func:`plot_gain_heatmap`: stage-1 gains over layers x heads (diverging scale centred at zero),
  the candidate pool and the selected subset marked; next to it the evaluated subsets ranked by
  discovery accuracy, and the selected subset's test gain with its CI against the random-subset null.
* :func:`plot_discovery_vs_test`: discovery gain vs post-hoc test gain of the pool's subsets, with
  the random-subset null as a band: how well selection on D_dist transfers to D_test.
* :func:`attention_patterns` / :func:`plot_attention`: intact vs ablated attention patterns of chosen
  heads on one example, including heads downstream of the ablated ones (HookedTransformer and
  TransformerBridge alike: both expose ``blocks.{l}.attn.hook_pattern``).
* :func:`side_effect_matrix` / :func:`plot_side_effects`: the gain of each task's selected subset
  on every task, the paper's "damage elsewhere".

Figure functions take a search :class:`~cel_lens.search.Result`, its ``to_dict()``, a run record
(:func:`cel_lens.runs.load_run`) or a run directory path. :func:`write_run_figures` writes every
figure of a run (what ``cel-lens report`` calls).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import plotly.graph_objects as go
import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike

__all__ = [
    "ResultLike",
    "result_dict",
    "result_rows",
    "format_result",
    "ranked_subsets",
    "plot_gain_heatmap",
    "plot_discovery_vs_test",
    "AttentionPatterns",
    "attention_patterns",
    "pattern_change",
    "plot_pattern_change",
    "plot_attention",
    "side_effect_matrix",
    "plot_side_effects",
    "write_run_figures",
]

ResultLike = Union[Mapping[str, Any], Any, str, os.PathLike]

# colours: a diverging scale whose blue means "ablation helps", red "ablation hurts"
DIVERGING = "RdBu"
SELECTED_COLOUR = "#e6a700"  # gold: visible on both ends of RdBu and on white
POOL_COLOUR = "#222222"
OTHER_COLOUR = "#8c8c8c"
NULL_COLOUR = "rgba(120, 120, 120, 0.18)"
FONT = dict(family="DejaVu Sans, Arial, sans-serif", size=13)
_ACCURACY_SCORERS = {"exact", "compressed"}


# ---------------------------------------------------------------------------------------------
# reading results
# ---------------------------------------------------------------------------------------------
def result_dict(obj: ResultLike) -> dict[str, Any]:
    """The result of a search as a plain dict, from a ``Result``, its ``to_dict()``, a run record
    (anything with ``.result``) or a run directory path."""
    if isinstance(obj, (str, os.PathLike)):
        from cel_lens.runs import load_run

        obj = load_run(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "result"):  # a run (pipeline.Run or runs.RunRecord)
        if obj.result is None:
            raise ValueError(f"the run at {getattr(obj, 'path', '?')} has no result yet (unfinished search)")
        return result_dict(obj.result)
    if hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    raise TypeError(f"expected a Result, a result dict, a run or a run directory, got {type(obj).__name__}")


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _pp(value: Any, signed: bool = True) -> str:
    """A fraction as percentage points: 0.045 -> '+4.5 pp'."""
    v = _num(value)
    if math.isnan(v):
        return "n/a"
    return f"{100 * v:+.1f} pp" if signed else f"{100 * v:.1f}%"


def _fmt_p(value: Any) -> str:
    v = _num(value)
    if math.isnan(v):
        return "n/a"
    return f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}"


def result_rows(obj: ResultLike) -> list[tuple[str, str]]:
    """The result table as (label, value) rows: selected heads, accuracies, gain with CI and
    p-values, the random-subset null, and the search's settings."""
    r = result_dict(obj)
    null = [float(g) for g in (r.get("null_gains") or [])]
    rows = [
        ("selected heads", str(HeadSet.parse(r.get("heads")))),
        ("k / pool size / scorer", f"{r.get('k', '?')} / {r.get('pool_size', '?')} / {r.get('scorer', '?')}"),
        (
            "discovery acc",
            f"intact {_pp(r.get('dist_acc_intact'), False)} -> ablated {_pp(r.get('dist_acc_ablated'), False)}"
            f"  (n={r.get('n_dist', '?')})",
        ),
        (
            "test acc",
            f"intact {_pp(r.get('test_acc_intact'), False)} -> ablated {_pp(r.get('test_acc_ablated'), False)}"
            f"  (n={r.get('n_test', '?')})",
        ),
        (
            "test gain",
            f"{_pp(r.get('gain'))}  95% CI [{_pp(r.get('ci_low'))}, {_pp(r.get('ci_high'))}]"
            f"  McNemar p={_fmt_p(r.get('p_value'))}",
        ),
    ]
    if null:
        rows.append(
            (
                "random-subset null",
                f"{len(null)} random {len(HeadSet.parse(r.get('heads')))}-head sets on test: mean {_pp(np.mean(null))}, "
                f"95% range [{_pp(np.quantile(null, 0.025))}, {_pp(np.quantile(null, 0.975))}], "
                f"p={_fmt_p(r.get('null_p'))}",
            )
        )
    rows.append(("subsets evaluated", str(len(r.get("subsets") or []))))
    rows.append(("seed", str(r.get("seed", "?"))))
    return rows


def format_result(obj: ResultLike) -> str:
    """The result table as aligned text (what ``cel-lens report`` prints)."""
    rows = result_rows(obj)
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def _scores(r: Mapping[str, Any]) -> np.ndarray:
    scores = r.get("scores")
    if scores is None:
        raise ValueError("the result has no stage-1 scores to plot")
    arr = np.asarray(scores, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"stage-1 scores must be [layers][heads], got shape {arr.shape}")
    return arr


def ranked_subsets(obj: ResultLike) -> list[dict[str, Any]]:
    """The evaluated subsets, best first by the search's selection rule (highest discovery accuracy;
    ties: fewer heads, then higher summed stage-1 score, then head order), each with ``heads`` in
    canonical text. The first is the selected subset."""
    r = result_dict(obj)
    subsets = [dict(s, heads=str(HeadSet.parse(s["heads"]))) for s in (r.get("subsets") or [])]

    def key(s: dict[str, Any]) -> tuple:
        hs = HeadSet.parse(s["heads"])
        return (-round(_num(s.get("dist_acc")), 12), len(hs), -round(_num(s.get("score_sum") or 0.0), 12), hs.heads)

    return sorted(subsets, key=key)


def _is_accuracy_scorer(scorer: Any) -> bool:
    return str(scorer) in _ACCURACY_SCORERS


# ---------------------------------------------------------------------------------------------
# gain heatmap + subsets
# ---------------------------------------------------------------------------------------------
def plot_gain_heatmap(
    obj: ResultLike, *, max_subsets: int = 20, title: Optional[str] = None
) -> go.Figure:
    """Stage-1 gains as a layer x head heatmap (diverging, centred at zero; pool heads boxed, the
    selected heads starred), the evaluated subsets ranked by discovery accuracy (selected one
    highlighted, top ``max_subsets`` shown) and the selected subset's test gain with its 95% CI
    against the random-subset null band."""
    r = result_dict(obj)
    scores = _scores(r)
    n_layers, n_heads = scores.shape
    scorer = str(r.get("scorer", "?"))
    selected = HeadSet.parse(r.get("heads"))
    pool = HeadSet.parse(r.get("pool") or [])
    acc_units = _is_accuracy_scorer(scorer)
    zfmt = "+.2%" if acc_units else "+.3g"

    # layout: heatmap | colourbar | ranked subsets | selected test gain
    ranked = ranked_subsets(r)
    shown = ranked[:max_subsets]
    if selected and str(selected) not in {s["heads"] for s in shown}:
        shown += [s for s in ranked if s["heads"] == str(selected)]
    cell = max(14, min(40, 560 // max(n_layers, 1)))
    plot_h = max(300, cell * n_layers, 19 * len(shown))
    height = plot_h + 210
    # room between heatmap and subsets for the colourbar (~125 px) and the subset labels
    label_px = 7 * max([len(f"#{len(ranked)} {s['heads']}") for s in shown] or [0])
    width = max(1350, int((125 + label_px) / 0.17) + 90)
    d_sub, d_gain = (0.615, 0.835), (0.905, 1.0)
    d_heat = (0.0, d_sub[0] - (125 + label_px) / (width - 90))

    fig = go.Figure()
    names = [[f"L{l}H{h}" for h in range(n_heads)] for l in range(n_layers)]
    fig.add_trace(
        go.Heatmap(
            z=scores.tolist(),
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            customdata=names,
            colorscale=DIVERGING,
            zmid=0.0,
            colorbar=dict(
                title=dict(text=f"stage-1 gain<br>({scorer})", side="top"),
                x=d_heat[1] + 0.01,
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
    cell_w = (width - 90) * (d_heat[1] - d_heat[0]) / max(n_heads, 1)
    marker_size = max(6, int(0.62 * min(plot_h / max(n_layers, 1), cell_w)))
    for marked, tag, name, marker in (
        (
            [h for h in pool if h not in selected], "pool", "candidate pool",
            dict(symbol="square-open", color=POOL_COLOUR, line=dict(width=2)),
        ),
        (
            list(selected), "selected", f"selected Ŝ = {selected}",
            dict(symbol="star", color=SELECTED_COLOUR, line=dict(width=1.5, color="black")),
        ),
    ):
        if not marked:
            continue
        fig.add_trace(
            go.Scatter(
                x=[h.head for h in marked],
                y=[h.layer for h in marked],
                mode="markers",
                marker=dict(marker, size=marker_size),
                name=name,
                customdata=[[str(h), float(scores[h.layer, h.head])] for h in marked],
                hovertemplate=f"%{{customdata[0]}} ({tag})<br>gain: %{{customdata[1]:{zfmt}}}<extra></extra>",
                xaxis="x",
                yaxis="y",
            )
        )

    # ranked subsets by discovery accuracy
    if shown:
        labels = [f"#{ranked.index(s) + 1} {s['heads']}" for s in shown]
        is_sel = [s["heads"] == str(selected) for s in shown]
        fig.add_trace(
            go.Scatter(
                x=[_num(s.get("dist_acc")) for s in shown],
                y=labels,
                mode="markers",
                marker=dict(
                    size=[13 if sel else 8 for sel in is_sel],
                    color=[SELECTED_COLOUR if sel else OTHER_COLOUR for sel in is_sel],
                    symbol=["star" if sel else "circle" for sel in is_sel],
                    line=dict(width=[1.5 if sel else 0 for sel in is_sel], color="black"),
                ),
                customdata=[
                    [s["heads"], _num(s.get("dist_gain")), _num(s.get("test_gain_posthoc"))] for s in shown
                ],
                hovertemplate=(
                    "%{customdata[0]}<br>discovery acc: %{x:.1%}<br>discovery gain: %{customdata[1]:+.1%}"
                    "<br>test gain (post hoc): %{customdata[2]:+.1%}<extra></extra>"
                ),
                name="subsets (discovery)",
                showlegend=False,
                xaxis="x2",
                yaxis="y2",
            )
        )
    intact = r.get("dist_acc_intact")
    if intact is not None and shown:
        fig.add_shape(
            type="line", xref="x2", yref="y2 domain", x0=float(intact), x1=float(intact), y0=0, y1=1,
            line=dict(color="black", dash="dash", width=1.2),
        )
        fig.add_annotation(
            x=float(intact), y=0.0, xref="x2", yref="y2 domain", text="intact", showarrow=False,
            xanchor="left", yanchor="bottom", xshift=3, font=dict(size=11),
        )

    # selected subset's test gain with CI, against the null band
    null = [float(g) for g in (r.get("null_gains") or [])]
    gain = r.get("gain")
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
    fig.add_shape(
        type="line", xref="x3 domain", yref="y3", x0=0, x1=1, y0=0, y1=0, line=dict(color="black", width=1)
    )
    if gain is not None:
        g, lo_ci, hi_ci = _num(gain), _num(r.get("ci_low")), _num(r.get("ci_high"))
        has_ci = not (math.isnan(lo_ci) or math.isnan(hi_ci))
        fig.add_trace(
            go.Scatter(
                x=[f"{_pp(g)}<br>[{_pp(lo_ci)},<br>{_pp(hi_ci)}]" if has_ci else _pp(g)],
                y=[g],
                mode="markers",
                marker=dict(symbol="star", size=15, color=SELECTED_COLOUR, line=dict(width=1.5, color="black")),
                error_y=dict(
                    type="data", symmetric=False, array=[hi_ci - g if has_ci else 0], arrayminus=[g - lo_ci if has_ci else 0],
                    color="black", thickness=1.5, width=8,
                ),
                hovertemplate=(
                    f"{selected}<br>test gain: {_pp(g)}<br>95% CI [{_pp(lo_ci)}, {_pp(hi_ci)}]"
                    f"<br>McNemar p={_fmt_p(r.get('p_value'))}<extra></extra>"
                ),
                name="test gain (95% CI)",
                showlegend=False,
                xaxis="x3",
                yaxis="y3",
            )
        )
    span = [v for v in [_num(gain), _num(r.get("ci_low")), _num(r.get("ci_high")), *null, 0.0] if not math.isnan(v)]
    pad = max(0.15 * (max(span) - min(span)), 0.01)
    accs = [_num(s.get("dist_acc")) for s in shown] + ([float(intact)] if intact is not None else [])
    accs = [a for a in accs if not math.isnan(a)] or [0.0]
    acc_pad = max(0.08 * (max(accs) - min(accs)), 0.01)

    fig.update_layout(
        width=width,
        height=height,
        font=FONT,
        template="plotly_white",
        title=dict(text=title or _heatmap_title(r, selected), x=0.01, xanchor="left", font=dict(size=16)),
        margin=dict(l=70, r=20, t=95, b=120),
        legend=dict(orientation="h", x=0.0, y=0.02, xanchor="left", yanchor="bottom", yref="container"),
        xaxis=dict(
            domain=list(d_heat), title="head", tickmode="linear", dtick=1 if n_heads <= 24 else 2,
            showgrid=False, zeroline=False, constrain="domain",
        ),
        yaxis=dict(
            title="layer", autorange="reversed", tickmode="linear", dtick=1 if n_layers <= 24 else 2,
            showgrid=False, zeroline=False,
        ),
        xaxis2=dict(
            domain=list(d_sub), title="discovery accuracy", anchor="y2",
            tickformat=".0%" if max(accs) - min(accs) + 2 * acc_pad > 0.08 else ".1%",
            range=[min(accs) - acc_pad, max(accs) + acc_pad],
        ),
        yaxis2=dict(anchor="x2", autorange="reversed", type="category", tickfont=dict(size=11), dtick=1),
        xaxis3=dict(domain=list(d_gain), anchor="y3", type="category"),
        yaxis3=dict(
            anchor="x3", title=dict(text="test gain", standoff=4), tickformat="+.1%", zeroline=False,
            range=[min(span) - pad, max(span) + pad],
        ),
    )
    for text, (a, b) in (
        (f"stage-1 gains ({n_layers} layers x {n_heads} heads)", d_heat),
        (f"subsets by discovery accuracy (top {len(shown)} of {len(ranked)})", d_sub),
        ("Ŝ on test", d_gain),
    ):
        fig.add_annotation(
            text=f"<b>{text}</b>", x=(a + b) / 2, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
            showarrow=False, font=dict(size=13), yshift=6,
        )
    return fig


def _heatmap_title(r: Mapping[str, Any], selected: HeadSet) -> str:
    return (
        f"Ŝ = {selected}: test accuracy {_pp(r.get('test_acc_intact'), False)} -> "
        f"{_pp(r.get('test_acc_ablated'), False)}, gain {_pp(r.get('gain'))} "
        f"[{_pp(r.get('ci_low'))}, {_pp(r.get('ci_high'))}], p={_fmt_p(r.get('p_value'))}"
    )


# ---------------------------------------------------------------------------------------------
# discovery vs test
# ---------------------------------------------------------------------------------------------
def plot_discovery_vs_test(obj: ResultLike, *, title: Optional[str] = None) -> go.Figure:
    """Discovery gain vs post-hoc test gain of every evaluated subset (selected one starred), the
    y = x line, and the random-subset null (its 95% range on test) as a horizontal band."""
    from scipy.stats import spearmanr

    r = result_dict(obj)
    selected = str(HeadSet.parse(r.get("heads")))
    pts = [
        s for s in ranked_subsets(r)
        if s.get("test_gain_posthoc") is not None and s.get("dist_gain") is not None
    ]
    xs = np.array([_num(s["dist_gain"]) for s in pts])
    ys = np.array([_num(s["test_gain_posthoc"]) for s in pts])
    null = [float(g) for g in (r.get("null_gains") or [])]

    fig = go.Figure()
    vals = [*xs.tolist(), *ys.tolist(), *null, 0.0]
    lo, hi = min(vals), max(vals)
    pad = max(0.08 * (hi - lo), 0.01)
    lo, hi = lo - pad, hi + pad
    fmt = "+.0%" if hi - lo > 0.08 else "+.1%"
    if null:
        q_lo, q_hi = float(np.quantile(null, 0.025)), float(np.quantile(null, 0.975))
        fig.add_trace(
            go.Scatter(
                x=[lo, hi, hi, lo, lo], y=[q_lo, q_lo, q_hi, q_hi, q_lo], fill="toself", mode="lines",
                line=dict(width=0), fillcolor=NULL_COLOUR, hoverinfo="skip",
                name=f"null: random {len(HeadSet.parse(selected))}-head sets on test, 95% range (n={len(null)})",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[lo, hi], y=[float(np.mean(null))] * 2, mode="lines", line=dict(color="#666666", dash="dot"),
                name="null mean", hoverinfo="skip",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="black", dash="dash", width=1),
            name="test gain = discovery gain", hoverinfo="skip",
        )
    )
    others = [i for i, s in enumerate(pts) if s["heads"] != selected]
    sel = [i for i, s in enumerate(pts) if s["heads"] == selected]
    for idx, name, marker in (
        (others, "pool subsets", dict(size=9, color="#3b6fb6", opacity=0.75)),
        (sel, f"selected Ŝ = {selected}", dict(size=17, symbol="star", color=SELECTED_COLOUR, line=dict(width=1.5, color="black"))),
    ):
        if not idx:
            continue
        fig.add_trace(
            go.Scatter(
                x=xs[idx].tolist(), y=ys[idx].tolist(), mode="markers", marker=marker, name=name,
                customdata=[pts[i]["heads"] for i in idx],
                hovertemplate="%{customdata}<br>discovery gain: %{x:+.1%}<br>test gain: %{y:+.1%}<extra></extra>",
            )
        )
    subtitle = ""
    if len(pts) >= 3 and np.ptp(xs) > 0 and np.ptp(ys) > 0:
        rho, p = spearmanr(xs, ys)
        subtitle = f"<br><sup>Spearman ρ = {rho:.2f} (p={_fmt_p(p)}) over {len(pts)} subsets</sup>"
    fig.update_layout(
        width=820,
        height=660,
        font=FONT,
        template="plotly_white",
        title=dict(text=(title or "Does discovery gain transfer to the test split?") + subtitle, x=0.01),
        xaxis=dict(title="discovery gain (D_dist)", tickformat=fmt, range=[lo, hi], zeroline=True),
        yaxis=dict(title="test gain, post hoc (D_test)", tickformat=fmt, range=[lo, hi], zeroline=True),
        legend=dict(orientation="h", x=0.0, y=-0.14, xanchor="left", yanchor="top"),
        margin=dict(l=80, r=30, t=90, b=140),
    )
    return fig


# ---------------------------------------------------------------------------------------------
# attention patterns
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionPatterns:
    """Attention patterns of one example, intact and with ``ablated`` zero-ablated.

    ``intact`` and ``ablated`` are ``[layer, head, query, key]`` (query heads; rows sum to one over
    the causal keys); ``tokens`` are the string tokens.
    """

    tokens: list[str]
    ablated_heads: HeadSet
    intact: Float[Tensor, "layer head query key"]
    ablated: Float[Tensor, "layer head query key"]


def _pattern_name(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_pattern"


def _example_tokens(model, example: Any, include_target: bool, chat_template: bool) -> Tensor:
    """Token ids ``[1, pos]`` of an example as the evaluator feeds it: BOS and the prompt (in the chat
    template when asked), then the target (exact match) or the correct choice (multiple choice),
    split as :func:`cel_lens.evaluate.encode_pair` does. A string is tokenized as the model does."""
    if isinstance(example, str):
        return model.to_tokens(example)
    if isinstance(example, Tensor):
        return example.reshape(1, -1)
    prompt = getattr(example, "prompt", None)
    if prompt is None:
        raise TypeError(f"expected an Example, a string or token ids, got {type(example).__name__}")
    from cel_lens.evaluate import encode_pair, format_prompt

    context = format_prompt(model, prompt, chat_template)
    continuation = getattr(example, "target", None)
    choices, label = getattr(example, "choices", ()), getattr(example, "label", None)
    if continuation is None and choices and label is not None:
        continuation = choices[label]
    if include_target and continuation:
        ctx, cont = encode_pair(model, context, continuation)
        ids = ctx + cont
    else:
        tok = model.tokenizer
        ids = list(tok(context, add_special_tokens=False)["input_ids"])
        bos = getattr(tok, "bos_token_id", None)
        if getattr(model.cfg, "default_prepend_bos", True) and bos is not None and not (
            tok.bos_token and context.startswith(tok.bos_token)
        ):
            ids = [int(bos)] + ids
    device = next(iter(model.parameters())).device if hasattr(model, "parameters") else "cpu"
    return torch.tensor([ids], dtype=torch.long, device=device)


def attention_patterns(
    model,
    example: Any,
    ablate: HeadsLike = None,
    *,
    include_target: bool = True,
    chat_template: bool = False,
) -> AttentionPatterns:
    """Run ``example`` through ``model`` intact and with ``ablate`` zero-ablated, and record every
    layer's attention pattern. ``example`` is an ``Example`` (its prompt plus target or correct
    choice, tokenized as the evaluator does), a string, or token ids."""
    from cel_lens.ablation import ablation_hooks, model_shape

    n_layers, n_heads = model_shape(model)
    heads = HeadSet.parse(ablate).validate(n_layers, n_heads)
    tokens = _example_tokens(model, example, include_target, chat_template)
    str_tokens = [str(t) for t in model.to_str_tokens(tokens[0])]
    names = [_pattern_name(l) for l in range(n_layers)]
    hook_dict = getattr(model, "hook_dict", {})
    missing = [n for n in names if n not in hook_dict]
    if missing:
        raise ValueError(
            f"the model exposes no {missing[0]!r}; for a TransformerBridge call enable_compatibility_mode() "
            "(cel_lens.load_model does)"
        )

    def run(extra_hooks: list) -> Tensor:
        store: dict[str, Tensor] = {}

        def save(pattern: Tensor, hook) -> None:  # noqa: ANN001 - TL hook signature
            store[hook.name] = pattern.detach().float().cpu()

        with torch.no_grad(), model.hooks(fwd_hooks=[*extra_hooks, *[(n, save) for n in names]]):
            model(tokens)
        return torch.stack([store[n][0] for n in names])

    intact = run([])
    ablated = run(ablation_hooks(heads, n_heads=n_heads)) if heads else intact.clone()
    return AttentionPatterns(str_tokens, heads, intact, ablated)


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
        xaxis=dict(title="head", tickmode="linear", dtick=1 if n_heads <= 24 else 2, showgrid=False),
        yaxis=dict(title="layer", autorange="reversed", tickmode="linear", dtick=1 if n_layers <= 24 else 2, showgrid=False),
        legend=dict(orientation="h", x=0.0, y=-0.15, xanchor="left", yanchor="top"),
        margin=dict(l=70, r=30, t=70, b=110),
    )
    return fig


def _default_heads(patterns: AttentionPatterns, n_downstream: int) -> list[Head]:
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


def plot_attention(
    model,
    example: Any,
    ablate: HeadsLike = None,
    heads: HeadsLike = None,
    *,
    n_downstream: int = 3,
    include_target: bool = True,
    chat_template: bool = False,
    max_tokens: int = 40,
    patterns: Optional[AttentionPatterns] = None,
    title: Optional[str] = None,
) -> go.Figure:
    """Intact vs ablated attention patterns (and their difference) of ``heads`` on ``example``.

    ``heads`` defaults to the ablated heads plus the ``n_downstream`` later heads whose patterns the
    ablation changes most. Long inputs show their last ``max_tokens`` positions (queries and keys).
    Pass precomputed ``patterns`` (:func:`attention_patterns`) to skip the forward passes.
    """
    from plotly.subplots import make_subplots

    if patterns is None:
        patterns = attention_patterns(
            model, example, ablate, include_target=include_target, chat_template=chat_template
        )
    rows = list(HeadSet.parse(heads)) if heads is not None else _default_heads(patterns, n_downstream)
    if not rows:
        raise ValueError("no heads to show")
    n_tok = len(patterns.tokens)
    start = max(0, n_tok - max_tokens)
    labels = [_token_label(t) for t in patterns.tokens[start:]]
    pos = list(range(start, n_tok))
    change = pattern_change(patterns)
    titles: list[str] = []
    for h in rows:
        moved = f"pattern change {change[h.layer, h.head]:.3f}"
        tag = f" (output zeroed; {moved})" if h in patterns.ablated_heads else f" ({moved})"
        titles += [f"{h} intact", f"{h} ablated{tag}", f"{h} ablated - intact"]
    fig = make_subplots(
        rows=len(rows), cols=3, subplot_titles=titles, horizontal_spacing=0.07,
        vertical_spacing=min(0.12, 0.35 / len(rows)),
    )
    diff_max = 0.0
    for h in rows:
        diff = patterns.ablated[h.layer, h.head] - patterns.intact[h.layer, h.head]
        diff_max = max(diff_max, float(diff[start:, start:].abs().max()))
    diff_max = diff_max or 1e-6
    n_shown = len(pos)
    for i, h in enumerate(rows, start=1):
        a = patterns.intact[h.layer, h.head, start:, start:]
        b = patterns.ablated[h.layer, h.head, start:, start:]
        custom = [[[labels[q], labels[k]] for k in range(n_shown)] for q in range(n_shown)]
        for j, (z, scale, zmin, zmax, cbar) in enumerate(
            (
                (a, "Blues", 0.0, 1.0, dict(title="attention", x=1.0, y=1.0, yanchor="top", len=0.45, thickness=12)),
                (b, "Blues", 0.0, 1.0, None),
                (b - a, DIVERGING, -diff_max, diff_max, dict(title="ablated - intact", x=1.0, y=0.0, yanchor="bottom", len=0.45, thickness=12)),
            ),
            start=1,
        ):
            fig.add_trace(
                go.Heatmap(
                    z=z.tolist(), x=pos, y=pos, customdata=custom, colorscale=scale, zmin=zmin, zmax=zmax,
                    zmid=0.0 if j == 3 else None, showscale=cbar is not None and i == 1, colorbar=cbar,
                    hovertemplate="query %{y} %{customdata[0]}<br>key %{x} %{customdata[1]}<br>%{z:.3f}<extra></extra>",
                ),
                row=i, col=j,
            )
            fig.update_xaxes(
                tickmode="array", tickvals=pos, ticktext=labels, tickangle=-90, tickfont=dict(size=9),
                showgrid=False, row=i, col=j,
            )
            fig.update_yaxes(
                tickmode="array", tickvals=pos, ticktext=labels if j == 1 else [""] * n_shown,
                tickfont=dict(size=9), autorange="reversed", showgrid=False, row=i, col=j,
            )
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


def _token_label(token: str) -> str:
    """A visible label for a token (spaces and newlines shown)."""
    text = token.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·")
    return text if len(text) <= 12 else text[:11] + "…"


# ---------------------------------------------------------------------------------------------
# side effects
# ---------------------------------------------------------------------------------------------
def side_effect_matrix(
    model,
    tasks: Mapping[str, Any],
    selections: Mapping[str, HeadsLike],
    split: str = "test",
    *,
    batch_size: int = 8,
    progress: bool = False,
) -> tuple[np.ndarray, list[str]]:
    """Gain of every task's selected subset on every task: ``matrix[i, j]`` is the accuracy on task
    ``labels[j]`` with ``selections[labels[i]]`` ablated minus its intact accuracy (``split`` of each
    task). ``labels`` are the task names in ``tasks`` order; rows of tasks without a selection are NaN.
    One evaluation per task runs the intact model and every selection as variants."""
    from cel_lens.evaluate import evaluate

    labels = list(tasks)
    unknown = [name for name in selections if name not in tasks]
    if unknown:
        raise ValueError(f"selections for unknown task(s) {', '.join(unknown)}; tasks: {', '.join(labels)}")
    rows = [name for name in labels if name in selections]
    sets = [HeadSet.parse(selections[name]) for name in rows]
    matrix = np.full((len(labels), len(labels)), np.nan)
    for j, name in enumerate(labels):
        task = tasks[name]
        data = task.split(split) if hasattr(task, "split") else task
        res = evaluate(model, data, head_sets=[HeadSet(), *sets], batch_size=batch_size, progress=progress)
        acc = [float(a) for a in res.accuracy]
        for r, row_name in enumerate(rows):
            matrix[labels.index(row_name), j] = acc[r + 1] - acc[0]
    return matrix, labels


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


# ---------------------------------------------------------------------------------------------
# a run's figures
# ---------------------------------------------------------------------------------------------
def write_run_figures(
    obj: ResultLike, out_dir: Union[str, os.PathLike], formats: Sequence[str] = ("html", "png")
) -> list[Path]:
    """Write every figure a run's result supports (gain heatmap, discovery vs test) to ``out_dir``;
    return the files written. The HTML files load ``plotly.min.js`` from ``out_dir`` (written once
    next to them), so they open without a network."""
    from cel_lens.export import save_figure

    r = result_dict(obj)
    out = Path(out_dir)
    written: list[Path] = []
    if r.get("scores") is not None:
        written += save_figure(plot_gain_heatmap(r), out / "gain_heatmap", formats, include_plotlyjs="directory")
    if any(s.get("test_gain_posthoc") is not None for s in r.get("subsets") or []):
        written += save_figure(
            plot_discovery_vs_test(r), out / "discovery_vs_test", formats, include_plotlyjs="directory"
        )
    return written

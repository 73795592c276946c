"""The run explorer's panels as HTML and figures, from panel dicts (:mod:`~cel_lens.report.explorer_data`).

One renderer for both faces of the explorer: the Jupyter widget puts :func:`panel_html` in an HTML
widget and :func:`attention_figure` / :func:`logit_figure` in figure widgets; the standalone page
embeds the same HTML and figure dicts and swaps them on a click. Values sit in the DOM with
``data-row`` / ``data-value`` attributes so a browser test can read them. Nothing here runs a model.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Optional, Sequence

from plotly.subplots import make_subplots

from cel_lens.report.attention import token_label
from cel_lens.scoring.base import score_unit
from cel_lens.selection.result import format_p, pp

__all__ = ["panel_html", "examples_html", "model_html", "attention_figure", "logit_figure", "score_text"]


def score_text(value: Optional[float], scorer: str) -> str:
    """A stage-1 score in its scorer's unit (:meth:`~cel_lens.scoring.base.Scorer.score_unit`):
    percentage points for accuracy gains (exact, racing, ...), else the number with its unit."""
    return score_unit(scorer).text(value)


def _row(name: str, label: str, text: str, value: Any = None) -> str:
    attr = f' data-value="{html.escape(str(value))}"' if value is not None else ""
    return (f'<tr data-row="{name}"><th>{html.escape(label)}</th>'
            f'<td class="cel-value"{attr}>{html.escape(text)}</td></tr>')


def _gain_rows(block: Mapping[str, Any], split: str) -> list[str]:
    """A split's rows: accuracies, gain (with the run's one decision and its bounds when the run has
    a result: a descriptive interval, able to contradict it, is not shown beside it), flips, and the
    calibrated gain with its verdict for a choice task."""
    ci, dec = block.get("ci") or [None, None], block.get("decision")
    gain = (_row(f"{split}_gain", f"{split} gain (one-sided 95% bounds)",
                 f"{pp(block['gain'])} [{pp(block['bounds'][0])}, {pp(block['bounds'][1])}]", block["gain"]) if dec else
            _row(f"{split}_gain", f"{split} gain (95% CI)", f"{pp(block['gain'])} [{pp(ci[0])}, {pp(ci[1])}]", block["gain"]))
    rows = [
        _row(f"{split}_acc", f"{split} accuracy intact → ablated (n={block['n']})",
             f"{pp(block['acc_intact'], False)} → {pp(block['acc_ablated'], False)}"),
        gain,
        _row(f"{split}_flips", f"{split} examples fixed / broken", f"{block['n_fixed']} / {block['n_broken']}",
             f"{block['n_fixed']}/{block['n_broken']}"),
    ]
    if dec:
        rows.append(_row(f"{split}_helps", "ablation helps? (run's result)",
                         f"{'yes' if dec.get('helps') else 'not shown'} (one-sided exact p = {format_p(dec.get('p'))})",
                         dec.get("p")))
    elif block.get("p_value") is not None:
        rows.append(_row(f"{split}_p", "McNemar p (run's result)", format_p(block["p_value"]), block["p_value"]))
    if block.get("calibrated"):
        rows.append(_row(f"{split}_calibrated", "calibrated gain (each model at its best prior)", block["calibrated"]))
    return rows


def examples_html(entries: Sequence[Mapping[str, Any]], kind: str) -> str:
    """The listed examples of one kind (fixed or broken), each a block with its prompt and answer."""
    out = []
    for j, e in enumerate(entries):
        prompt = html.escape(e.get("prompt") or "(text not loaded)")
        answer = html.escape(str(e.get("answer"))) if e.get("answer") is not None else "?"
        out.append(f'<div class="cel-example" data-kind="{kind}" data-i="{j}"{"" if j == 0 else " hidden"}>'
                   f'<div class="cel-ex-id">{html.escape(str(e["id"]))} ({kind})</div>'
                   f'<pre class="cel-prompt">{prompt}</pre><div>answer: <b>{answer}</b></div></div>')
    return "".join(out)


def _browser(block: Mapping[str, Any], split: str, browse: bool) -> str:
    """The fixed and broken examples of a split, with a selector (page) or without (widget)."""
    entries = [("fixed", e) for e in block.get("fixed") or []] + [("broken", e) for e in block.get("broken") or []]
    if not entries or not browse:
        return ""
    options = "".join(f'<option value="{k}:{j}">{k}: {html.escape(str(e["id"]))}</option>'
                      for k in ("fixed", "broken") for j, e in enumerate(block.get(k) or []))
    body = examples_html(block.get("fixed") or [], "fixed") + examples_html(block.get("broken") or [], "broken")
    return (f'<div class="cel-browse" data-split="{split}"><label>{split} examples: '
            f'<select class="cel-example-select">{options}</select></label>{body}</div>')


def model_html(block: Mapping[str, Any]) -> str:
    """A model block's direct logit effects as a table: each ablated head's effect on the answer,
    on the best wrong answer, and on their margin."""
    logit = block.get("logit") or {}
    ex = block.get("example") or {}
    rows = "".join(
        f'<tr data-row="logit" data-head="{html.escape(r["head"])}"><td>{html.escape(r["head"])}</td>'
        f'<td data-value="{r["on_answer"]}">{r["on_answer"]:+.3f}</td><td data-value="{r["on_rival"]}">{r["on_rival"]:+.3f}</td>'
        f'<td class="cel-margin" data-value="{r["margin"]}">{r["margin"]:+.3f}</td></tr>'
        for r in logit.get("rows") or [] if None not in (r.get("on_answer"), r.get("on_rival"), r.get("margin"))
    )
    answer, rival = html.escape(str(logit.get("answer"))), html.escape(str(logit.get("rival")))
    return (f'<div class="cel-model-block" data-example="{html.escape(str(ex.get("id")))}">'
            f'<div>D_dist example {html.escape(str(ex.get("id")))}: answer token <b>{answer}</b>, '
            f'best wrong answer <b>{rival}</b></div><table class="cel-logit"><tr><th>head removed</th>'
            f'<th>Δ logit answer</th><th>Δ logit wrong</th><th>Δ margin</th></tr>{rows}</table></div>')


def panel_html(panel: Mapping[str, Any], *, browse: bool = True) -> str:
    """A panel as HTML: title, stage-1 score(s), D_dist gain with CI and flips, the D_test block
    (S-hat only), and the examples (with a selector when ``browse``)."""
    scorer = str(panel.get("scorer"))
    rows = [_row(f"score_{h}", f"stage-1 score of {h} ({scorer})", score_text(v, scorer), v)
            for h, v in (panel.get("scores") or {}).items()]
    dist, test = panel.get("dist"), panel.get("test")
    parts = []
    if dist is not None:
        rows += _gain_rows(dist, "D_dist")
    else:
        rows.append(_row("D_dist_gain", "D_dist gain", "not evaluated by the run (no interval)"))
    if test is not None and test.get("recorded"):
        rows += _gain_rows(test, "D_test")
        parts.append(f'<p class="cel-seal">D_test: S-hat only, from the answers the run recorded ({html.escape(test["source"])}).</p>')
    elif test is not None:
        rows.append(_row("D_test_gain", "D_test", test.get("note", "")))
    body = f'<table class="cel-rows">{"".join(rows)}</table>' + "".join(parts)
    if dist is not None:
        body += _browser(dist, "D_dist", browse)
    if test is not None and test.get("recorded"):
        body += _browser(test, "D_test", browse)
    return (f'<div class="cel-panel" data-heads="{html.escape(panel["heads"])}">'
            f'<h3 class="cel-title">{html.escape(panel["title"])}</h3>{body}</div>')


def _strip(fig: Any) -> dict[str, Any]:
    """A figure as a small dict: no template (the page and the widget bring their own look)."""
    d = fig.to_plotly_json()
    d["layout"].pop("template", None)
    return {"data": d["data"], "layout": d["layout"]}


def attention_figure(block: Mapping[str, Any]) -> dict[str, Any]:
    """Intact | ablated attention patterns of each head of a model block (rows: the ablated heads,
    then the downstream heads whose patterns change most), over its window of tokens."""
    patterns = block.get("patterns") or []
    labels = [f"{i}:{token_label(t)}" for i, t in enumerate(block.get("tokens") or [], start=int(block.get("offset") or 0))]
    titles = []
    for p in patterns:
        tag = "own pattern; output zeroed" if p["role"] == "ablated" else f"downstream, change {p['change']:.3f}"
        titles += [f"{p['head']} intact", f"{p['head']} ablated ({tag})"]
    fig = make_subplots(rows=max(1, len(patterns)), cols=2, subplot_titles=titles or None,
                        horizontal_spacing=0.12, vertical_spacing=0.12 if len(patterns) > 1 else 0.2)
    for i, p in enumerate(patterns):
        for j, key in enumerate(("intact", "ablated")):
            fig.add_heatmap(z=p[key], x=labels, y=labels, zmin=0, zmax=1, colorscale="Blues", showscale=(i == 0 and j == 1),
                            hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>", row=i + 1, col=j + 1)
            fig.update_yaxes(autorange="reversed", row=i + 1, col=j + 1, showticklabels=len(labels) <= 24, tickfont=dict(size=8))
            fig.update_xaxes(row=i + 1, col=j + 1, showticklabels=len(labels) <= 24, tickfont=dict(size=8), tickangle=-60)
    fig.update_layout(height=max(320, 300 * len(patterns)), width=640, margin=dict(l=60, r=20, t=40, b=60),
                      title=dict(text=f"attention, example {(block.get('example') or {}).get('id')}", font=dict(size=12)))
    fig.update_annotations(font_size=11)
    return _strip(fig)


def logit_figure(block: Mapping[str, Any]) -> dict[str, Any]:
    """Bars of each ablated head's direct logit effect on the answer, the best wrong answer and the margin."""
    logit = block.get("logit") or {}
    rows = [r for r in logit.get("rows") or [] if r.get("margin") is not None]
    heads = [r["head"] for r in rows]
    fig = make_subplots(rows=1, cols=1)
    for name, key, colour in ((f"answer {logit.get('answer')}", "on_answer", "#4c9a5a"),
                              (f"best wrong {logit.get('rival')}", "on_rival", "#c0504d"), ("margin", "margin", "#444")):
        fig.add_bar(x=heads, y=[r[key] for r in rows], name=name, marker_color=colour)
    fig.update_layout(barmode="group", height=260, width=640, margin=dict(l=60, r=20, t=40, b=40),
                      title=dict(text="direct logit effect of removing each head", font=dict(size=12)),
                      yaxis_title="Δ logit", legend=dict(orientation="h", y=-0.2))
    return _strip(fig)

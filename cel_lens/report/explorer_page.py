"""``explorer.html``: the run explorer as one standalone page, from precomputed data (no model, no server).

The layer x head heatmap of stage-1 scores is the entry point: clicking a cell shows that head's
panel (:mod:`~cel_lens.report.explorer_data`) beside it, and a selector picks a head set (S-hat,
the pool's heads, the best heads of stage 1, the best evaluated subsets). Panels are precomputed for
those head sets only (:func:`~cel_lens.report.explorer_data.panel_keys`); any other head shows its
stage-1 score and says it was not precomputed. Model panels (attention intact vs ablated, direct
logit effects) are on the page when the caller computed them (:func:`cel_lens.analysis.explorer_panels`,
``cel-lens report RUN --explorer-model``); the page states what it holds.

plotly.js is not copied in: the page loads the shared local copy (then the CDN), as every figure of
a report does (:func:`~cel_lens.report.save.shared_plotlyjs`). Size budget: :data:`PAGE_BUDGET_BYTES`
on a 672-head model with every cap at its default (panels are capped in number, examples in count and
prompt length, attention windows in tokens), checked by the tests.
"""

from __future__ import annotations

import html
import json
import os
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import plotly.graph_objects as go

from cel_lens.heads import HeadSet
from cel_lens.report.data import result_dict, stage1_scores
from cel_lens.runs.reader import as_record
from cel_lens.report.explorer_data import (
    explorer_summary,
    head_set_panel,
    load_examples_task,
    panel_keys,
    rounded,
)
from cel_lens.report.explorer_render import attention_figure, logit_figure, model_html, panel_html
from cel_lens.report.explorer_script import PAGE_SCRIPT, PAGE_STYLE
from cel_lens.report.head_panel import add_head_panel, head_axes
from cel_lens.report.save import _shared_loader
from cel_lens.scoring.base import score_unit
from cel_lens.tasks.base import Task

__all__ = ["PAGE_BUDGET_BYTES", "heatmap_figure", "explorer_page_data", "explorer_html", "write_explorer_page"]

PAGE_BUDGET_BYTES = 3_000_000
"""The page's size budget without plotly.js (shared): 3 MB on a 672-head model with the default caps."""
LIMITS = {"n_top": 32, "n_sets": 32, "n_examples": 20}
"""Upper bounds of the page's caps (what keeps its size bounded)."""


def heatmap_figure(r: Mapping[str, Any]) -> dict[str, Any]:
    """The clickable layer x head heatmap of stage-1 scores (pool and S-hat marked) as a figure dict."""
    scores = stage1_scores(r)
    n_layers, n_heads = scores.shape
    fig = go.Figure()
    add_head_panel(fig, scores, str(r.get("scorer")), HeadSet.parse(list(r.get("pool") or [])),
                  HeadSet.parse(r.get("heads") or []), colorbar={}, box_px=min(20.0, 560 / max(n_layers, n_heads)))
    xaxis, yaxis = head_axes(n_layers, n_heads, (0.0, 1.0))
    fig.update_layout(xaxis=xaxis, yaxis=yaxis, width=max(440, min(760, 200 + 28 * n_heads)),
                      height=max(340, min(760, 160 + 26 * n_layers)), margin=dict(l=50, r=20, t=10, b=90),
                      legend=dict(orientation="h", y=-0.32 if n_layers < 6 else -0.12), clickmode="event")
    d = fig.to_plotly_json()
    d["layout"].pop("template", None)
    return rounded({"data": d["data"], "layout": d["layout"]})


def _check(n_top: int, n_sets: int, n_examples: int) -> None:
    for name, value in (("n_top", n_top), ("n_sets", n_sets), ("n_examples", n_examples)):
        if not 0 <= int(value) <= LIMITS[name]:
            raise ValueError(f"{name} must lie in 0..{LIMITS[name]} (the page's size budget), got {value}")


def explorer_page_data(
    run: Any,
    *,
    model_panels: Optional[Mapping[str, Sequence[Mapping[str, Any]]]] = None,
    task: Optional[Task] = None,
    data_dir: Optional[str] = None,
    n_top: int = 8,
    n_sets: int = 8,
    n_examples: int = 6,
) -> dict[str, Any]:
    """Everything ``explorer.html`` shows, as one JSON-ready dict: the summary, the heatmap, the
    scores, one panel (HTML, and model blocks as HTML and figures) per precomputed head set, and
    what was precomputed. ``model_panels`` maps a head set (``"L3H1+L5H0"``) to its model blocks."""
    _check(n_top, n_sets, n_examples)
    record = as_record(run)
    r = result_dict(record, partial=True)
    if task is None:
        task, why = load_examples_task(record, data_dir)
    else:
        why = None
    keys = panel_keys(r, n_top=n_top, n_sets=n_sets) if r.get("scores") is not None or r.get("n_layers") else []
    panels = {}
    model_panels = {str(HeadSet.parse(k)): v for k, v in (model_panels or {}).items()}
    for key in keys:
        panel = head_set_panel(record, key, task=task, n_examples=n_examples, r=r)
        blocks = model_panels.get(key) or []
        panels[key] = {"title": panel["title"], "html": panel_html(panel), "model": [
            {"id": (b.get("example") or {}).get("id"), "html": model_html(b), "attention": attention_figure(b),
             "logit": logit_figure(b)} for b in blocks]}
    n_model = max((len(v) for v in model_panels.values()), default=0)
    return {
        "summary": explorer_summary(record, r), "scorer": str(r.get("scorer")), "heatmap": heatmap_figure(r),
        "unit": {k: getattr(score_unit(r.get("scorer")), k) for k in ("symbol", "scale", "decimals")},
        "scores": rounded(stage1_scores(r).tolist()), "panels": panels, "order": keys,
        "precomputed": {"n_sets": len(keys), "n_top": n_top, "n_subsets": n_sets, "n_examples": n_examples,
                        "model_examples": n_model, "model_sets": sum(1 for k in keys if model_panels.get(k)),
                        "examples_text": why is None, "why_no_text": why},
    }


def _statement(data: Mapping[str, Any]) -> str:
    """What the page precomputed, in one paragraph."""
    p = data["precomputed"]
    model = (f"model panels (attention intact vs ablated, direct logit effects) for {p['model_sets']} of them on up to "
             f"{p['model_examples']} D_dist example(s) each" if p["model_sets"] else
             "no model panels (written without a model: `cel-lens report RUN --explorer-model` adds them)")
    text = "" if p["examples_text"] else f" Example texts were not loaded ({p['why_no_text']}): examples are named by index."
    return (f"Precomputed: panels for {p['n_sets']} head sets (S-hat and its heads, the pool's heads, the {p['n_top']} best "
            f"heads of stage 1, the {p['n_subsets']} best evaluated subsets), each with its D_dist gain and a 95% CI and up "
            f"to {p['n_examples']} fixed and {p['n_examples']} broken D_dist examples; {model}. Any other head shows its "
            f"stage-1 score only. D_test: S-hat only, from what the run recorded after selection.{text}")


def explorer_html(data: Mapping[str, Any]) -> str:
    """The page's HTML from :func:`explorer_page_data` (plotly.js from the shared copy, else the CDN)."""
    s = data["summary"]
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    options = "".join(f'<option value="{html.escape(k)}">{html.escape(data["panels"][k]["title"])}</option>'
                      for k in data["order"])
    head = (f"{html.escape(s['model'])} × {html.escape(s['task'])}: {html.escape(s['progress'])}; scorer {html.escape(s['scorer'])}; S-hat {html.escape(str(s['selected']))}")
    statement = html.escape(_statement(data))
    body = (
        f"<h2>Run explorer</h2><p id=\"cel-summary\">{head}</p><p id=\"cel-precomputed\">{statement}</p>"
        f"<div id=\"cel-main\"><div id=\"cel-left\"><b>stage-1 scores: click a head</b><div id=\"cel-heatmap\"></div></div><div id=\"cel-right\">"
        f"<label>head set: <select id=\"cel-sets\">{options}</select></label> <span id=\"cel-current\"></span>"
        f"<div id=\"cel-panel\"></div><div id=\"cel-model\"><label id=\"cel-model-pick\" hidden>model panel example: "
        f"<select id=\"cel-model-example\"></select></label><div id=\"cel-model-html\"></div>"
        f"<div id=\"cel-logit\"></div><div id=\"cel-attention\"></div></div></div></div>"
    )
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>cel_lens explorer: {html.escape(s['model'])} × "
            f"{html.escape(s['task'])}</title>{_shared_loader()}<style>{PAGE_STYLE}</style></head><body>{body}"
            f"<script type=\"application/json\" id=\"cel-data\">{payload}</script><script>{PAGE_SCRIPT}</script></body></html>")


def write_explorer_page(
    run: Any, out_dir: Union[str, os.PathLike], *, model_panels: Optional[Mapping[str, Sequence[Mapping[str, Any]]]] = None,
    task: Optional[Task] = None, data_dir: Optional[str] = None, n_top: int = 8, n_sets: int = 8, n_examples: int = 6,
) -> Path:
    """Write ``out_dir/explorer.html`` (see the module docstring) and return its path; warn when it
    is over :data:`PAGE_BUDGET_BYTES`."""
    _check(n_top, n_sets, n_examples)
    data = explorer_page_data(run, model_panels=model_panels, task=task, data_dir=data_dir, n_top=n_top, n_sets=n_sets,
                              n_examples=n_examples)
    page = explorer_html(data)
    path = Path(out_dir) / "explorer.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    if len(page.encode("utf-8")) > PAGE_BUDGET_BYTES:
        warnings.warn(f"{path}: {len(page) / 1e6:.1f} MB, over the page budget of {PAGE_BUDGET_BYTES / 1e6:.0f} MB", RuntimeWarning,
                      stacklevel=2)
    return path

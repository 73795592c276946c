"""Two runs side by side: their stage-1 heatmaps and how much their selections agree.

Two models, two scorers or two seeds on one task: :func:`compare_runs` says which heads both runs
selected (Ŝ overlap, Jaccard index), how much their candidate pools share, how their stage-1 scores
rank the heads alike (Spearman's rank correlation, when both grids have one layout) and each run's
test gain; :func:`plot_compare` draws both heatmaps (one colour scale when the scores share a unit)
with the pools and selections outlined, and the comparison as the figure's caption. Either run may
be unfinished (its record so far). Nothing here runs a model.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from scipy.stats import spearmanr

from cel_lens.heads import HeadSet
from cel_lens.report.data import ResultLike, is_unfinished, result_dict, stage1_scores
from cel_lens.report.head_panel import add_head_panel, cell_labels, head_axes, score_units
from cel_lens.report.style import FONT
from cel_lens.selection.result import format_p, pp

__all__ = ["compare_runs", "format_comparison", "plot_compare"]

_WIDTH, _HEIGHT = 1350, 640


def _label(obj: ResultLike, given: Optional[str], index: int) -> str:
    """``given``, else the run directory's name (a path, a run or a record), else ``run A``/``run B``."""
    if given:
        return given
    path = obj if isinstance(obj, (str, os.PathLike)) else getattr(obj, "path", None)
    if path is None and isinstance(obj, Mapping):
        path = obj.get("path")
    return Path(path).name if path else f"run {'AB'[index]}"


def _overlap(a: Sequence[str], b: Sequence[str]) -> dict[str, Any]:
    sa, sb = set(HeadSet.parse(list(a)).heads), set(HeadSet.parse(list(b)).heads)
    union = sa | sb
    text = lambda heads: [str(h) for h in sorted(heads)]  # noqa: E731 - layer, then head order
    return dict(both=text(sa & sb), only_a=text(sa - sb), only_b=text(sb - sa),
                jaccard=len(sa & sb) / len(union) if union else math.nan)


def _rank_correlation(x: np.ndarray, y: np.ndarray) -> Optional[float]:
    if x.shape != y.shape:
        return None
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3:
        return None
    rho = spearmanr(x[keep], y[keep]).correlation
    return None if rho is None or math.isnan(rho) else float(rho)


def compare_runs(a: ResultLike, b: ResultLike, *, labels: Sequence[Optional[str]] = (None, None)) -> dict[str, Any]:
    """How two runs compare (see the module docstring): ``labels``, each run's ``runs`` summary
    (S-hat, scorer, layout, test gain, CI, p), ``selected`` and ``pool`` overlaps (``both``,
    ``only_a``, ``only_b``, ``jaccard``) and ``score_rank_correlation`` (``None`` across layouts)."""
    ra, rb = result_dict(a, partial=True), result_dict(b, partial=True)
    names = [_label(obj, labels[i] if i < len(labels) else None, i) for i, obj in enumerate((a, b))]
    runs = [
        dict(label=n, heads=r.get("heads"), scorer=r.get("scorer"), layout=[r.get("n_layers"), r.get("n_heads")],
             gain=r.get("gain"), ci=[r.get("ci_low"), r.get("ci_high")], p_value=r.get("p_value"),
             finished=not is_unfinished(r))
        for n, r in zip(names, (ra, rb))
    ]
    return dict(
        labels=names, runs=runs,
        selected=_overlap([str(h) for h in HeadSet.parse(ra.get("heads"))], [str(h) for h in HeadSet.parse(rb.get("heads"))]),
        pool=_overlap(ra.get("pool") or [], rb.get("pool") or []),
        score_rank_correlation=_rank_correlation(stage1_scores(ra), stage1_scores(rb)),
    )


def _heads_text(heads: Sequence[str]) -> str:
    """Heads listed one by one (``L0H0, L0H1``): a pool's or an overlap's heads, not one head set,
    so never joined with ``+`` (which reads as a set ablated together)."""
    return ", ".join(heads) if heads else "none"


def format_comparison(cmp: Mapping[str, Any]) -> str:
    """The comparison as text: each run's S-hat and test gain, then the overlaps and the correlation."""
    lines = []
    for r in cmp["runs"]:
        gain = f"test gain {pp(r['gain'])} [{pp(r['ci'][0])}, {pp(r['ci'][1])}], p={format_p(r['p_value'])}"
        lines.append(f"{r['label']}: Ŝ = {r['heads'] or 'not selected yet'} ({r['scorer']}); "
                     + (gain if r["finished"] else "unfinished"))
    a, b = cmp["labels"]
    for what in ("selected", "pool"):
        o = cmp[what]
        lines.append(f"{what}: both {_heads_text(o['both'])}; only {a} {_heads_text(o['only_a'])}; "
                     f"only {b} {_heads_text(o['only_b'])} (Jaccard {o['jaccard']:.2f})")
    rho = cmp["score_rank_correlation"]
    lines.append("stage-1 scores: " + (f"Spearman rank correlation {rho:+.2f} over the heads" if rho is not None
                                       else "different layouts (or too few heads scored): no correlation"))
    return "\n".join(lines)


def _shared_scale(ra: Mapping[str, Any], rb: Mapping[str, Any], sa: np.ndarray, sb: np.ndarray) -> Optional[float]:
    """One colour-scale end for both panels when their scores share a unit, else ``None``."""
    if score_units(ra.get("scorer")).unit != score_units(rb.get("scorer")).unit:
        return None
    finite = np.abs(np.concatenate([sa[np.isfinite(sa)], sb[np.isfinite(sb)]]))
    return float(finite.max()) if finite.size and finite.max() > 0 else None


def plot_compare(a: ResultLike, b: ResultLike, *, labels: Sequence[Optional[str]] = (None, None),
                 title: Optional[str] = None) -> go.Figure:
    """Both runs' stage-1 heatmaps side by side (pools outlined, selections in gold; one colour scale
    when the scorers share a unit), with :func:`format_comparison` as the caption."""
    names = [_label(obj, labels[i] if i < len(labels) else None, i) for i, obj in enumerate((a, b))]
    ra, rb = result_dict(a, partial=True), result_dict(b, partial=True)
    cmp = compare_runs(ra, rb, labels=names)
    sa, sb = stage1_scores(ra), stage1_scores(rb)
    shared = _shared_scale(ra, rb, sa, sb)
    fig = go.Figure()
    domains = ((0.0, 0.40), (0.52, 0.92))
    for i, (r, s) in enumerate(((ra, sa), (rb, sb))):
        ax = ("x", "y") if i == 0 else ("x2", "y2")
        bar = None if (shared is not None and i == 0) else dict(x=domains[i][1] + 0.01, xanchor="left", len=0.8, y=0.5)
        cell = min((_WIDTH - 110) * (domains[i][1] - domains[i][0]) / s.shape[1], (_HEIGHT - 280) / s.shape[0])
        longest = max((len(t) for row in cell_labels(s, score_units(r.get("scorer"))) for t in row), default=0)
        add_head_panel(fig, s, str(r.get("scorer")), HeadSet.parse(r.get("pool") or []), HeadSet.parse(r.get("heads")),
                      axes=ax, colorbar=bar, box_px=cell, legend=False, max_abs=shared,
                      show_values=cell >= max(24.0, 7.0 * longest + 6))
        xa, ya = head_axes(*s.shape, domains[i], anchors=ax if i else None)
        fig.update_layout(**{f"xaxis{i + 1 if i else ''}": xa, f"yaxis{i + 1 if i else ''}": ya})
        fig.add_annotation(
            text=f"<b>{cmp['labels'][i]}</b><br>Ŝ = {r.get('heads') or 'not selected yet'} ({r.get('scorer')})",
            x=sum(domains[i]) / 2, y=1.0, xref="paper", yref="paper", yanchor="bottom", showarrow=False, yshift=6,
        )
    fig.update_layout(
        width=_WIDTH, height=_HEIGHT, font=FONT, template="plotly_white",
        title=dict(text=title or f"{cmp['labels'][0]} vs {cmp['labels'][1]}: stage-1 scores, pools (black boxes) "
                   "and selections (gold)", x=0.01, xanchor="left", font=dict(size=16)),
        margin=dict(l=70, r=40, t=110, b=170),
    )
    fig.add_annotation(text=format_comparison(cmp).replace("\n", "<br>"), x=0.0, y=-0.16, xref="paper", yref="paper",
                       xanchor="left", yanchor="top", align="left", showarrow=False, font=dict(size=12))
    return fig

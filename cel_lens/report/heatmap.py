"""The gain heatmap: what stage 1 saw, what stage 2 chose, and how it fared on the test split.

One figure, three panels side by side: the stage-1 scores over layers x heads
(:mod:`cel_lens.report.head_panel`: a diverging scale centred at zero in the scorer's units, pool
heads outlined, the selected ones in gold, values in the cells of a small grid), the evaluated subsets ranked by
discovery accuracy (the selected one highlighted; each labelled with how often stage 2 picks it on
bootstrap resamples of D_dist, its selection stability; discovery numbers are selection-biased),
and the selected subset's test gain with its 95% CI against the random-subset null band.

A finished result is read through its typed parts (:meth:`~cel_lens.selection.result.Result.from_dict`);
an unfinished run's panels draw what its record holds so far (:func:`~cel_lens.report.data.result_dict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import plotly.graph_objects as go

from cel_lens.heads import HeadSet
from cel_lens.report.data import ResultLike, is_unfinished, ranked_subsets, result_dict, stage1_scores
from cel_lens.report.head_panel import add_head_panel, cell_labels, head_axes, score_units
from cel_lens.report.style import (
    FONT,
    NULL_COLOUR,
    OTHER_COLOUR,
    SELECTED_COLOUR,
    as_float,
    padded_range,
    percent_tickformat,
)
from cel_lens.selection.calibration_text import calibrated_counts, calibrated_gain_text
from cel_lens.selection.records import StabilityRecord
from cel_lens.selection.result_parts import decision_bounds, known_share
from cel_lens.stats import gain_bounds
from cel_lens.selection.result import Result, format_p, pp

__all__ = ["plot_gain_heatmap", "heatmap_title", "stability_wins"]

_STAR = dict(symbol="star", color=SELECTED_COLOUR, line=dict(width=1.5, color="black"))


@dataclass(frozen=True)
class _Geometry:
    """Figure size and the x domains of the three panels (heatmap, subsets, test gain): the gap
    between heatmap and subsets holds the colourbar (~125 px) and the subset labels."""

    n_layers: int
    n_heads: int
    plot_h: int
    width: int
    height: int
    d_heat: tuple[float, float]
    d_sub: tuple[float, float]
    d_gain: tuple[float, float]

    @property
    def cell_px(self) -> float:
        """The side of the smaller dimension of one heatmap cell, in pixels."""
        cell_w = (self.width - 90) * (self.d_heat[1] - self.d_heat[0]) / max(self.n_heads, 1)
        return min(self.plot_h / max(self.n_layers, 1), cell_w)

    def fits_values(self, labels: list[list[str]]) -> bool:
        """Whether every cell is wide and tall enough to print its value (about 7 px a character)."""
        longest = max((len(t) for row in labels for t in row), default=0)
        return self.cell_px >= max(24.0, 7.0 * longest + 6)


def _geometry(n_layers: int, n_heads: int, ranked: list[dict[str, Any]], shown: list[dict[str, Any]]) -> _Geometry:
    """Cells of 14-40 px a layer, a row a shown subset, and room for the longest subset label."""
    cell = max(14, min(40, 560 // max(n_layers, 1)))
    plot_h = max(300, cell * n_layers, 19 * len(shown))
    label_px = 7 * max([len(f"#{len(ranked)} {s['heads']}") for s in shown] or [0])
    width = max(1350, int((125 + label_px) / 0.17) + 90)
    d_sub, d_gain = (0.615, 0.835), (0.905, 1.0)
    d_heat = (0.0, d_sub[0] - (125 + label_px) / (width - 90))
    return _Geometry(n_layers, n_heads, plot_h, width, plot_h + 210, d_heat, d_sub, d_gain)


def _add_scores(fig: go.Figure, scores: np.ndarray, scorer: str, pool: HeadSet, selected: HeadSet, geo: _Geometry) -> None:
    """The stage-1 panel (:func:`~cel_lens.report.head_panel.add_head_panel`): values printed in
    the cells when they fit."""
    add_head_panel(
        fig, scores, scorer, pool, selected, colorbar=dict(x=geo.d_heat[1] + 0.01, xanchor="left", y=0.42, yanchor="middle", len=0.8),
        box_px=geo.cell_px, show_values=geo.fits_values(cell_labels(scores, score_units(scorer))),
    )


def stability_wins(st: Optional[StabilityRecord]) -> Optional[dict[str, float]]:
    """How often each subset won stage 2 on bootstrap resamples of D_dist (canonical heads ->
    fraction of the resamples whose winner is known; subsets that never won are absent), from a
    result's selection stability (``result.stability.selection``), or ``None`` when there is none
    or most resamples' winners are not known (no share is shown)."""
    if not st:
        return None
    incomplete = float(st.get("incomplete") or 0.0)
    if known_share(0.0, incomplete) is None:
        return None
    return {str(HeadSet.parse(w["heads"])): float(known_share(float(w["frequency"]), incomplete))
            for w in st["wins"]}


def _stability(res: Optional[Result]) -> Optional[StabilityRecord]:
    """A finished result's selection stability (``None`` for none, or for an unfinished run)."""
    return None if res is None else res.stability.selection


def _add_ranked_subsets(fig: go.Figure, ranked: list[dict[str, Any]], shown: list[dict[str, Any]], selected: HeadSet,
                        res: Optional[Result], intact: Optional[float]) -> None:
    """The shown subsets by discovery accuracy (rank in the label, the selected one starred, each
    marked with its selection stability) and the intact model's discovery accuracy as a dashed line."""
    if not shown:
        return
    is_sel = [s["heads"] == str(selected) for s in shown]
    wins = stability_wins(_stability(res))
    won = [wins.get(s["heads"], 0.0) if wins is not None else float("nan") for s in shown]
    fig.add_trace(
        go.Scatter(
            x=[as_float(s["dist_acc"]) for s in shown],
            y=[f"#{ranked.index(s) + 1} {s['heads']}" for s in shown],
            mode="markers+text" if wins is not None else "markers",
            text=[f"{w:.0%}" for w in won] if wins is not None else None,
            textposition="middle right",
            textfont=dict(size=10, color="#555555"),
            cliponaxis=False,  # the best subset's label may run past the axis into the gap
            marker=dict(
                size=[13 if sel else 8 for sel in is_sel],
                color=[SELECTED_COLOUR if sel else OTHER_COLOUR for sel in is_sel],
                symbol=["star" if sel else "circle" for sel in is_sel],
                line=dict(width=[1.5 if sel else 0 for sel in is_sel], color="black"),
            ),
            customdata=[
                [s["heads"], as_float(s["dist_gain"]), as_float(s.get("test_gain_posthoc")), w]
                for s, w in zip(shown, won)
            ],
            hovertemplate=(
                "%{customdata[0]}<br>discovery acc: %{x:.1%}<br>discovery gain: %{customdata[1]:+.1%} "
                "(selection-biased)<br>test gain (post hoc): %{customdata[2]:+.1%}"
                + (f"<br>selected on %{{customdata[3]:.0%}} of bootstrap resamples of D_dist{_known_only(res)}"
                   if wins is not None else "")
                + "<extra></extra>"
            ),
            name="subsets (discovery)",
            showlegend=False,
            xaxis="x2",
            yaxis="y2",
        )
    )
    if intact is not None:
        fig.add_shape(
            type="line", xref="x2", yref="y2 domain", x0=float(intact), x1=float(intact), y0=0, y1=1,
            line=dict(color="black", dash="dash", width=1.2),
        )
        fig.add_annotation(
            x=float(intact), y=0.0, xref="x2", yref="y2 domain", text="intact", showarrow=False,
            xanchor="left", yanchor="bottom", xshift=3, font=dict(size=11),
        )


def _placeholders(fig: go.Figure, res: Optional[Result], geo: _Geometry, shown: list[dict[str, Any]]) -> None:
    """Notes in the empty panels of an unfinished run: no subset yet, no test gain yet."""
    no_gain = res is None or res.test.gain is None
    for empty, (a, b), text in (
        (not shown, geo.d_sub, "no subset evaluated yet"), (no_gain, geo.d_gain, "not<br>measured<br>yet"),
    ):
        if empty:
            fig.add_annotation(text=text, x=(a + b) / 2, y=0.65, xref="paper", yref="paper", showarrow=False,
                               font=dict(size=12, color="#777777"), bgcolor="white")


def _null_gains(res: Optional[Result]) -> list[float]:
    """The random-subset null's test gains (empty when not computed, or for an unfinished run)."""
    return [] if res is None else [float(g) for g in (res.null.gains or [])]


def _add_test_gain(fig: go.Figure, res: Optional[Result], selected: HeadSet) -> None:
    """The selected subset's test gain with its CI as error bars, over the null's 95% band."""
    null = [100 * g for g in _null_gains(res)]  # the panel is in percentage points
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
    fig.add_shape(type="line", xref="x3 domain", yref="y3", x0=0, x1=1, y0=0, y1=0, line=dict(color="black", width=1))
    points = _gain_points(res)
    if not points:
        return
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in points],
            y=[100 * p[1] for p in points],
            mode="markers",
            marker=dict(_STAR, size=[15, 12][: len(points)], color=[SELECTED_COLOUR, CALIBRATED_COLOUR][: len(points)]),
            error_y=dict(
                type="data", symmetric=False, array=[0 if math.isnan(p[3]) else 100 * (p[3] - p[1]) for p in points],
                arrayminus=[0 if math.isnan(p[2]) else 100 * (p[1] - p[2]) for p in points], color="black",
                thickness=1.5, width=8,
            ),
            hovertext=[f"{selected}<br>{p[4]}" for p in points],
            hovertemplate="%{hovertext}<extra></extra>",
            name="test gain",
            showlegend=False,
            xaxis="x3",
            yaxis="y3",
        )
    )


CALIBRATED_COLOUR = "#6a51a3"
"""The calibrated gain's marker in the Ŝ panel (beside the raw gain's gold star)."""


def _gain_points(res: Optional[Result]) -> list[tuple[str, float, float, float, str]]:
    """The Ŝ panel's points ``(label, gain, low, high, hover)``: the raw D_test gain with the one
    decision's bounds and verdict (a result without a decision: its interval), and for a choice task
    the calibrated gain (each model at its best prior on D_test) with its bounds and verdict."""
    if res is None or res.test.gain is None:
        return []
    test = res.test
    g, dec = as_float(test.gain), test.decision
    if dec:
        lo, hi = (as_float(x) for x in decision_bounds(dec))
        verdict = "helps: yes" if dec["helps"] else "helps: not shown"
        hover = f"raw test gain {pp(g)}, one-sided 95% bounds [{pp(lo)}, {pp(hi)}]; {verdict} (p={format_p(dec['p'])})"
    else:
        lo, hi = as_float(test.ci_low), as_float(test.ci_high)
        verdict, hover = "", f"test gain {pp(g)}, 95% CI [{pp(lo)}, {pp(hi)}], McNemar p={format_p(test.p_value)}"
    span = "" if math.isnan(lo) or math.isnan(hi) else f"<br>[{pp(lo)},<br>{pp(hi)}]"
    c = res.calibration or {}
    raw = "raw " if c.get("applies") and "gain_best" in c else ""
    points = [(f"{raw}{pp(g)}{span}" + (f"<br>{verdict}" if verdict else ""), g, lo, hi, hover)]
    if raw:
        n = res.n_test
        counts = calibrated_counts(c, n) if isinstance(n, int) else None
        clo, chi = gain_bounds(*counts, n, float(res.alpha)) if counts else (float("nan"), float("nan"))
        cverdict = "survives" if c.get("survives") else "not shown to survive"
        cspan = "" if counts is None else f"<br>[{pp(clo)},<br>{pp(chi)}]"
        points.append((f"calibrated {pp(c['gain_best'])}{cspan}<br>{cverdict}", float(c["gain_best"]), clo, chi,
                       f"calibrated gain {pp(c['gain_best'])} (each model at its best prior on D_test); {cverdict} "
                       f"calibration (p={format_p(c.get('p_value_cal'))})"))
    return points


def _axes(res: Optional[Result], intact: Optional[float], geo: _Geometry, shown: list[dict[str, Any]]) -> dict[str, Any]:
    """The layout's six axes: heatmap (x, y), subsets (x2, y2) and test gain (x3, y3). Accuracy
    never runs below 0 % or above 100 %, and ticks carry the decimals their spacing needs."""
    drawn = [x for p in _gain_points(res) for x in p[1:4]]  # the Ŝ panel's points and their bounds
    gains = [100 * x for x in drawn if not math.isnan(x)] + [100 * g for g in _null_gains(res)] + [0.0]
    gain_range = padded_range(gains, 0.15, floor=0.2, bounds=(-100.0, 100.0))  # percentage points
    accs = [as_float(s["dist_acc"]) for s in shown] + ([float(intact)] if intact is not None else [])
    acc_range = padded_range(accs, 0.08, floor=0.002, bounds=(0.0, 1.0))
    heads_x, layers_y = head_axes(geo.n_layers, geo.n_heads, geo.d_heat)
    return dict(
        xaxis=heads_x,
        yaxis=layers_y,
        xaxis2=dict(
            domain=list(geo.d_sub), title="discovery accuracy", anchor="y2",
            tickformat=percent_tickformat(acc_range[1] - acc_range[0]), range=acc_range,
        ),
        yaxis2=dict(anchor="x2", autorange="reversed", type="category", tickfont=dict(size=11), dtick=1),
        xaxis3=dict(domain=list(geo.d_gain), anchor="y3", type="category"),
        yaxis3=dict(
            anchor="x3", title=dict(text="test gain (pp)", standoff=4), zeroline=False, range=gain_range,
            tickformat=f"+.{_decimals(gain_range[1] - gain_range[0])}f", ticksuffix=" pp",
        ),
    )


def _decimals(span: float, n_ticks: int = 5) -> int:
    """Decimals that tell ``n_ticks`` ticks over ``span`` (in pp) apart: 0 for 10 pp, 2 for 0.05 pp."""
    step = max(span, 1e-12) / n_ticks
    return min(3, max(0, math.ceil(-math.log10(step)))) if step < 1 else 0


def _title_notes(res: Optional[Result]) -> list[str]:
    """What the title must not leave to the text report: a selection made after D_test was read, a
    selection that is no enhancement, and one that only the tie-break made (none for an unfinished run)."""
    notes: list[str] = []
    if res is None:  # an unfinished run
        return notes
    if res.test.selected_before_test is False:
        reads = res.test.seal["prior_test_reads"] if res.test.seal else None
        notes.append("⚠ Ŝ NOT fixed before D_test: D_test was read "
                     + (f"{reads} time(s) " if reads else "") + "before the selection (see the run's seal)")
    dist_gain = res.discovery.gain
    if dist_gain is not None and not math.isnan(float(dist_gain)) and float(dist_gain) <= 0:
        notes.append(f"⚠ not an enhancement: no evaluated ablation raised D_dist accuracy (discovery gain {pp(dist_gain)})")
    st = _stability(res) or {}
    if st.get("identical_subsets"):
        notes.append(f"⚠ Ŝ ties {st['identical_subsets']} other subset(s) on every D_dist example: chosen by the tie-break")
    return notes


def _typed(r: Mapping[str, Any]) -> Optional[Result]:
    """A finished result's typed parts (``None`` for an unfinished run's partial record)."""
    return None if is_unfinished(r) else Result.from_dict(r)


def heatmap_title(r: Mapping[str, Any], selected: HeadSet) -> str:
    """The gain heatmap's default title: S-hat, its test accuracies, gain, CI and McNemar p, and
    beside them the calibrated gain of a choice task (an unfinished run: how far it got). ``r``:
    a result dict (``result.json``, read through its typed parts) or an unfinished run's partial record."""
    return _title(_typed(r), r, selected)


def _title(res: Optional[Result], r: Mapping[str, Any], selected: HeadSet) -> str:
    """:func:`heatmap_title` of a result's typed parts (``res``), or of an unfinished run's record ``r``."""
    if res is None:
        progress = r.get("progress") or {}
        return f"unfinished run ({r.get('state', 'unfinished')}): {progress.get('status', 'nothing recorded yet')}"
    test = res.test
    dec = test.decision
    low, high = decision_bounds(dec) if dec else (test.ci_low, test.ci_high)
    line = (
        f"Ŝ = {selected}: test accuracy {pp(test.acc_intact, False)} -> "
        f"{pp(test.acc_ablated, False)}, gain {pp(test.gain)} "
        f"[{pp(low)}, {pp(high)}], "
        + (f"helps: {'yes' if dec['helps'] else 'not shown'} (one-sided exact p={format_p(dec['p'])})" if dec
           else f"p={format_p(test.p_value)}")
        + (f"; calibrated gain {calibrated_gain_text(res.calibration_view())}" if (res.calibration or {}).get("applies") else "")
    )
    return "<br>".join([line, *(f"<sup>{note}</sup>" for note in _title_notes(res))])


def _known_only(res: Optional[Result]) -> str:
    """`` whose winner is known`` when some resamples' winners are not known (each share is then of the rest)."""
    return " whose winner is known" if (_stability(res) or {}).get("incomplete") else ""


def _count(n: int, noun: str) -> str:
    """``1 layer``, ``3 layers``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _subset_heading(res: Optional[Result], shown: int, total: int) -> str:
    """The subset panel's heading: what is ranked, that it is selection-biased, what the % are."""
    st = _stability(res)
    wins = f"; % = selected on {st['n_resamples']} resamples of D_dist" if st else ""
    if st and st.get("incomplete"):  # those resamples' winners are not known
        unsure = round(st["incomplete"] * st["n_resamples"])
        wins = (f"; % = selected, of the {st['n_resamples'] - unsure} of {st['n_resamples']} resamples whose winner is "
                "known" if stability_wins(st) is not None else
                f"; no % shown: {unsure} of {st['n_resamples']} resamples' winners are not known")
    return f"subsets by discovery accuracy (top {shown} of {total})<br><sup>selection-biased{wins}</sup>"


def plot_gain_heatmap(obj: ResultLike, *, max_subsets: int = 20, title: Optional[str] = None) -> go.Figure:
    """Stage-1 scores as a layer x head heatmap (diverging, centred at zero, in the scorer's units;
    pool heads outlined, the selected heads in gold; values printed when the cells fit them), the
    evaluated subsets ranked by discovery accuracy (selected one highlighted, top ``max_subsets`` shown, each with its selection stability) and the selected
    subset's test gain with its 95% CI against the random-subset null band. An unfinished run (a
    path or :func:`~cel_lens.runs.load_run` record) shows what its record holds so far: the heads
    scored, the pool and the subsets evaluated, blank cells and panels for the rest."""
    r = result_dict(obj, partial=True)
    res = _typed(r)
    scores = stage1_scores(r)
    scorer = str(res.scorer if res is not None else r.get("scorer", "?"))
    selected = HeadSet.parse(res.heads if res is not None else r.get("heads"))
    pool = res.discovery.pool if res is not None else r.get("pool")
    intact = res.discovery.acc_intact if res is not None else r.get("dist_acc_intact")
    ranked = ranked_subsets(r)
    shown = ranked[:max_subsets]
    if selected and str(selected) not in {s["heads"] for s in shown}:
        shown += [s for s in ranked if s["heads"] == str(selected)]
    geo = _geometry(*scores.shape, ranked, shown)

    fig = go.Figure()
    _add_scores(fig, scores, scorer, HeadSet.parse(pool or []), selected, geo)
    _add_ranked_subsets(fig, ranked, shown, selected, res, intact)
    _add_test_gain(fig, res, selected)
    _placeholders(fig, res, geo, shown)
    fig.update_layout(
        width=geo.width,
        height=geo.height,
        font=FONT,
        template="plotly_white",
        title=dict(text=title or _title(res, r, selected), x=0.01, xanchor="left", font=dict(size=16)),
        margin=dict(l=70, r=20, t=95 + (24 * len(_title_notes(res)) if title is None and res is not None else 0), b=120),
        legend=dict(orientation="h", x=0.0, y=0.02, xanchor="left", yanchor="bottom", yref="container"),
        **_axes(res, intact, geo, shown),
    )
    for text, (a, b) in (
        (f"stage-1 {score_units(scorer).noun}s ({_count(geo.n_layers, 'layer')} x {_count(geo.n_heads, 'head')})", geo.d_heat),
        (_subset_heading(res, len(shown), len(ranked)), geo.d_sub),
        ("Ŝ on test", geo.d_gain),
    ):
        fig.add_annotation(
            text=f"<b>{text}</b>", x=(a + b) / 2, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
            showarrow=False, font=dict(size=13), yshift=6,
        )
    return fig

"""A model × task grid written down: ``table.md``, ``table.json`` and ``report.html`` from the
grid's table (:func:`cel_lens.grids.build_table`) and its pairs' results, never from a model.

Every output is a function of its inputs alone (figures get fixed element ids, JSON keeps its key
order), so rebuilding the outputs of a grid directory gives the same bytes.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import plotly

from cel_lens.report.grid_figures import ROW_HEADER, plot_grid_side_effects, plot_grid_summary, row_cells
from cel_lens.report.heatmap import plot_gain_heatmap
from cel_lens.report.save import save_figure
from cel_lens.selection.calibration_text import CALIBRATION_SENTENCE
from cel_lens.selection.result import format_p, pp

__all__ = [
    "holm_sentence", "seal_sentence", "grid_markdown", "grid_html", "write_grid_outputs", "TABLE_MD", "TABLE_JSON",
    "REPORT_HTML", "SUMMARY",
]

TABLE_MD, TABLE_JSON, REPORT_HTML = "table.md", "table.json", "report.html"
"""The grid's output files."""
SUMMARY = "summary"
"""Stem of the one-picture summary (PNG, when a browser can render it)."""

_STYLE = """body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 18px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#e9eef5}td.err{color:#b00020}h2{margin-top:32px}.note{color:#555}"""


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(map(_md_escape, header)) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(_md_escape, r)) + " |" for r in rows]


def _row_texts(row: Mapping[str, Any]) -> list[str]:
    return [*row_cells(row), row.get("run_dir") or "n/a"]


def _cell_text(cell: Mapping[str, Any]) -> str:
    return f"{pp(cell['gain'])} [{pp(cell['ci_low'])}, {pp(cell['ci_high'])}], p {format_p(cell['p_value'])}"


def _side_effect_rows(block: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One model's matrix as a text table: a row per task with Ŝ, a column per task evaluated."""
    tasks = block["tasks"]
    cells = {(c["ablated_for"], c["evaluated_on"]): c for c in block["cells"]}
    heads = {c["ablated_for"]: c["heads"] for c in block["cells"]}
    sources = [t for t in tasks if t in heads]
    rows = [[f"Ŝ({s}) = {heads[s]}", *[_cell_text(cells[s, t]) if (s, t) in cells else "n/a" for t in tasks]] for s in sources]
    return ["ablated \\ evaluated on", *tasks], rows


def _timing_rows(timings: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    return [[k, f"{float(v['seconds']):.1f}", str(int(v['calls']))] for k, v in timings.items()]


def holm_sentence(holm: Mapping[str, Any]) -> str:
    """How the grid's p-values are adjusted: one-sided (ablation helps), over the declared family
    of every planned pair, failed and unfinished ones included, and the harmful pairs apart."""
    missing = holm["family"] - holm.get("finished", holm["family"])
    text = (f"Holm-adjusted one-sided p (ablation helps) across the grid's family of {holm['family']} planned pairs "
            f"({holm['rejected']} at ≤ {holm['alpha']:g})"
            + (f"; {missing} of them without a result, counted with p = 1." if missing else "."))
    if holm.get("harmful"):
        text += f" {holm['harmful']} pair(s) are significantly harmed by ablation (reported, not discoveries)."
    return text


def seal_sentence(holm: Mapping[str, Any]) -> str:
    """Whether each finished pair's Ŝ was fixed before D_test was read, from the runs' own flags."""
    finished, unsealed = holm.get("finished", 0), list(holm.get("unsealed") or [])
    unknown = list(holm.get("seal_not_recorded") or [])  # results written before the seal: never counted as fixed
    if not finished:
        return "No pair has finished."
    if not unsealed and not unknown:
        return f"In all {finished} finished pairs Ŝ was fixed on D_dist before D_test was read (each run's record)."
    text = f"Ŝ was fixed on D_dist before D_test was read in {finished - len(unsealed) - len(unknown)} of {finished} finished pairs"
    if unsealed:
        text += f"; NOT in {', '.join(unsealed)} (D_test was read before the selection)"
    if unknown:
        text += f"; not recorded in {', '.join(unknown)} (results written before the test-split seal)"
    return text + "."


def grid_markdown(table: Mapping[str, Any]) -> str:
    """``table.md``: the pairs, the Holm note, each model's side-effect matrix and the timings."""
    holm = table["holm"]
    lines = [
        "# CEL grid", "",
        f"Held-out (D_test) accuracy intact and with Ŝ ablated; Δ with its {1 - holm['alpha']:.0%} CI, "
        f"two-sided exact McNemar p. {holm_sentence(holm)} {seal_sentence(holm)} "
        f"Calibrated Δ: {CALIBRATION_SENTENCE}.", "",
        *_md_table([*ROW_HEADER, "run directory"], [_row_texts(r) for r in table["rows"]]), "",
        "## Side effects", "",
        "Test gain of each task's Ŝ on every task of the same model (the diagonal is the pair's own result).", "",
    ]
    for model in table["grid"]["models"]:
        block = table["side_effects"][model]
        header, rows = _side_effect_rows(block)
        lines += [f"### {model}", ""]
        lines += (_md_table(header, rows) if rows else ["no finished pair"]) + [""]
        lines += [f"- not measured on {t}: {_md_escape(e)}" for t, e in block["errors"].items()]
        lines += [""] if block["errors"] else []
    lines += ["## Time", "", *_md_table(["step", "seconds", "calls"], _timing_rows(table["timings"])), ""]
    return "\n".join(lines)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure_div(fig: Any, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def _pair_rows_html(table: Mapping[str, Any]) -> str:
    rows = []
    for r in table["rows"]:
        texts = [html.escape(c) for c in row_cells(r)]
        run = r.get("run_dir")
        link = f"<a href='{html.escape(run)}/'>{html.escape(run)}</a>" if run else "n/a"
        cls = [" class=err" if h == "Ŝ" and r.get("status") != "ok" else "" for h in ROW_HEADER]
        rows.append("<tr>" + "".join(f"<td{c}>{t}</td>" for c, t in zip(cls, texts)) + f"<td>{link}</td></tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in (*ROW_HEADER, "run directory"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def grid_html(table: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]) -> str:
    """``report.html``: the pairs, the side effects (figure and tables), the gain heatmap of every
    finished pair, and the timings. Loads ``plotly.min.js`` from its own directory (no network)."""
    holm = table["holm"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>CEL grid</title>",
        f"<style>{_STYLE}</style><script src='plotly.min.js'></script></head><body>",
        "<h1>CEL grid</h1>",
        f"<p class=note>Held-out accuracy intact and with Ŝ ablated; Δ with its {1 - holm['alpha']:.0%} CI, "
        f"two-sided exact McNemar p. {html.escape(holm_sentence(holm))} {html.escape(seal_sentence(holm))} "
        f"Calibrated Δ: {html.escape(CALIBRATION_SENTENCE)}.</p>",
        _pair_rows_html(table), "<h2>Side effects</h2>",
    ]
    try:
        parts.append(_figure_div(plot_grid_side_effects(table), "side-effects"))
    except ValueError as err:
        parts.append(f"<p class=note>{html.escape(str(err))}</p>")
    for model in table["grid"]["models"]:
        block = table["side_effects"][model]
        header, rows = _side_effect_rows(block)
        parts.append(f"<h3>{html.escape(model)}</h3>" + (_html_table(header, rows) if rows else "<p class=note>no finished pair</p>"))
        parts += [f"<p class=note>not measured on {html.escape(t)}: {html.escape(e)}</p>" for t, e in block["errors"].items()]
    parts.append("<h2>Gain heatmaps</h2>")
    for r in table["rows"]:
        name = r.get("run_dir")
        if r.get("status") == "ok" and name in results:
            parts.append(f"<h3>{html.escape(r['model'])} × {html.escape(r['task'])}</h3>")
            parts.append(_figure_div(plot_gain_heatmap(results[name]), f"heatmap-{name}"))
    parts += ["<h2>Time</h2>", _html_table(["step", "seconds", "calls"], _timing_rows(table["timings"])), "</body></html>"]
    return "\n".join(parts) + "\n"


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_grid_outputs(
    table: Mapping[str, Any],
    results: Mapping[str, Mapping[str, Any]],
    out_dir: Union[str, os.PathLike],
    *,
    png: bool = True,
) -> list[Path]:
    """Write ``table.md``, ``table.json``, ``report.html`` (with ``plotly.min.js`` next to it) and,
    when ``png`` and a browser can render it, ``summary.png`` (the table above the side-effect
    matrices); return the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _write_text(out / TABLE_MD, grid_markdown(table)),
        _write_text(out / TABLE_JSON, json.dumps(table, indent=2, ensure_ascii=False) + "\n"),
        _write_text(out / REPORT_HTML, grid_html(table, results)),
    ]
    js = out / "plotly.min.js"
    if not js.exists():
        shutil.copyfile(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", js)
    written.append(js)
    if png:
        written += save_figure(plot_grid_summary(table), out / SUMMARY, ("png",))
    return written

"""``cl.explore(run, model=None)``: click a head, see what it does, in Jupyter.

The layer x head heatmap of stage-1 scores (a plotly ``FigureWidget`` once shown) is the entry point; clicking
a cell, or picking a head set (S-hat, the pool's heads and subsets, the best heads of stage 1), shows
beside it the panel of :mod:`cel_lens.report.explorer_data` (stage-1 score, D_dist gain with a 95%
CI, the D_dist examples it fixes and breaks with a selector, D_test for S-hat only once the run
fixed it) and, with a model, the attention patterns intact vs ablated on the chosen D_dist example,
the downstream heads whose patterns move most, and the direct logit effects on the answer against
the best wrong answer (:mod:`~cel_lens.analysis.explorer_model`, cached per example; a progress
line and bar show while the model runs). Works on a finished run, an unfinished one (what is
recorded so far) and a grid directory (a selector picks the model x task cell).
:func:`explorer_panels` precomputes the model panels for ``explorer.html``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import ipywidgets as widgets
import plotly.graph_objects as go

from cel_lens.analysis.explorer_model import ActivationCache, model_block
from cel_lens.heads import HeadSet
from cel_lens.report.data import result_dict
from cel_lens.report.explorer_data import explorer_summary, head_set_panel, load_examples_task, panel_keys
from cel_lens.report.explorer_page import heatmap_figure
from cel_lens.report.explorer_render import attention_figure, examples_html, logit_figure, model_html, panel_html
from cel_lens.runs.reader import RunRecord, as_record

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["explore", "Explorer", "explorer_panels", "grid_cells", "ModelLike"]

ModelLike = Union["Model", Mapping[str, "Model"], None]
"""The explorer's model: the run's model, or for a grid a dict from manifest model id to model."""


def grid_cells(path: Union[str, os.PathLike]) -> dict[str, Path]:
    """The run directories of a grid directory (each ``<model>__<task>`` holding a manifest), by name;
    a run directory itself gives ``{}``."""
    root = Path(path)
    if (root / "manifest.json").is_file():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and (p / "manifest.json").is_file()}


def _example_for(panel: Mapping[str, Any]) -> int:
    """The D_dist example a model panel opens on: the first fixed one, else the first broken, else 0."""
    dist = panel.get("dist") or {}
    for kind in ("fixed", "broken"):
        if dist.get(kind):
            return int(dist[kind][0]["index"])
    return 0


def explorer_panels(
    model: "Model", run: Any, keys: Optional[list[str]] = None, *, n_examples: int = 2, data_dir: Optional[str] = None,
    n_top: int = 8, n_sets: int = 8,
) -> dict[str, list[dict[str, Any]]]:
    """Model blocks for ``explorer.html``: for each head set of ``keys`` (default: the page's,
    :func:`~cel_lens.report.explorer_data.panel_keys`), its model panel on up to ``n_examples``
    D_dist examples (those it fixes first, then those it breaks, then the first ones)."""
    if n_examples < 1:
        raise ValueError(f"n_examples must be >= 1, got {n_examples}")
    record = as_record(run)
    task, why = load_examples_task(record, data_dir)
    if task is None:
        raise ValueError(f"the run's task could not be loaded, so its examples cannot be run: {why}")
    r = result_dict(record, partial=True)
    cache = ActivationCache(model, task.dist, chat_template=bool(task.options.get("chat_template")))
    out = {}
    for key in keys if keys is not None else panel_keys(r, n_top=n_top, n_sets=n_sets):
        panel = head_set_panel(record, key, task=task, n_examples=n_examples, r=r)
        dist = panel.get("dist") or {}
        chosen = [e["index"] for e in (dist.get("fixed") or []) + (dist.get("broken") or [])]
        chosen = list(dict.fromkeys(chosen + list(range(len(task.dist)))))[:n_examples]
        out[key] = [model_block(cache, key, i) for i in chosen]
    return out


class Explorer:
    """The explorer widget (see the module docstring). ``select(heads)`` and ``click(layer, head)``
    drive it from Python as a click does; ``panel`` is the current panel dict, ``heatmap``,
    ``attention`` and ``logit`` its figures (figure widgets once shown) and ``cache`` the activation
    cache."""

    def __init__(self, source: Any, model: ModelLike = None, *, data_dir: Optional[str] = None,
                 n_examples: int = 8, max_tokens: int = 24) -> None:
        if n_examples < 1 or max_tokens < 2:
            raise ValueError(f"n_examples must be >= 1 and max_tokens >= 2, got {n_examples} and {max_tokens}")
        self.models, self.data_dir, self.n_examples, self.max_tokens = model, data_dir, n_examples, max_tokens
        self.model: Optional["Model"] = None
        path = source if isinstance(source, (str, os.PathLike)) else getattr(source, "path", None)
        self.cells = grid_cells(path) if path is not None and not isinstance(source, RunRecord) else {}
        self._figs: dict[str, dict[str, Any]] = {}
        self._live: dict[str, go.FigureWidget] = {}  # made when the widget is first shown (each holds plotly.js)
        self.summary, self.panel_view, self.example_view = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.model_view, self.status = widgets.HTML(), widgets.Label("")
        self.progress = widgets.IntProgress(min=0, max=3, layout=widgets.Layout(visibility="hidden", width="200px"))
        self.sets, self.examples = widgets.Dropdown(description="head set"), widgets.Dropdown(description="example")
        self.cell = widgets.Dropdown(description="cell", options=list(self.cells), layout=widgets.Layout(display="" if self.cells else "none"))
        self.panel: Optional[dict[str, Any]] = None
        self.cache: Optional[ActivationCache] = None
        self.sets.observe(lambda ch: ch["new"] and self.select(ch["new"]), names="value")
        self._quiet = False
        self.examples.observe(lambda ch: ch["new"] is not None and not self._quiet and self._show_example(ch["new"]), names="value")
        self.cell.observe(lambda ch: ch["new"] and self.open(self.cells[ch["new"]]), names="value")
        self.open(next(iter(self.cells.values())) if self.cells else source)

    def open(self, run: Any) -> None:
        """Show ``run`` (a run, record or run directory: a grid cell); reads its record again."""
        self.record = as_record(run)
        self.r = result_dict(self.record, partial=True)
        self.task, why = load_examples_task(self.record, self.data_dir)
        self.cache, self.panel = None, None  # another run: nothing shown so far holds
        model_id = str((self.record.manifest.get("model") or {}).get("id"))
        self.model = self.models.get(model_id) if isinstance(self.models, Mapping) else self.models
        s = explorer_summary(self.record, self.r)
        self.summary.value = (f"<b>{s['model']} × {s['task']}</b>: {s['progress']}; scorer {s['scorer']}; "
                              f"S-hat {s['selected']}" + (f"<br><i>example texts not loaded: {why}</i>" if why else ""))
        self._set("heatmap", heatmap_figure(self.r))
        self._figs.pop("attention", None), self._figs.pop("logit", None)
        keys = panel_keys(self.r, n_sets=len(self.r.get("subsets") or [])) if self.r.get("scores") is not None else []
        self.sets.options = keys
        if keys:
            self.select(keys[0])

    def click(self, layer: int, head: int) -> dict[str, Any]:
        """What clicking heatmap cell (``layer``, ``head``) does: select that head."""
        return self.select(f"L{layer}H{head}")

    def select(self, heads: Any) -> dict[str, Any]:
        """Show the panel of ``heads`` (a head or head set); returns the panel dict."""
        key = str(HeadSet.parse(heads))
        if self.panel is not None and self.panel["key"] == key:
            return self.panel
        self.panel = head_set_panel(self.record, key, task=self.task, n_examples=self.n_examples, r=self.r)
        if key in self.sets.options and self.sets.value != key:
            self.sets.value = key
        self.panel_view.value = panel_html(self.panel, browse=False)
        dist = self.panel.get("dist") or {}
        options = [(f"{k}: {e['id']}", (k, j)) for k in ("fixed", "broken") for j, e in enumerate(dist.get(k) or [])]
        self._quiet = True  # new options: show the first example once, below, not from the observer
        try:
            self.examples.options = options
            self.examples.value = options[0][1] if options else None
        finally:
            self._quiet = False
        if options:
            self._show_example(options[0][1])
        else:
            self.example_view.value = ""
            self._run_model(0)
        return self.panel

    def _show_example(self, choice: tuple[str, int]) -> None:
        kind, j = choice
        entry = (self.panel["dist"] or {})[kind][j]
        self.example_view.value = examples_html([entry], kind)
        self._run_model(int(entry["index"]))

    def _say(self, message: str) -> None:
        self.status.value = message
        self.progress.value = min(self.progress.max, self.progress.value + 1)

    def _run_model(self, index: int) -> None:
        """The model panel of the current head set on D_dist example ``index`` (cached activations)."""
        if self.model is None or self.task is None:
            self.model_view.value = "<i>no model given for this run: the panels show what the run recorded</i>"
            return
        if self.cache is None:
            chat = bool(self.task.options.get("chat_template"))
            self.cache = ActivationCache(self.model, self.task.dist, chat_template=chat)
        self.progress.value, self.progress.layout.visibility = 0, "visible"
        try:
            block = model_block(self.cache, self.panel["key"], index, max_tokens=self.max_tokens, progress=self._say)
        finally:
            self.progress.layout.visibility = "hidden"
            self.status.value = f"model runs so far: {self.cache.runs} (cached per example)"
        self.panel["model"] = block
        self.model_view.value = model_html(block)
        self._set("attention", attention_figure(block))
        self._set("logit", logit_figure(block))

    def _set(self, name: str, fig: dict[str, Any]) -> None:
        """Keep figure ``name``; redraw its widget when the explorer is on screen."""
        self._figs[name] = fig
        live = self._live.get(name)
        if live is None:
            return
        with live.batch_update():
            live.data = []
            live.add_traces(fig["data"])
            live.layout = fig["layout"]
        if name == "heatmap":
            for trace in live.data:
                trace.on_click(lambda _t, points, _s: points.point_inds and self.click(int(points.ys[0]), int(points.xs[0])))

    def _figure(self, name: str) -> go.Figure:
        return self._live.get(name) or go.Figure(self._figs.get(name) or {})

    @property
    def heatmap(self) -> go.Figure:
        """The layer x head heatmap (a ``FigureWidget`` once the explorer is shown, clicks wired)."""
        return self._figure("heatmap")

    @property
    def attention(self) -> go.Figure:
        """Attention intact | ablated of the current head set and its most changed downstream heads."""
        return self._figure("attention")

    @property
    def logit(self) -> go.Figure:
        """Direct logit effects of the current head set on the answer and the best wrong answer."""
        return self._figure("logit")

    @property
    def widget(self) -> widgets.Widget:
        """The whole explorer as one widget (its figure widgets are made here, once)."""
        if not self._live:
            self._live = {name: go.FigureWidget() for name in ("heatmap", "attention", "logit")}
            for name, fig in list(self._figs.items()):
                self._set(name, fig)
        right = widgets.VBox([widgets.HBox([self.sets, self.progress, self.status]), self.panel_view, self.examples,
                              self.example_view, self.model_view, self.logit, self.attention])
        return widgets.VBox([self.cell, self.summary, widgets.HBox([self.heatmap, right])])

    def snapshot(self) -> list[go.Figure]:
        """Show the explorer's current state as static output (the summary and panel as HTML, then
        the heatmap and the model figures as plain figures): what a notebook exported to HTML keeps,
        since a live widget needs its front end. Returns the figures shown."""
        from IPython.display import HTML, display

        display(HTML(self.summary.value + self.panel_view.value + self.example_view.value + self.model_view.value))
        shown = [go.Figure(self._figs[n]) for n in ("heatmap", "logit", "attention") if self._figs.get(n)]
        for fig in shown:
            fig.show()
        return shown

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def explore(run: Any, model: ModelLike = None, *, data_dir: Optional[str] = None, n_examples: int = 8) -> Explorer:
    """The run explorer of ``run`` (a ``Run``, a record, a run directory or a grid directory) in
    Jupyter; with ``model`` (the run's model; for a grid of several models, a dict from each
    manifest model id to its model) the attention and logit panels run it on D_dist."""
    return Explorer(run, model, data_dir=data_dir, n_examples=n_examples)

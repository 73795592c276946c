"""Notebook figures carry a static copy that an HTML export keeps (a PNG, or plotly's HTML when no
browser can render PNGs), next to the interactive plotly JSON."""

from __future__ import annotations

import base64

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from cel_lens.report import notebook
from cel_lens.report.save import png_export_available


@pytest.fixture
def restore_renderer():
    before = pio.renderers.default
    yield
    pio.renderers.default = before


def test_figures_show_json_and_a_png(restore_renderer):
    name = notebook.use_notebook_renderer()
    if name != notebook.RENDERER or not png_export_available():
        pytest.skip("no browser for PNG export here")
    bundle = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]))._repr_mimebundle_()
    assert "application/vnd.plotly.v1+json" in bundle
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_browser_the_export_keeps_plotly_html(restore_renderer, monkeypatch):
    def no_browser(*args, **kwargs):
        raise RuntimeError("no Chromium")

    monkeypatch.setattr(notebook, "static_image", no_browser)
    assert notebook.use_notebook_renderer() == notebook.FALLBACK
    bundle = go.Figure(go.Bar(y=[1, 2]))._repr_mimebundle_()
    assert "application/vnd.plotly.v1+json" in bundle and "plotly-graph-div" in bundle["text/html"]

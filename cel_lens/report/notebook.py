"""Figures in notebooks that survive export: each figure is shown interactive *and* as a PNG.

plotly's usual notebook output (``application/vnd.plotly.v1+json``) is drawn by JupyterLab, Notebook
7 and VS Code, but ``jupyter nbconvert --to html`` (and GitHub's notebook view) drop it: an exported
notebook has no figures. :func:`use_notebook_renderer` makes every ``fig.show()`` emit both the
plotly JSON (interactive where a front end draws it) and a static PNG rendered offline
(:func:`cel_lens.report.save.static_image`), which an exported page keeps. Without a browser for
PNG export it falls back to plotly's ``notebook_connected`` HTML (kept by the export, drawn from the
plotly CDN where there is a network).
"""

from __future__ import annotations

import base64
from typing import Any

from plotly.io.base_renderers import MimetypeRenderer

from cel_lens.report.save import static_image

__all__ = ["StaticPngRenderer", "use_notebook_renderer", "RENDERER", "FALLBACK"]

RENDERER = "plotly_mimetype+cel_lens_png"
"""Interactive plotly JSON plus a PNG copy."""
FALLBACK = "plotly_mimetype+notebook_connected"
"""Interactive plotly JSON plus HTML that loads plotly.js from the CDN (no browser for PNGs)."""


class StaticPngRenderer(MimetypeRenderer):
    """A plotly renderer that adds an ``image/png`` copy of the figure, rendered offline by kaleido
    with the machine's Chromium (one persistent browser, plotly.js from the installed package)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def to_mimebundle(self, fig_dict: Any) -> dict[str, str]:
        """``{"image/png": base64 PNG}`` of the figure."""
        return {"image/png": base64.b64encode(static_image(fig_dict, "png", self.scale)).decode("ascii")}


def use_notebook_renderer(scale: float = 1.0) -> str:
    """Make ``fig.show()`` emit the interactive figure and a PNG copy (:data:`RENDERER`), or
    :data:`FALLBACK` when no PNG can be rendered here; returns the renderer set."""
    import plotly.graph_objects as go
    import plotly.io as pio

    pio.renderers["cel_lens_png"] = StaticPngRenderer(scale)
    try:
        static_image(go.Figure(go.Bar(y=[1])), "png", 1.0)
    except Exception:  # noqa: BLE001 - no browser or no kaleido: the HTML fallback
        pio.renderers.default = FALLBACK
        return FALLBACK
    pio.renderers.default = RENDERER
    return RENDERER

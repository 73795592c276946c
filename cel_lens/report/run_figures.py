"""Every figure of one run, written to a folder (what ``cel-lens report`` and the demo call)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, Union

from cel_lens.report.data import ResultLike, result_dict
from cel_lens.report.heatmap import plot_gain_heatmap
from cel_lens.report.save import save_figure
from cel_lens.report.transfer import plot_discovery_vs_test

__all__ = ["write_run_figures"]


def write_run_figures(
    obj: ResultLike, out_dir: Union[str, os.PathLike], formats: Sequence[str] = ("html", "png")
) -> list[Path]:
    """Write every figure a run's result supports (gain heatmap, discovery vs test) to ``out_dir``;
    return the files written. The HTML files load the one shared local copy of plotly.js
    (:func:`~cel_lens.report.save.shared_plotlyjs`), else the CDN: they open without a network on
    this machine, and no 4.8 MB copy lands in every figure folder. An unfinished run gets the
    heatmap of what it recorded so far."""
    r = result_dict(obj, partial=True)
    out = Path(out_dir)
    written: list[Path] = []
    if r.get("scores") is not None or r.get("n_layers"):
        written += save_figure(plot_gain_heatmap(r), out / "gain_heatmap", formats, include_plotlyjs="shared")
    if any(s.get("test_gain_posthoc") is not None for s in r.get("subsets") or []):
        written += save_figure(
            plot_discovery_vs_test(r), out / "discovery_vs_test", formats, include_plotlyjs="shared"
        )
    return written

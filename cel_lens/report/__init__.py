"""Figures of a search from data alone: nothing here runs a model.

* :mod:`~cel_lens.report.heatmap`: :func:`plot_gain_heatmap`, stage-1 gains, the ranked subsets and
  S-hat's test gain against the random-subset null;
* :mod:`~cel_lens.report.transfer`: :func:`plot_discovery_vs_test`, whether discovery gain transfers;
* :mod:`~cel_lens.report.side_effects`: :func:`plot_side_effects`, each task's S-hat on every task;
* :mod:`~cel_lens.report.head_panel`: the layer x head panel of stage-1 scores both of the above share;
* :mod:`~cel_lens.report.compare`: :func:`plot_compare` and :func:`compare_runs`, two runs side by side;
* :mod:`~cel_lens.report.flips`: :class:`Flips` and :func:`plot_flips`, the examples an ablation fixes and breaks;
* :mod:`~cel_lens.report.attention`: :class:`AttentionPatterns` and its figures;
* :mod:`~cel_lens.report.circuits_view`: the same patterns laid out for CircuitsVis;
* :mod:`~cel_lens.report.run_figures`: :func:`write_run_figures`, every figure of a run;
* :mod:`~cel_lens.report.save`: :func:`save_figure`, HTML always and PNG when a browser can render it;
* :mod:`~cel_lens.report.data`: :func:`result_dict`, a result in any form as the dict figures read;
* :mod:`~cel_lens.report.explorer_page`: :func:`write_explorer_page`, ``explorer.html`` (click a head, see its
  panel), from the panels of :mod:`~cel_lens.report.explorer_data` drawn by :mod:`~cel_lens.report.explorer_render`.

Figures that need a model's forward passes (attention patterns, side-effect matrices, flips) are
computed by :mod:`cel_lens.analysis` and drawn here.
"""

from cel_lens.report.attention import AttentionPatterns, pattern_change, plot_attention_patterns, plot_pattern_change
from cel_lens.report.circuits_view import circuitsvis_patterns
from cel_lens.report.compare import compare_runs, format_comparison, plot_compare
from cel_lens.report.data import ResultLike, ranked_subsets, result_dict
from cel_lens.report.explorer_page import PAGE_BUDGET_BYTES, write_explorer_page
from cel_lens.report.flips import Flips, format_flips, plot_flips
from cel_lens.report.heatmap import plot_gain_heatmap
from cel_lens.report.run_figures import write_run_figures
from cel_lens.report.save import CHROMIUM_HINT, png_export_available, save_figure, write_static_image
from cel_lens.report.side_effects import plot_side_effects
from cel_lens.report.style import SELECTED_COLOUR
from cel_lens.report.transfer import plot_discovery_vs_test

__all__ = [
    "ResultLike",
    "result_dict",
    "ranked_subsets",
    "plot_gain_heatmap",
    "plot_discovery_vs_test",
    "plot_side_effects",
    "plot_compare",
    "compare_runs",
    "format_comparison",
    "Flips",
    "plot_flips",
    "format_flips",
    "AttentionPatterns",
    "pattern_change",
    "plot_pattern_change",
    "plot_attention_patterns",
    "circuitsvis_patterns",
    "write_run_figures",
    "write_explorer_page",
    "PAGE_BUDGET_BYTES",
    "save_figure",
    "write_static_image",
    "png_export_available",
    "CHROMIUM_HINT",
    "SELECTED_COLOUR",
]

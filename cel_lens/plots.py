"""Deprecated: figures moved to :mod:`cel_lens.report` (from data) and :mod:`cel_lens.analysis`
(what runs a model). This module re-exports the old names for one release."""

from __future__ import annotations

import warnings

from cel_lens.analysis import attention_patterns, plot_attention, side_effect_matrix
from cel_lens.report import (
    AttentionPatterns,
    ResultLike,
    pattern_change,
    plot_discovery_vs_test,
    plot_gain_heatmap,
    plot_pattern_change,
    plot_side_effects,
    ranked_subsets,
    result_dict,
    write_run_figures,
)
from cel_lens.report.style import DIVERGING, FONT, NULL_COLOUR, OTHER_COLOUR, POOL_COLOUR, SELECTED_COLOUR  # noqa: F401
from cel_lens.selection.result import format_result as _format_result
from cel_lens.selection.result import result_rows as _result_rows

warnings.warn(
    "cel_lens.plots is deprecated; use cel_lens.report (figures) and cel_lens.analysis (model runs)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "ResultLike",
    "result_dict",
    "result_rows",
    "format_result",
    "ranked_subsets",
    "plot_gain_heatmap",
    "plot_discovery_vs_test",
    "AttentionPatterns",
    "attention_patterns",
    "pattern_change",
    "plot_pattern_change",
    "plot_attention",
    "side_effect_matrix",
    "plot_side_effects",
    "write_run_figures",
]


def result_rows(obj: ResultLike) -> list[tuple[str, str]]:
    """Deprecated: :func:`cel_lens.selection.result_rows` of :func:`cel_lens.report.result_dict`
    (so a run or run directory is still accepted)."""
    return _result_rows(result_dict(obj))


def format_result(obj: ResultLike) -> str:
    """Deprecated: :func:`cel_lens.selection.format_result` of :func:`cel_lens.report.result_dict`
    (so a run or run directory is still accepted)."""
    return _format_result(result_dict(obj))

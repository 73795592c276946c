"""The old import paths ``cel_lens.plots`` and ``cel_lens.export`` still work for one release,
with a DeprecationWarning, and hand out the new objects."""

from __future__ import annotations

import importlib

import pytest


def test_plots_shim_warns_and_reexports_every_old_name(hand):
    import cel_lens.analysis as analysis
    import cel_lens.plots as plots
    import cel_lens.report as report

    with pytest.warns(DeprecationWarning, match="cel_lens.report"):
        importlib.reload(plots)
    assert set(plots.__all__) == {
        "ResultLike", "result_dict", "result_rows", "format_result", "ranked_subsets", "plot_gain_heatmap",
        "plot_discovery_vs_test", "AttentionPatterns", "attention_patterns", "pattern_change",
        "plot_pattern_change", "plot_attention", "side_effect_matrix", "plot_side_effects", "write_run_figures",
    }
    assert all(hasattr(plots, name) for name in plots.__all__)
    assert plots.plot_gain_heatmap is report.plot_gain_heatmap
    assert plots.plot_attention is analysis.plot_attention  # the old (model, example, ...) signature
    assert "+4.50 pp" in plots.format_result(hand.make())


def test_export_shim_warns_and_reexports_save():
    import cel_lens.export as export
    from cel_lens.report import save

    with pytest.warns(DeprecationWarning, match="cel_lens.report.save"):
        importlib.reload(export)
    assert export.save_figure is save.save_figure and export.write_static_image is save.write_static_image

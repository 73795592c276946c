"""The side-effect figure draws its matrix: rows without a selection left out, own task outlined."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cel_lens.report.side_effects import plot_side_effects


def test_side_effect_figure_is_the_matrix_without_empty_rows():
    nan = math.nan
    matrix = np.array([[0.25, -0.5, nan], [nan, nan, nan], [0.0, 0.125, -1.0]])
    fig = plot_side_effects(matrix, ["a", "b", "c"])
    heat = fig.data[0]
    assert list(heat.y) == ["Ŝ(a)", "Ŝ(c)"] and list(heat.x) == ["a", "b", "c"]
    assert heat.z[0][2] is None and heat.text[0][2] == "n/a"
    assert [list(row) for row in heat.text] == [["+25.0", "-50.0", "n/a"], ["+0.0", "+12.5", "-100.0"]]
    assert sorted((s.x0 + 0.5, s.y0 + 0.5) for s in fig.layout.shapes) == [(0, 0), (2, 1)]
    with pytest.raises(ValueError, match="does not match"):
        plot_side_effects(matrix, ["a", "b"])
    with pytest.raises(ValueError, match="no selection"):
        plot_side_effects(np.full((2, 2), nan), ["a", "b"])

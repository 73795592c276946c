"""The look shared by every figure: colours, font, tick spacing, and reading numbers that may be
missing. Text of results (percentage points, p-values) comes from :mod:`cel_lens.selection.result`,
so a figure's caption reads like ``cel-lens report``."""

from __future__ import annotations

from typing import Any

__all__ = [
    "DIVERGING",
    "SELECTED_COLOUR",
    "POOL_COLOUR",
    "OTHER_COLOUR",
    "NULL_COLOUR",
    "FONT",
    "as_float",
    "tick_step",
]

#: A diverging scale whose blue means "ablation helps", red "ablation hurts".
DIVERGING = "RdBu"
#: Gold: visible on both ends of RdBu and on white; marks the selected subset everywhere.
SELECTED_COLOUR = "#e6a700"
POOL_COLOUR = "#222222"
OTHER_COLOUR = "#8c8c8c"
NULL_COLOUR = "rgba(120, 120, 120, 0.18)"
FONT = dict(family="DejaVu Sans, Arial, sans-serif", size=13)


def as_float(value: Any) -> float:
    """``value`` as a float, NaN for ``None`` (a missing entry of a result dict)."""
    return float("nan") if value is None else float(value)


def tick_step(n: int) -> int:
    """Tick spacing of a layer or head axis: every index up to 24, every second beyond."""
    return 1 if n <= 24 else 2

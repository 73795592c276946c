"""The look shared by every figure: colours, font, tick spacing, and reading numbers that may be
missing. Text of results (percentage points, p-values) comes from :mod:`cel_lens.selection.result`,
so a figure's caption reads like ``cel-lens report``."""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

__all__ = [
    "DIVERGING",
    "SELECTED_COLOUR",
    "POOL_COLOUR",
    "OTHER_COLOUR",
    "NULL_COLOUR",
    "FONT",
    "as_float",
    "tick_step",
    "nice_step",
    "symmetric_ticks",
    "percent_tickformat",
    "padded_range",
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


def nice_step(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 (times a power of ten) that is at least ``x`` (> 0)."""
    exponent = math.floor(math.log10(x))
    for mantissa in (1.0, 2.0, 2.5, 5.0, 10.0):
        if mantissa * 10**exponent >= x * (1 - 1e-9):
            return mantissa * 10**exponent
    return 10.0 ** (exponent + 1)  # pragma: no cover - the loop always returns


def _decimals(step: float) -> int:
    """Decimals that tell multiples of ``step`` apart (``0.25`` -> 2, ``0.2`` -> 1, ``5`` -> 0)."""
    for d in range(0, 8):
        if abs(round(step, d) - step) <= 1e-9 * max(1.0, abs(step)):
            return d
    return 8


def symmetric_ticks(max_abs: float, scale: float = 1.0, per_side: int = 2) -> tuple[list[float], list[str]]:
    """Ticks of a zero-centred colour scale over ``[-max_abs, max_abs]``: ``(values, labels)``,
    about ``per_side`` ticks each side of zero at a 1-2-2.5-5 step, labelled in units of
    ``1 / scale`` (``scale=100``: percentage points) with as many decimals as the step needs, so
    no two labels read alike however small the values are."""
    if not max_abs > 0 or math.isinf(max_abs):
        return [0.0], ["0"]
    step = nice_step(max_abs * scale / per_side) / scale
    n = int(math.floor(max_abs / step + 1e-9))
    decimals = _decimals(step * scale)
    values = [i * step for i in range(-n, n + 1)]
    labels = ["0" if i == 0 else f"{v * scale:+.{decimals}f}".replace("-", "\u2212") for i, v in zip(range(-n, n + 1), values)]
    return values, labels


def percent_tickformat(span: float, signed: bool = False, n_ticks: int = 5) -> str:
    """A d3 percentage format with enough decimals that ``n_ticks`` ticks over ``span`` (a
    fraction) read differently: ``.0%`` for a span of 0.3, ``.2%`` for 0.0005."""
    step_pct = max(span, 1e-12) * 100 / n_ticks
    decimals = min(4, max(0, math.ceil(-math.log10(step_pct)))) if step_pct < 1 else 0
    return f"{'+' if signed else ''}.{decimals}%"


def padded_range(
    values: Iterable[float], frac: float, floor: float = 0.002, bounds: Optional[tuple[float, float]] = None
) -> list[float]:
    """``[low, high]`` of the non-NaN ``values`` widened by ``frac`` of their spread (at least
    ``floor``), clipped to ``bounds`` (e.g. ``(0, 1)`` for an accuracy, which cannot be negative)."""
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))] or [0.0]
    pad = max(frac * (max(kept) - min(kept)), floor)
    low, high = min(kept) - pad, max(kept) + pad
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return [low, high]

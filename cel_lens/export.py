"""Saving plotly figures: interactive HTML always, static PNG when an exporter works.

PNG export goes through kaleido, which needs a Chrome/Chromium it can launch. Where that is
missing (or fails), :func:`save_figure` still writes the HTML and warns once per process, so a
figure-producing command never fails just because a static renderer is absent.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence, Union

__all__ = ["save_figure", "png_export_available"]

_STATIC_FORMATS = {"png", "svg", "pdf", "jpg", "jpeg", "webp"}
_static_failure: Union[str, None] = None  # first static-export error seen in this process
_warned = False


def png_export_available() -> bool:
    """Whether static (PNG) export has not failed in this process so far."""
    return _static_failure is None


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        _warned = True


def save_figure(
    fig: Any,
    path_stem: Union[str, Path],
    formats: Sequence[str] = ("html", "png"),
    *,
    include_plotlyjs: Union[bool, str] = "cdn",
    scale: float = 2.0,
) -> list[Path]:
    """Write ``fig`` to ``path_stem.<fmt>`` for each format; return the paths actually written.

    HTML is always written when asked for (``include_plotlyjs="cdn"`` keeps files small; pass
    ``True`` for a self-contained file that opens without a network). Static formats are written
    when the exporter works; otherwise they are skipped with a single warning per process.
    """
    stem = Path(path_stem)
    if stem.suffix.lower().lstrip(".") in {"html", *_STATIC_FORMATS}:
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    global _static_failure
    written: list[Path] = []
    for fmt in formats:
        fmt = fmt.lower().lstrip(".")
        path = stem.with_name(f"{stem.name}.{fmt}")
        if fmt == "html":
            fig.write_html(str(path), include_plotlyjs=include_plotlyjs)
            written.append(path)
        elif fmt in _STATIC_FORMATS:
            if _static_failure is not None:
                _warn_once(f"static figure export unavailable ({_static_failure}); wrote HTML only")
                continue
            try:
                fig.write_image(str(path), format=fmt, scale=scale)
            except Exception as err:  # kaleido raises various errors when Chrome is missing
                _static_failure = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                _warn_once(f"static figure export unavailable ({_static_failure}); wrote HTML only")
                continue
            written.append(path)
        else:
            raise ValueError(f"unknown figure format {fmt!r}; use html or one of {sorted(_STATIC_FORMATS)}")
    return written


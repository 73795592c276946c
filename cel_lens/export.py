"""Deprecated: figure saving moved to :mod:`cel_lens.report.save`. This module re-exports the old
names for one release."""

from __future__ import annotations

import warnings

from cel_lens.report.save import CHROMIUM_HINT, png_export_available, save_figure, write_static_image

warnings.warn(
    "cel_lens.export is deprecated; use cel_lens.report.save (save_figure, write_static_image)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["save_figure", "png_export_available", "write_static_image", "CHROMIUM_HINT"]

"""Algorithm 1 (two-stage CEL search) over an evaluation oracle; knows nothing of models.

Calling the module itself, ``cel_lens.search(model, task, ...)``, runs the whole pipeline
(:func:`cel_lens.pipeline.search`).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """Lets ``cel_lens.search(model, task, ...)`` work although ``cel_lens.search`` is a module."""

    def __call__(self, model: Any, task: Any, **kwargs: Any) -> Any:
        from cel_lens.pipeline import search as _search

        return _search(model, task, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""A backend that records what the grid hands it (the model, the task, the settings) and runs the
evaluations locally, loading a model given by name itself, as Ray's actors do."""

from __future__ import annotations

from typing import Any

from cel_lens.backends.local import LocalBackend

CALLS: list[tuple[Any, str, Any]] = []
"""``(model, task name, settings)`` of every oracle opened."""


class RecordingBackend:
    """Records every :meth:`open`, then opens a local oracle."""

    name = "recording"

    def open(self, model: Any, task: Any, settings: Any, *, store_dtype: Any = None) -> Any:
        CALLS.append((model, task.name, settings))
        return LocalBackend().open(model, task, settings, store_dtype=store_dtype)

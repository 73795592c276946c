"""A backend that records what the grid hands it (the model, the task, the settings) and runs the
evaluations locally, loading a model given by name itself, as Ray's actors do."""

from __future__ import annotations

import threading
from typing import Any, Optional

from cel_lens.backends.local import LocalBackend

CALLS: list[tuple[Any, str, Any]] = []
"""``(model, task name, settings)`` of every oracle opened."""


class Gate:
    """The first ``n`` oracles opened wait for each other (``timeout`` seconds, then the opening
    fails): they open only if ``n`` searches run at the same time."""

    def __init__(self, n: int, timeout: float = 60.0) -> None:
        self.barrier = threading.Barrier(n)
        self.remaining = n
        self.timeout = timeout
        self.lock = threading.Lock()

    def pass_through(self) -> None:
        with self.lock:
            gated = self.remaining > 0
            self.remaining -= gated
        if gated:
            self.barrier.wait(timeout=self.timeout)


GATE: Optional[Gate] = None


class RecordingBackend:
    """Records every :meth:`open`, then opens a local oracle."""

    name = "recording"
    in_process = False  # it is given the model's name and loads it, as a worker of its own would
    shared_cluster = LocalBackend.shared_cluster

    def open(self, model: Any, task: Any, settings: Any, *, store_dtype: Any = None, context: Any = None) -> Any:
        CALLS.append((model, task.name, settings))
        if GATE is not None:
            GATE.pass_through()
        return LocalBackend().open(model, task, settings, store_dtype=store_dtype, context=context)

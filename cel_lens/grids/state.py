"""``grid.json``: what a grid directory was asked (its plan), each pair's last error, and where the
time went. Rewritten atomically after every step, so a killed grid keeps everything up to its
last finished step (the run directories keep the rest, evaluation by evaluation)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from cel_lens.grids.grid_plan import GridPlan

__all__ = ["GRID_FILE", "GridState", "WALL"]

GRID_FILE = "grid.json"
"""The grid's own file inside its directory."""
WALL = "grid wall time"
"""The timing key of the grid's total wall time (every invocation, up to its last saved step)."""
_COMPARED = ("config", "n_dist", "n_test", "task_overrides")


def _identity(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What must not change under a grid directory: the search config, the split sizes and the
    per-task options (the data directory may move; each run directory checks its splits' content
    hashes)."""
    opts = plan.get("task_options", {})
    return {"config": plan.get("config"), "n_dist": opts.get("n_dist"), "n_test": opts.get("n_test"),
            "task_overrides": plan.get("task_overrides", {})}


class GridState:
    """The contents of ``grid.json``: ``plan`` (:meth:`GridPlan.record`), ``errors`` (key -> the
    last error of a pair or a side-effect evaluation; cleared when it succeeds) and ``timings``
    (key -> ``{"seconds", "calls"}``, summed over invocations)."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self._lock = threading.RLock()  # pairs searched at once record from several threads
        self._started = time.perf_counter()
        self._wall_before = float(data.get("timings", {}).get(WALL, {}).get("seconds", 0.0))

    @classmethod
    def open(cls, plan: GridPlan) -> "GridState":
        """Create ``grid.json`` for ``plan``, or reuse it when its config and split sizes match
        (``ValueError`` naming the differences otherwise). The models and tasks are the new plan's."""
        path = plan.out / GRID_FILE
        new = plan.record()
        data: dict[str, Any] = {"plan": new, "errors": {}, "timings": {}}
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            before, after = _identity(old.get("plan", {})), _identity(new)
            diffs = [k for k in _COMPARED if before[k] != after[k]]
            if diffs:
                detail = "; ".join(f"{k}: {before[k]!r} != {after[k]!r}" for k in diffs)
                raise ValueError(
                    f"grid directory {plan.out} was made with other options ({detail}); use another --out"
                )
            data.update(errors=old.get("errors", {}), timings=old.get("timings", {}))
        state = cls(path, data)
        state.save()
        return state

    @classmethod
    def read(cls, out: Union[str, os.PathLike]) -> "GridState":
        """``grid.json`` of an existing grid directory (read-only use)."""
        path = Path(out) / GRID_FILE
        if not path.exists():
            raise FileNotFoundError(f"{out} holds no {GRID_FILE} (not a grid directory)")
        return cls(path, json.loads(path.read_text(encoding="utf-8")))

    @property
    def plan(self) -> dict[str, Any]:
        """The plan as recorded."""
        return self.data["plan"]

    @property
    def errors(self) -> dict[str, str]:
        """Key -> last error."""
        return self.data.setdefault("errors", {})

    @property
    def timings(self) -> dict[str, dict[str, float]]:
        """Key -> ``{"seconds", "calls"}``."""
        return self.data.setdefault("timings", {})

    def error(self, key: str) -> Optional[str]:
        """The last error recorded under ``key``, or ``None``."""
        return self.errors.get(key)

    def fail(self, key: str, message: str) -> None:
        """Record ``message`` as the error of ``key`` (and save)."""
        with self._lock:
            self.errors[key] = message
            self.save()

    def succeed(self, key: str) -> None:
        """Forget an earlier error of ``key`` (and save)."""
        with self._lock:
            if self.errors.pop(key, None) is not None:
                self.save()

    def add_time(self, key: str, seconds: float) -> None:
        """Add ``seconds`` (one call) to ``key`` (and save)."""
        with self._lock:
            entry = self.timings.setdefault(key, {"seconds": 0.0, "calls": 0})
            entry["seconds"] = float(entry["seconds"]) + float(seconds)
            entry["calls"] = int(entry["calls"]) + 1
            self.save()

    def save(self) -> None:
        """Write ``grid.json`` atomically, with the grid's wall time so far."""
        with self._lock:
            wall = self._wall_before + (time.perf_counter() - self._started)
            self.timings[WALL] = {"seconds": wall, "calls": int(self.timings.get(WALL, {}).get("calls", 0))}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.data, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def finish(self) -> None:
        """Count this invocation in the wall time's calls (and save)."""
        self.save()
        self.timings[WALL]["calls"] = int(self.timings[WALL]["calls"]) + 1
        self.save()

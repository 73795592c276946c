"""Reading a run directory back, finished or not."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from cel_lens.runs.directory import RunDir
from cel_lens.runs.records import Evaluation
from cel_lens.selection.result import Result

__all__ = ["RunRecord", "load_run"]


@dataclass
class RunRecord:
    """A run directory as read back: its manifest, every recorded evaluation and event, and the
    :class:`~cel_lens.selection.Result` (``None`` while unfinished)."""

    path: Path
    manifest: dict[str, Any]
    evaluations: list[Evaluation]
    events: list[dict[str, Any]]
    result: Optional[Result]

    @property
    def selection(self) -> Optional[dict[str, Any]]:
        """The ``selected`` event, or ``None``."""
        sel = [e for e in self.events if e.get("event") == "selected"]
        return sel[0] if sel else None

    def __repr__(self) -> str:
        state = f"result {self.result.heads}" if self.result is not None else "unfinished"
        return f"RunRecord('{self.path}', {len(self.evaluations)} evaluations, {state})"


def load_run(path: Union[str, os.PathLike]) -> RunRecord:
    """Read a run directory (read-only): ``.manifest``, ``.evaluations``, ``.events``, ``.result``."""
    run = RunDir(path)
    manifest = run.manifest
    lines = run.lines()
    evaluations = [Evaluation.from_line(o) for o in lines if o.get("type") == "eval"]
    events = [o for o in lines if o.get("type") == "event"]
    raw = run.read_result()
    result = Result.from_dict(raw) if raw is not None else None
    return RunRecord(run.path, manifest, evaluations, events, result)

"""Reading a run directory back, finished or not.

:func:`load_run` reads without the lock and without write access, so a run can be read while its
search is running (a line being written is left for the next read) or after it was killed; its
:attr:`RunRecord.state` says which, and :meth:`RunRecord.partial` what it knows so far
(:mod:`cel_lens.runs.unfinished`). A path to a file of the run (``RUN/result.json``) names its run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from cel_lens.runs.run_dir import EVALUATIONS, MANIFEST, RESULT, RunDir
from cel_lens.runs.journal_io import RunRecordError
from cel_lens.runs.lock import held_by
from cel_lens.runs.unfinished import partial_result
from cel_lens.runs.evaluation_record import Evaluation
from cel_lens.selection.result import Result

__all__ = ["RunRecord", "load_run", "run_path", "as_record"]


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

    def example_ids(self, split: str) -> Optional[list[str]]:
        """The ids of the examples the run evaluated on ``split`` (``"dist"`` or ``"test"``), in
        the order of every recorded evaluation's bits, from the manifest's ``examples`` entry;
        ``None`` for a run recorded before it existed (its content hashes still identify the split)."""
        if split not in ("dist", "test"):
            raise ValueError(f"split must be 'dist' or 'test', got {split!r}")
        ids = ((self.manifest.get("examples") or {}).get(split) or {}).get("ids")
        return None if ids is None else list(ids)

    @property
    def finished(self) -> bool:
        """Whether the search finished (a result and a ``finished`` event)."""
        return self.result is not None and any(e.get("event") == "finished" for e in self.events)

    @property
    def state(self) -> str:
        """``"finished"``, ``"running"`` (a process holds the run directory now) or ``"stopped"``
        (unfinished, and nobody writes it: killed or interrupted; the same search resumes it)."""
        if self.finished:
            return "finished"
        return "running" if held_by(self.path) is not None else "stopped"

    def partial(self) -> dict[str, Any]:
        """What the record says so far, as a result-like dict (:func:`~cel_lens.runs.unfinished.partial_result`);
        of a finished run, its result."""
        if self.result is not None:
            return self.result.to_dict()
        return partial_result(self.manifest, self.evaluations, self.events)

    def __repr__(self) -> str:
        if self.result is not None:
            return f"RunRecord('{self.path}', {len(self.evaluations)} evaluations, result {self.result.heads})"
        status = self.partial()["progress"]["status"]
        return f"RunRecord('{self.path}', {len(self.evaluations)} evaluations, {self.state}: {status})"


def run_path(path: Union[str, os.PathLike]) -> Path:
    """The run directory ``path`` names: itself, or the directory of one of its files
    (``RUN/result.json``, ``RUN/manifest.json``, ``RUN/evaluations.jsonl``)."""
    p = Path(path)
    return p.parent if p.name in (RESULT, MANIFEST, EVALUATIONS) and p.is_file() else p


def load_run(path: Union[str, os.PathLike]) -> RunRecord:
    """Read a run directory (read-only, without its lock, finished or not): ``.manifest``,
    ``.evaluations``, ``.events``, ``.result`` (``None`` while unfinished), ``.state``.
    ``path`` may also be a file of the run (``RUN/result.json``)."""
    run = RunDir(run_path(path))
    manifest = run.manifest
    lines = run.lines()
    evaluations = [Evaluation.from_line(o) for o in lines if o.get("type") == "eval"]
    events = [o for o in lines if o.get("type") == "event"]
    raw = run.read_result()
    try:
        result = Result.from_dict(raw) if raw is not None else None
    except (KeyError, TypeError, ValueError) as err:
        raise RunRecordError(f"{run.result_path} is corrupt: {type(err).__name__}: {err}") from None
    return RunRecord(run.path, manifest, evaluations, events, result)


def as_record(run: Any) -> RunRecord:
    """A run's :class:`RunRecord` from a record, a run directory (or a file in it), or an object
    with a ``path`` (a ``Run``); ``TypeError`` for anything else."""
    if isinstance(run, RunRecord):
        return run
    if isinstance(run, (str, os.PathLike)):
        return load_run(run)
    path = getattr(run, "path", None)
    if path is None:
        raise TypeError(f"expected a run, a run record or a run directory, got {type(run).__name__}")
    return load_run(path)

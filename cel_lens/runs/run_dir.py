"""Run directories: what a search was asked to do, everything it evaluated, and what it found.

A run directory holds

* ``manifest.json`` — the configuration, given by the caller (package versions, model id and
  weights hash, task, split content hashes, seeds, every option). Reopening a directory with a
  different configuration is an error that names the differing fields.
* ``evaluations.jsonl`` — append-only, one JSON object a line: an ``"eval"`` line per evaluated head
  set (split, heads, stage tag, accuracy, and the per-example correctness as a base64 bitset), and
  ``"event"`` lines (``search_started``, ``stage1_scores``, ``pool``, ``selected``, ``finished``). Lines are flushed
  and fsync'd as soon as a batch is computed, so a killed process loses at most the line being
  written; a truncated last line is ignored on read and cut off before the next append. The
  ``selected`` event is written before any test-split evaluation, so the file itself shows that
  the subset was fixed before D_test was read.
* ``result.json`` — the final :class:`cel_lens.selection.Result`, written atomically.
* ``.lock`` — held by the one process writing the directory (:mod:`cel_lens.runs.lock`): a second
  search into it is refused, naming the holder (or waits, with ``wait``).

Every line carries a checksum and a changed line is refused (:mod:`cel_lens.runs.journal_io`); a write
that fails (disk full) names its file and leaves it as it was. Reading needs no write access: a
finished run (``result.json`` and a ``finished`` event) is never written again, so a rerun of a
finished run in a read-only directory answers from the record and writes nothing.

:class:`~cel_lens.runs.RecordingOracle` answers from the recorded evaluations and evaluates (and records) only what
is missing, so running the same search again resumes where it stopped and reaches the same result.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.runs.journal_io import append_bytes, encode_lines, read_json_object, read_lines, write_json_atomic
from cel_lens.runs.lock import LOCK, DirectoryLock, acquire_lock
from cel_lens.runs.manifest import upgrade_manifest
from cel_lens.runs.evaluation_record import Evaluation

__all__ = [
    "RunDir", "RunConfigError", "RunReadOnlyError", "manifest_diff", "describe_manifest_diff", "MANIFEST", "EVALUATIONS",
    "RESULT",
]

MANIFEST = "manifest.json"
EVALUATIONS = "evaluations.jsonl"
RESULT = "result.json"


class RunConfigError(ValueError):
    """A run directory was reopened with a configuration that differs from its manifest."""


class RunReadOnlyError(PermissionError):
    """A run directory that cannot be written was asked to record something."""


def _normalize(obj: Any) -> Any:
    """JSON round trip: tuples become lists, keys strings, odd objects their ``str``."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def manifest_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ between two manifests, each with both values."""
    diffs: list[str] = []
    for key in sorted(set(old) | set(new)):
        name = f"{prefix}{key}"
        if key not in old:
            diffs.append(f"{name} (absent != {new[key]!r})")
        elif key not in new:
            diffs.append(f"{name} ({old[key]!r} != absent)")
        elif isinstance(old[key], Mapping) and isinstance(new[key], Mapping):
            diffs.extend(manifest_diff(old[key], new[key], prefix=f"{name}."))
        elif old[key] != new[key]:
            diffs.append(f"{name} ({old[key]!r} != {new[key]!r})")
    return diffs


_ABSENT = object()


def _diff_items(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted name, old value, new value)`` of every differing leaf (:data:`_ABSENT` when missing)."""
    items: list[tuple[str, Any, Any]] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            items.extend(_diff_items(a, b, f"{prefix}{key}."))
        elif a != b:
            items.append((f"{prefix}{key}", a, b))
    return items


def _is_digest(name: str, value: Any) -> bool:
    return "sha256" in name or "hash" in name or (isinstance(value, str) and len(value) >= 32 and value.isalnum())


def _shown(value: Any) -> str:
    return "absent" if value is _ABSENT else repr(value)


def describe_manifest_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two manifests, for a person: options first (``options.k: 3 -> 2``),
    then the task, splits and model; a split whose content hash differs is "the dist split holds
    other examples", and other digests are named without their 64 hex digits."""
    order = {"options": 0, "task": 1, "splits": 2, "model": 3}
    items = sorted(_diff_items(old, new), key=lambda t: (order.get(t[0].split(".")[0], len(order)), t[0]))
    lines, other_splits = [], []
    for name, a, b in items:
        parts = name.split(".")
        if parts[0] == "splits" and parts[-1] == "content_sha256":
            other_splits.append(parts[1])
        elif _is_digest(name, a) or _is_digest(name, b):
            lines.append(f"{name} differs")
        else:
            lines.append(f"{name}: {_shown(a)} -> {_shown(b)}")
    if other_splits:
        lines.append(f"the {' and '.join(other_splits)} split{'s hold' if len(other_splits) > 1 else ' holds'} other examples")
    return lines


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _leftovers(path: Path) -> Optional[list[Path]]:
    """What a directory without a manifest holds, if that is only an unfinished creation (the lock
    file, a manifest's temporary file); ``None`` if it holds anything else."""
    entries = list(path.iterdir()) if path.is_dir() else []
    creation = [p for p in entries if p.name == LOCK or (p.name.startswith(f".{MANIFEST}.") and p.name.endswith(".tmp"))]
    return creation if len(creation) == len(entries) else None


def _make_dir(path: Path) -> None:
    """Create ``path`` (and its parents) unless it exists; one clear error if it cannot be."""
    if path.exists() and not path.is_dir():
        raise RunConfigError(f"run directory {path} exists and is not a directory")
    if (path / MANIFEST).exists():
        return
    if _leftovers(path) is None:
        raise RunConfigError(f"{path} exists, is not empty and has no {MANIFEST} (not a run directory)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunReadOnlyError(f"cannot create run directory {path}: {err.strerror or err}") from None


class RunDir:
    """A run directory (see the module docstring). ``RunDir(path)`` binds a path for reading;
    :meth:`open` creates or reuses one for writing and holds its lock until :meth:`close`."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self.path = Path(path)
        self.writable = True
        self._lock: Optional[DirectoryLock] = None
        self._closed_run = False  # finished when opened: nothing more to write
        self._finalizer: Optional[weakref.finalize] = None

    def __repr__(self) -> str:
        return f"RunDir('{self.path}')"

    # -- paths
    @property
    def manifest_path(self) -> Path:
        """``manifest.json``."""
        return self.path / MANIFEST

    @property
    def evaluations_path(self) -> Path:
        """``evaluations.jsonl``."""
        return self.path / EVALUATIONS

    @property
    def result_path(self) -> Path:
        """``result.json``."""
        return self.path / RESULT

    # -- creation / reuse
    @classmethod
    def open(
        cls,
        path: Union[str, os.PathLike],
        manifest: Mapping[str, Any],
        *,
        ignore: Iterable[str] = (),
        wait: float = 0.0,
    ) -> "RunDir":
        """Create ``path`` with ``manifest``, or reuse it if its manifest matches; lock it.

        Fields named in ``ignore`` (top-level keys, e.g. a creation time) are not compared.
        Raises :class:`RunConfigError` naming every differing field otherwise, and
        :class:`~cel_lens.runs.RunBusyError` naming the process that holds the directory (after
        waiting up to ``wait`` seconds for it). A directory that cannot be written opens read-only
        (it must hold a matching manifest). A truncated last line left by a killed writer is cut
        off so that new lines start clean.
        """
        run = cls(path)
        new = _normalize(dict(manifest))
        _make_dir(run.path)
        lock = acquire_lock(run.path, wait=wait)
        run._lock, run.writable = lock, lock is not None
        if lock is not None:
            run._finalizer = weakref.finalize(run, lock.release)
        try:
            run._check_or_write_manifest(new, set(ignore))
            run._closed_run = run.finished
            if not run.writable and not run._closed_run:
                raise RunReadOnlyError(
                    f"run directory {run.path} is not writable and its run has not finished "
                    "(give it write access to resume it, or use another output directory)"
                )
            if run.writable and not run._closed_run:
                run._repair_tail()
        except BaseException:
            run.close()
            raise
        return run

    def _check_or_write_manifest(self, new: dict[str, Any], skip: set[str]) -> None:
        if self.manifest_path.exists():
            old = self.manifest
            diffs = manifest_diff(
                {k: v for k, v in old.items() if k not in skip}, {k: v for k, v in new.items() if k not in skip}
            )
            if diffs:
                kept = {k: v for k, v in old.items() if k not in skip}
                raise RunConfigError(
                    f"run directory {self.path} was made with a different configuration: "
                    + "; ".join(describe_manifest_diff(kept, {k: v for k, v in new.items() if k not in skip}))
                    + " (use another output directory, or delete this one to start over)"
                )
            return
        if not self.writable:
            raise RunReadOnlyError(f"cannot create run directory {self.path}: it is not writable")
        leftovers = _leftovers(self.path)
        if leftovers is None:  # someone filled the directory between the check and the lock
            raise RunConfigError(f"{self.path} exists, is not empty and has no {MANIFEST} (not a run directory)")
        for p in leftovers:
            if p.name != LOCK:
                p.unlink(missing_ok=True)  # a creator killed mid-write
        write_json_atomic(self.manifest_path, new)

    def close(self) -> None:
        """Release the directory's lock (reading stays possible; a later write takes it again)."""
        if self._finalizer is not None:
            self._finalizer()
        self._lock = None

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reopen(self) -> bool:
        """Open a run that had finished when opened for writing again (where this ``RunDir`` holds
        the lock): a resume that finds a part of the result missing (a kill between the ``finished``
        event and the parts recorded after it) records it. Returns whether records are written."""
        if self._closed_run and self.writable and self._lock is not None:
            self._closed_run = False
            self._repair_tail()
        return not self._closed_run

    def _repair_tail(self) -> None:
        """Cut a partial last line (no trailing newline) so appends start on a fresh line."""
        p = self.evaluations_path
        if not p.exists() or p.stat().st_size == 0:
            return
        with open(p, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())

    # -- reading
    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as written (former key names read as current ones, :func:`upgrade_manifest`)."""
        if not self.manifest_path.exists():
            raise FileNotFoundError(f"{self.path} is not a run directory (no {MANIFEST})")
        return upgrade_manifest(read_json_object(self.manifest_path))

    @property
    def finished(self) -> bool:
        """Whether the run has finished (``result.json`` written and a ``finished`` event recorded)."""
        return self.result_path.exists() and bool(self.events("finished"))

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line of ``evaluations.jsonl``, in order, each checked against its checksum."""
        return read_lines(self.evaluations_path)

    def evaluations(self) -> list[Evaluation]:
        """Recorded evaluations, in order."""
        return [Evaluation.from_line(o) for o in self.lines() if o.get("type") == "eval"]

    def events(self, event: Optional[str] = None) -> list[dict[str, Any]]:
        """Recorded events (all, or only those named ``event``), in order."""
        return [
            o for o in self.lines() if o.get("type") == "event" and (event is None or o.get("event") == event)
        ]

    def selection(self) -> Optional[dict[str, Any]]:
        """The first ``selected`` event (the subset fixed before the test split), or ``None``."""
        sel = self.events("selected")
        return sel[0] if sel else None

    def read_result(self) -> Optional[dict[str, Any]]:
        """``result.json`` as a dict, or ``None`` if the run has not finished."""
        if not self.result_path.exists():
            return None
        return read_json_object(self.result_path)

    # -- writing
    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Hold the lock for one write (taken for the write alone if this RunDir does not hold it)."""
        if not self.writable:
            raise RunReadOnlyError(
                f"run directory {self.path} is not writable: cannot record {what} "
                "(give it write access, or use another output directory)"
            )
        if self._lock is not None:
            yield
            return
        lock = acquire_lock(self.path)
        if lock is None:
            self.writable = False
            raise RunReadOnlyError(f"run directory {self.path} is not writable: cannot record {what}")
        try:
            yield
        finally:
            lock.release()

    def _append(self, objs: Sequence[Mapping[str, Any]], what: str) -> None:
        if not objs:
            return
        with self._writing(what):
            append_bytes(self.evaluations_path, encode_lines(objs))

    def append_evaluations(
        self,
        split: str,
        head_sets: Sequence[HeadSet],
        correct: Bool[Tensor, "variant example"],
        stage: str,
        choice_scores: Optional[Float[Tensor, "variant example choice"]] = None,
    ) -> list[Evaluation]:
        """Record one line per head set (``correct[v]`` belongs to ``head_sets[v]``), fsync'd, with
        its per-choice scores ``choice_scores[v]`` when given (so a resumed run can calibrate
        the answer prior without a forward pass)."""
        if correct.ndim != 2 or correct.shape[0] != len(head_sets):
            raise ValueError(
                f"expected correctness [{len(head_sets)}, example], got shape {tuple(correct.shape)}"
            )
        if choice_scores is not None and tuple(choice_scores.shape[:2]) != tuple(correct.shape):
            raise ValueError(f"choice scores of shape {tuple(choice_scores.shape)} do not match correctness {tuple(correct.shape)}")
        evs = [
            Evaluation(split, HeadSet.parse(s), stage, correct[i].bool(), None if choice_scores is None else choice_scores[i])
            for i, s in enumerate(head_sets)
        ]
        self._append([e.to_line() for e in evs], f"{len(evs)} new evaluation(s) of the {split} split")
        return evs

    def record_event(self, event: str, **data: Any) -> dict[str, Any]:
        """Append an event line (with a UTC timestamp), fsync'd. A run that was finished when opened
        records no more events (a rerun has nothing to add), so reading it needs no write access."""
        obj = {"type": "event", "event": event, "time": _now(), **_normalize(data)}
        if not self._closed_run:
            self._append([obj], f"the {event!r} event")
        return obj

    def write_result(self, result: Mapping[str, Any]) -> None:
        """Write ``result.json`` atomically (not again for a run that was finished when opened)."""
        if self._closed_run:
            return
        with self._writing("result.json"):
            write_json_atomic(self.result_path, _normalize(dict(result)))

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

:class:`~cel_lens.runs.RecordingOracle` answers from the recorded evaluations and evaluates (and records) only what
is missing, so running the same search again resumes where it stopped and reaches the same result.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.runs.records import Evaluation

__all__ = ["RunDir", "RunConfigError", "manifest_diff", "MANIFEST", "EVALUATIONS", "RESULT"]

MANIFEST = "manifest.json"
EVALUATIONS = "evaluations.jsonl"
RESULT = "result.json"


class RunConfigError(ValueError):
    """A run directory was reopened with a configuration that differs from its manifest."""


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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL file, ignoring a truncated last line (one without its newline)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    # what follows the last newline is empty, or a partial line from a killed writer: dropped
    complete = data.split(b"\n")[:-1]
    out = []
    for i, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {i} is not valid JSON ({exc.msg})") from None
    return out


class RunDir:
    """A run directory (see the module docstring). ``RunDir(path)`` binds a path for reading;
    :meth:`open` creates or reuses one for writing."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self.path = Path(path)

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
    ) -> "RunDir":
        """Create ``path`` with ``manifest``, or reuse it if its manifest matches.

        Fields named in ``ignore`` (top-level keys, e.g. a creation time) are not compared.
        Raises :class:`RunConfigError` naming every differing field otherwise. A truncated last
        line left by a killed writer is cut off so that new lines start clean.
        """
        run = cls(path)
        new = _normalize(dict(manifest))
        if run.manifest_path.exists():
            old = run.manifest
            skip = set(ignore)
            diffs = manifest_diff(
                {k: v for k, v in old.items() if k not in skip},
                {k: v for k, v in new.items() if k not in skip},
            )
            if diffs:
                raise RunConfigError(
                    f"run directory {run.path} was made with a different configuration: "
                    + "; ".join(diffs)
                    + " (use another output directory, or delete this one to start over)"
                )
        else:
            if run.path.exists() and any(run.path.iterdir()):
                raise RunConfigError(f"{run.path} exists, is not empty and has no {MANIFEST}")
            run.path.mkdir(parents=True, exist_ok=True)
            _atomic_write_json(run.manifest_path, new)
        run._repair_tail()
        return run

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
        """The manifest as written."""
        if not self.manifest_path.exists():
            raise FileNotFoundError(f"{self.path} is not a run directory (no {MANIFEST})")
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line of ``evaluations.jsonl``, in order."""
        return _read_lines(self.evaluations_path)

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
        return json.loads(self.result_path.read_text(encoding="utf-8"))

    # -- writing
    def _append(self, objs: Sequence[Mapping[str, Any]]) -> None:
        if not objs:
            return
        text = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs)
        with open(self.evaluations_path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def append_evaluations(
        self,
        split: str,
        head_sets: Sequence[HeadSet],
        correct: Bool[Tensor, "variant example"],
        stage: str,
    ) -> list[Evaluation]:
        """Record one line per head set (``correct[v]`` belongs to ``head_sets[v]``), fsync'd."""
        if correct.ndim != 2 or correct.shape[0] != len(head_sets):
            raise ValueError(
                f"expected correctness [{len(head_sets)}, example], got shape {tuple(correct.shape)}"
            )
        evs = [Evaluation(split, HeadSet.parse(s), stage, correct[i].bool()) for i, s in enumerate(head_sets)]
        self._append([e.to_line() for e in evs])
        return evs

    def record_event(self, event: str, **data: Any) -> dict[str, Any]:
        """Append an event line (with a UTC timestamp), fsync'd."""
        obj = {"type": "event", "event": event, "time": _now(), **_normalize(data)}
        self._append([obj])
        return obj

    def write_result(self, result: Mapping[str, Any]) -> None:
        """Write ``result.json`` atomically."""
        _atomic_write_json(self.result_path, _normalize(dict(result)))

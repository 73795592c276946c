"""The bytes of a run directory: checksummed JSON lines, atomic JSON files, and write errors that
name their file.

Every line of ``evaluations.jsonl`` carries ``"check"``: the first 16 hex digits of the sha256 of
the line's other fields in canonical JSON (sorted keys, no spaces). A line whose content no longer
matches is refused with its file and line number, so an edited record cannot silently change a
result. Lines written before checksums existed are read as they are, but once a line has one,
every later line must too.

A write that fails (disk full, quota, file size limit) leaves the file as it was: an append is cut
back to the old length, an atomic write removes its temporary file. Either raises
:class:`RunWriteError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = [
    "CHECK",
    "RunRecordError",
    "RunWriteError",
    "line_checksum",
    "encode_lines",
    "read_lines",
    "append_bytes",
    "write_json_atomic",
    "tmp_name",
    "read_json_object",
]

CHECK = "check"
"""The checksum field of a recorded line."""


class RunRecordError(ValueError):
    """A line of a run directory's record is malformed or was changed after it was written."""


class RunWriteError(OSError):
    """A run directory file could not be written; the file is left as it was. ``errno`` and
    ``filename`` are the failed write's."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


def line_checksum(obj: Mapping[str, Any]) -> str:
    """First 16 hex digits of the sha256 of ``obj`` without its checksum, in canonical JSON."""
    body = {k: v for k, v in obj.items() if k != CHECK}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def encode_lines(objs: Sequence[Mapping[str, Any]]) -> bytes:
    """One JSON line per object, each with its checksum."""
    out = []
    for o in objs:
        body = {k: v for k, v in o.items() if k != CHECK}
        out.append(json.dumps({**body, CHECK: line_checksum(body)}, separators=(",", ":"), ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON Lines record, checking every checksum; the checksums are not returned.

    A truncated last line (no newline: a writer killed mid-line) is ignored. A line that is not
    JSON, whose checksum does not match, or that lacks one after a line that has one raises
    :class:`RunRecordError` naming the file and line.
    """
    if not path.exists():
        return []
    complete = path.read_bytes().split(b"\n")[:-1]  # what follows the last newline is dropped
    out: list[dict[str, Any]] = []
    checked = False
    for i, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunRecordError(f"{path}: line {i} is not valid JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(obj, dict):
            raise RunRecordError(f"{path}: line {i} is not a JSON object")
        if CHECK in obj:
            if obj[CHECK] != line_checksum(obj):
                raise RunRecordError(
                    f"{path}: line {i} does not match its checksum (it was changed after it was written); "
                    "restore it, or start a new run directory"
                )
            checked = True
            obj = {k: v for k, v in obj.items() if k != CHECK}
        elif checked:
            raise RunRecordError(f"{path}: line {i} has no checksum, unlike the lines before it")
        out.append(obj)
    return out


def _write_error(path: Path, err: OSError) -> RunWriteError:
    reason = err.strerror or str(err) or type(err).__name__
    exc = RunWriteError(f"could not write {path}: {reason} (the file was left as it was)")
    exc.errno = err.errno
    exc.filename = str(path)
    return exc


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and fsync; on failure cut the file back and raise
    :class:`RunWriteError`."""
    if not data:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise _write_error(path, err) from err
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as err:
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            except OSError:
                pass
            raise _write_error(path, err) from err
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    """The temporary file an atomic write of ``path`` uses (one per process and thread, so two
    threads writing at once never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (temporary file, fsync, rename); on
    failure remove the temporary file and raise :class:`RunWriteError`."""
    text = json.dumps(obj, indent=2, sort_keys=False) + "\n"
    tmp = tmp_name(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise _write_error(path, err) from err


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; :class:`RunRecordError` naming the file
    when it is not valid JSON or not an object (a corrupt ``result.json`` says which file)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunRecordError(f"{path} is corrupt: not valid JSON ({err})") from None
    if not isinstance(obj, dict):
        raise RunRecordError(f"{path} is corrupt: expected a JSON object, got {type(obj).__name__}")
    return obj

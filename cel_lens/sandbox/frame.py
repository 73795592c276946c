"""The verdict channel's framing: length-prefixed records of length-prefixed fields (standard library only).

The supervisor (:mod:`cel_lens.sandbox.child`) tells the caller what happened in *records*: a
4-byte big-endian length, then that many bytes holding the record's fields, each a 2-byte
big-endian length and that many bytes of ASCII. The caller (:mod:`cel_lens.sandbox.process`) reads
the pipe whole and cuts it only at those lengths: no byte the program chooses can start a record
or a field (the earlier line protocol split on ``str.splitlines()``, which also breaks at
``\\r``, ``\\x0b``, ``\\x1c``, ``\\x85``, ``\\u2028``... and a class name could carry them).

The first field of a record (and, for ``verdict``/``test``, the status) is one of the
supervisor's fixed tokens. Text that came from the program (an exception's name, an exit code)
travels only through :func:`escape`: printable ASCII, every other character as a backslash
escape, at most :data:`MAX_TEXT` characters, so it is one field and nothing else; the caller never
parses it.
"""

from __future__ import annotations

import os

MAX_TEXT = 200
"""Characters of program-controlled text kept in one field (the rest is cut, ``...`` marks it)."""
MAX_RECORD = 1 << 14
"""Bytes of one record; the caller stops reading at a longer one."""

_CONTROL = {i: "\\x%02x" % i for i in (*range(0x20), 0x7F)}



def escape(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as printable ASCII (``\\n`` -> ``\\x0a``, ``\\u2028`` -> ``\\u2028``), at most
    ``limit`` characters (plus ``...`` when cut). Never raises; a non-``str`` is named by its type."""
    if type(text) is not str:
        try:
            text = str.__str__(text) if isinstance(text, str) else f"<a {type(text).__name__}>"
        except BaseException:  # noqa: BLE001 - a hostile object: say nothing of it
            text = "<unprintable>"
    cut = len(text) > limit  # type: ignore[arg-type]
    out = text[:limit].translate(_CONTROL).encode("ascii", "backslashreplace").decode("ascii")  # type: ignore[index]
    return out + ("..." if cut else "")


def pack(*fields: str) -> bytes:
    """One record of ``fields`` (each made ASCII with :func:`escape` if it is not already)."""
    parts = []
    for field in fields:
        data = field.encode("ascii") if field.isascii() and field.isprintable() else escape(field, MAX_RECORD).encode("ascii")
        data = data[: 0xFFFF]
        parts.append(len(data).to_bytes(2, "big") + data)
    payload = b"".join(parts)[:MAX_RECORD]
    return len(payload).to_bytes(4, "big") + payload


def unpack(data: bytes) -> list[list[str]]:
    """Every whole record in ``data``, as lists of fields; stops at a cut or malformed record."""
    records: list[list[str]] = []
    pos = 0
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        end = pos + 4 + size
        if size > MAX_RECORD or end > len(data):
            break
        fields, i = [], pos + 4
        while i < end:
            n = int.from_bytes(data[i:i + 2], "big")
            if i + 2 + n > end:
                return records
            fields.append(data[i + 2:i + 2 + n].decode("ascii", "backslashreplace"))
            i += 2 + n
        if fields:  # an empty record says nothing
            records.append(fields)
        pos = end
    return records


def write(fd: int, *fields: str) -> None:
    """Write one record to ``fd`` (a pipe may take it in parts)."""
    data = pack(*fields)
    while data:
        data = data[os.write(fd, data):]

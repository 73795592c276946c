"""Checks a GGUF file's header before any library reads it: one line naming the file and what is wrong.

The ``gguf`` package trusts the header: absurd counts, a string longer than the file, an unknown
version or a body cut short end in raw errors (``KeyError 'Duplicate  already in list'``, numpy
memmap errors) or in allocations sized by the file's word. :func:`check_gguf_header` walks the
header itself (magic, version 2 or 3, the key-value pairs, the tensor descriptions) with every
length checked against the bytes that remain, then checks that each tensor's data lies inside the
file, and raises :class:`MalformedGGUF` (a ``ValueError``) naming the file and the first problem.
It reads the header only (for SmolLM2-135M-Instruct: the ~2 MB before 98 MB of weights).
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any, Union

__all__ = ["MalformedGGUF", "check_gguf_header", "SUPPORTED_VERSIONS"]

SUPPORTED_VERSIONS = (2, 3)
"""GGUF versions whose layout this module (and the ``gguf`` package) reads."""
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 8
_DEFAULT_ALIGNMENT = 32


class MalformedGGUF(ValueError):
    """A GGUF file whose header is malformed (the message names the file and the problem)."""


class _Header:
    """A bounded reader over the file's bytes (a memory map): every read is checked against the size."""

    def __init__(self, data: Any, size: int, path: str) -> None:
        self.data, self.size, self.path, self.order, self.pos = data, size, path, "<", 0

    def fail(self, what: str) -> MalformedGGUF:
        return MalformedGGUF(f"{self.path}: malformed GGUF file: {what}")

    def skip(self, n: int, what: str) -> int:
        """Step over ``n`` bytes; return where they start."""
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"{what} needs {n} bytes at offset {self.pos}, but the file ends at {self.size} (truncated?)")
        self.pos += n
        return self.pos - n

    def take(self, n: int, what: str) -> bytes:
        start = self.skip(n, what)
        return bytes(self.data[start:start + n])

    def number(self, code: str, what: str) -> Any:
        return struct.unpack_from(self.order + code, self.data, self.skip(struct.calcsize(code), what))[0]

    def string(self, what: str) -> bytes:
        return self.take(self.number("Q", f"the length of {what}"), what)

    def remaining(self) -> int:
        return self.size - self.pos


def check_gguf_header(path: Union[str, os.PathLike]) -> dict[str, int]:
    """Walk ``path``'s header (see the module docstring); raise :class:`MalformedGGUF` at the first
    problem; return ``{"version", "tensors", "keys", "data_start"}`` when it is sound."""
    name = os.fspath(path)
    size = os.path.getsize(name)
    if size < 24:
        with open(name, "rb") as f:
            _Header(f.read(), size, name).skip(24, "the header (magic, version, counts)")
    with open(name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        h = _Header(data, size, name)
        if h.take(4, "the magic") != b"GGUF":
            raise h.fail("it does not start with the GGUF magic bytes")
        raw = h.take(4, "the version")
        version = struct.unpack("<I", raw)[0]
        if version not in SUPPORTED_VERSIONS and struct.unpack(">I", raw)[0] in SUPPORTED_VERSIONS:
            h.order, version = ">", struct.unpack(">I", raw)[0]  # a big-endian file
        if version not in SUPPORTED_VERSIONS:
            raise h.fail(f"version {version} (this reader knows versions {', '.join(map(str, SUPPORTED_VERSIONS))})")
        n_tensors, n_keys = h.number("Q", "the tensor count"), h.number("Q", "the key count")
        # a key takes at least 12 bytes (length, type), a tensor description at least 24
        if n_keys * 12 > h.remaining() or n_tensors * 24 > h.remaining():
            raise h.fail(f"it claims {n_keys} keys and {n_tensors} tensors, more than its {size} bytes can hold")
        alignment = _keys(h, n_keys)
        tensors = [_tensor(h, i) for i in range(n_tensors)]
        data_start = -(-h.pos // alignment) * alignment
    _check_data(h, tensors, data_start, alignment)
    return {"version": version, "tensors": n_tensors, "keys": n_keys, "data_start": data_start}


def _keys(h: _Header, n_keys: int) -> int:
    """Read every key-value pair (no duplicate key); return ``general.alignment`` (default 32)."""
    seen: set[bytes] = set()
    alignment = _DEFAULT_ALIGNMENT
    for i in range(n_keys):
        key = h.string(f"the name of key {i}")
        if key in seen:
            raise h.fail(f"key {key.decode('utf-8', 'replace')!r} appears twice")
        seen.add(key)
        label = f"key {key.decode('utf-8', 'replace')!r}"
        kind = h.number("I", f"the type of {label}")
        if key == b"general.alignment":
            if kind != 4:
                raise h.fail(f"{label} has type {kind}, not uint32")
            alignment = h.number("I", label)
            if alignment == 0 or alignment & (alignment - 1):
                raise h.fail(f"{label} is {alignment}, not a power of two")
            continue
        _value(h, kind, label, 0)
    return alignment


def _value(h: _Header, kind: int, label: str, depth: int) -> None:
    """Skip one value of type ``kind``, every length checked against what remains."""
    if kind in _FIXED:
        h.skip(struct.calcsize(_FIXED[kind]), label)
    elif kind == _STRING:
        h.skip(h.number("Q", f"the length of {label}"), label)
    elif kind == _ARRAY:
        if depth >= _MAX_NESTING:
            raise h.fail(f"{label} nests arrays more than {_MAX_NESTING} deep")
        item, count = h.number("I", f"the item type of {label}"), h.number("Q", f"the length of {label}")
        if item in _FIXED:
            h.skip(count * struct.calcsize(_FIXED[item]), f"{label} ({count} items)")
            return
        if count * 8 > h.remaining():  # a string or an array item takes at least 8 bytes
            raise h.fail(f"{label} claims {count} items, more than the {h.remaining()} bytes left can hold")
        if item == _STRING:  # the vocabulary: ~10^5 strings, stepped over without a call each
            length, pos, size, data = struct.Struct(h.order + "Q").unpack_from, h.pos, h.size, h.data
            for _ in range(count):
                pos += 8 + (length(data, pos)[0] if pos + 8 <= size else size)
                if pos > size:
                    raise h.fail(f"a string of {label} runs past the end of the file at {size} (truncated?)")
            h.pos = pos
            return
        for _ in range(count):
            _value(h, item, label, depth + 1)
    else:
        raise h.fail(f"{label} has unknown value type {kind}")


def _tensor(h: _Header, i: int) -> tuple[str, list[int], int, int]:
    """One tensor description: name, dimensions, storage type, offset in the data section."""
    name = h.string(f"the name of tensor {i}").decode("utf-8", "replace")
    n_dims = h.number("I", f"the dimension count of tensor {name!r}")
    if not 1 <= n_dims <= _MAX_DIMS:
        raise h.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {_MAX_DIMS} allowed)")
    dims = [h.number("Q", f"a dimension of tensor {name!r}") for _ in range(n_dims)]
    return name, dims, h.number("I", f"the type of tensor {name!r}"), h.number("Q", f"the offset of tensor {name!r}")


def _check_data(h: _Header, tensors: list, data_start: int, alignment: int) -> None:
    """Every tensor's data (sized by its type's block size) lies inside the file, aligned, once."""
    try:
        import gguf

        sizes = {int(t): s for t, s in gguf.GGML_QUANT_SIZES.items()}
    except ImportError:  # pragma: no cover - check_gguf_file refuses a missing gguf package
        sizes = {}
    names: set[str] = set()
    for name, dims, kind, offset in tensors:
        if name in names:
            raise h.fail(f"tensor {name!r} appears twice")
        names.add(name)
        if kind not in sizes:
            raise h.fail(f"tensor {name!r} has unknown storage type {kind}")
        block, per_block = sizes[kind]
        elements = 1
        for d in dims:
            elements *= d
        if elements % block:
            raise h.fail(f"tensor {name!r} has {elements} elements, not a multiple of its type's block of {block}")
        end = data_start + offset + elements // block * per_block
        if offset % alignment:
            raise h.fail(f"tensor {name!r} starts at offset {offset}, not a multiple of the alignment {alignment}")
        if end > h.size:
            raise h.fail(f"tensor {name!r} needs bytes up to {end}, but the file ends at {h.size} (truncated?)")

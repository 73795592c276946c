"""Streaming safetensors files: the header alone, a copy that edits tensors in place as it goes
(peak memory one chunk plus the largest edited tensor), and file hashes read in chunks."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

__all__ = ["CHUNK_BYTES", "read_header", "stream_file", "file_sha256"]

CHUNK_BYTES = 1 << 20
"""Bytes copied per read when streaming a file."""


def read_header(path: Union[str, Path]) -> tuple[int, dict[str, Any]]:
    """``(offset of the data section, header)`` of a safetensors file, reading only its header."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} is not a safetensors file (shorter than 8 bytes)")
        (size,) = struct.unpack("<Q", raw)
        if size > 100 << 20:
            raise ValueError(f"{path} is not a safetensors file (header of {size} bytes)")
        header = json.loads(f.read(size))
    return 8 + size, header


def _copy_bytes(fi, fo, n: Optional[int], buf: bytearray, hashes: Sequence[Any]) -> int:
    """Copy ``n`` bytes (``None``: to the end) from ``fi`` to ``fo`` through ``buf``, updating ``hashes``."""
    view = memoryview(buf)
    done = 0
    while n is None or done < n:
        want = len(buf) if n is None else min(len(buf), n - done)
        got = fi.readinto(view[:want])
        if not got:
            if n is not None:
                raise ValueError(f"{fi.name} ended {n - done} bytes early")
            break
        for h in hashes:
            h.update(view[:got])
        fo.write(view[:got])
        done += got
    return done


def stream_file(src: Path, dst: Path, edits: Sequence[Any] = (), chunk: int = CHUNK_BYTES) -> tuple[str, str]:
    """Copy ``src`` to ``dst`` applying ``edits`` (:class:`~cel_lens.model.checkpoint_edit.TensorEdit`'s:
    ``start``, ``nbytes``, ``rows``, ``row_bytes``, ``spans`` zeroed, ``data`` written first); returns the sha256 of the source and of the copy."""
    src_hash, dst_hash = hashlib.sha256(), hashlib.sha256()
    buf = bytearray(max(1, min(chunk, src.stat().st_size)))
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        pos = 0
        for edit in sorted(edits, key=lambda e: e.start):
            pos += _copy_bytes(fi, fo, edit.start - pos, buf, (src_hash, dst_hash))
            tensor = bytearray(edit.nbytes)
            if fi.readinto(tensor) != edit.nbytes:
                raise ValueError(f"{src} ends inside {edit.name}")
            src_hash.update(tensor)
            if edit.data is not None:
                tensor[:] = edit.data
            rows = np.frombuffer(tensor, dtype=np.uint8).reshape(edit.rows, edit.row_bytes)
            for a, b in edit.spans:
                rows[:, a:b] = 0
            dst_hash.update(tensor)
            fo.write(tensor)
            pos += edit.nbytes
            del rows, tensor
        _copy_bytes(fi, fo, None, buf, (src_hash, dst_hash))
    return src_hash.hexdigest(), dst_hash.hexdigest()


def file_sha256(path: Union[str, Path], chunk: int = CHUNK_BYTES) -> str:
    """SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()

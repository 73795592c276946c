"""Malformed GGUF headers: every one ends in one line naming the file and what is wrong
(:class:`~cel_lens.model.gguf.MalformedGGUF`), before the ``gguf`` package reads it; a fuzz of
hand-made headers, every truncation of a valid file, and seeded byte mutations of its header."""

from __future__ import annotations

import random
import struct

import pytest

from cel_lens.model.gguf import MalformedGGUF, check_gguf_file, gguf_metadata
from cel_lens.model.gguf_header import check_gguf_header
from tests.model.test_gguf import _small_gguf


def _header(version=3, n_tensors=0, n_keys=0, body=b""):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_keys) + body


def _key(name: bytes, kind: int, value: bytes) -> bytes:
    return struct.pack("<Q", len(name)) + name + struct.pack("<I", kind) + value


HEADERS = {
    "absurd counts": (_header(n_tensors=1 << 62, n_keys=(1 << 63) - 1), "claims"),
    "absurd key count": (_header(n_keys=1 << 40, body=b"\0" * 64), "claims"),
    "2^60-byte key": (_header(n_keys=1, body=struct.pack("<Q", 1 << 60) + b"name"), "truncated"),
    "2^60-byte string value": (_header(n_keys=1, body=_key(b"general.name", 8, struct.pack("<Q", 1 << 60) + b"x")), "truncated"),
    "version 99": (_header(version=99), "version 99"),
    "version 1": (_header(version=1), "version 1"),
    "array of 2^61 strings": (_header(n_keys=1, body=_key(b"tokens", 9, struct.pack("<IQ", 8, 1 << 61) + b"\0" * 32)), "claims"),
    "array of 2^61 uint64": (_header(n_keys=1, body=_key(b"ids", 9, struct.pack("<IQ", 10, 1 << 61))), "truncated"),
    "unknown value type": (_header(n_keys=1, body=_key(b"k", 77, b"\0" * 16)), "unknown value type 77"),
    "duplicate key": (_header(n_keys=2, body=_key(b"", 4, b"\0" * 4) * 2), "appears twice"),
    "alignment 0": (_header(n_keys=1, body=_key(b"general.alignment", 4, struct.pack("<I", 0))), "power of two"),
    "99 dimensions": (_header(n_tensors=1, body=struct.pack("<Q", 1) + b"t" + struct.pack("<I", 99) + b"\0" * 64), "99 dimensions"),
    "tensor past the end": (_header(n_tensors=1, body=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 1 << 40, 0, 0)), "file ends"),
    "unknown tensor type": (_header(n_tensors=1, body=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 4, 999, 0)), "storage type 999"),
    "only the magic": (b"GGUF", "truncated"),
}


def _one_line_naming(exc: BaseException, path) -> None:
    text = str(exc)
    assert "\n" not in text and str(path) in text, text


@pytest.mark.parametrize("case", sorted(HEADERS))
def test_malformed_header_is_one_line_naming_the_file(tmp_path, case):
    data, what = HEADERS[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    for read in (check_gguf_file, gguf_metadata):  # the CLI's fail-fast check, and what conversion reads
        with pytest.raises(MalformedGGUF, match=what) as info:
            read(path)
        _one_line_naming(info.value, path)


def test_every_truncation_of_a_valid_file(tmp_path):
    good = _small_gguf(tmp_path / "good.gguf").read_bytes()
    assert check_gguf_header(tmp_path / "good.gguf")["tensors"] == 2
    path = tmp_path / "cut.gguf"
    for n in range(len(good)):
        path.write_bytes(good[:n])
        with pytest.raises(ValueError) as info:
            check_gguf_file(path)
        _one_line_naming(info.value, path)


def test_seeded_mutations_of_the_header(tmp_path):
    """Random bytes in the header: the file is accepted and read, or refused in one line naming it
    (never a raw error of the gguf package)."""
    good = _small_gguf(tmp_path / "good.gguf").read_bytes()
    header_end = check_gguf_header(tmp_path / "good.gguf")["data_start"]
    rng = random.Random(0)
    path = tmp_path / "mutated.gguf"
    refused = 0
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(4, header_end)] = rng.choice((0, 0xFF, 0x7F, rng.randrange(256)))
        path.write_bytes(bytes(data))
        try:
            gguf_metadata(check_gguf_file(path))
        except ValueError as exc:
            _one_line_naming(exc, path)
            refused += 1
    assert 0 < refused < 300

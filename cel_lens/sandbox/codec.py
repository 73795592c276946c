"""Plain values across the pipe from the program's process to the supervisor (standard library only).

The program's process evaluates the program-dependent parts of a test (its *holes*, see
:mod:`cel_lens.sandbox.judge`) and sends each value with :func:`encode`; the supervisor rebuilds it
with :func:`decode` and finishes the test itself. Only plain data crosses: ``None``, ``bool``,
``int``, ``float``, ``complex``, ``str``, ``bytes``, ``bytearray``, ``range`` and ``list``,
``tuple``, ``dict``, ``set``, ``frozenset`` of them, plus an iterator as the list of what it
yields (``map``, ``filter``, a generator: the supervisor gets ``iter(list)``). :func:`decode`
returns objects of exactly these built-in types, so nothing the program defined (a custom
``__eq__``, ``__hash__``, ``__bool__``, ``__class__``) reaches the comparison. Subclasses of
the built-in types (``collections.Counter``, a ``namedtuple``, an ``IntEnum``) are sent as their
base type, read through the base type's own methods.

The wire format is a small prefix code (one tag byte per value; numbers in hexadecimal, exact for
floats; strings and bytes length-prefixed; containers count-prefixed), parsed by hand: no
``pickle`` or ``marshal`` (both rebuild objects, code included, from untrusted bytes), and no
``json`` (importing it costs the sandbox more than a run's whole judging).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the sandbox process starts faster
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 100
"""Containers nested deeper than this are refused (both ways)."""
MAX_ITEMS = 1_000_000
"""An iterator that yields more than this is refused."""

_SEQUENCES = {b"l": list, b"t": tuple, b"S": set, b"Z": frozenset, b"I": list}
_HEX = frozenset(b"-0123456789abcdef")


class NotPlainData(ValueError):
    """The value is not plain data (see the module docstring); the message names its type."""


class Malformed(ValueError):
    """What arrived is not a value :func:`encode` writes."""


def encode(value: Any) -> bytes:
    """``value`` in the wire format; raises :class:`NotPlainData` for anything else."""
    out: list[bytes] = []
    _encode(value, 0, out)
    return b"".join(out)


def _sized(tag: bytes, data: bytes, out: list[bytes]) -> None:
    out.append(b"%s%d:%s" % (tag, len(data), data))


def _encode(v: Any, depth: int, out: list[bytes]) -> None:  # noqa: C901 - one branch per type
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
    t = type(v)
    if v is None or t is bool:
        out.append(b"N" if v is None else b"T" if v else b"F")
    elif issubclass(t, int):
        out.append(b"i%s;" % int.__format__(v, "x").encode())  # hex: no limit on the digits
    elif issubclass(t, float):
        out.append(b"f%s;" % float.hex(v).encode())  # exact, and keeps nan, inf and -0.0
    elif issubclass(t, complex):
        real, imag = complex.real.__get__(v), complex.imag.__get__(v)
        out.append(b"c%s,%s;" % (float.hex(real).encode(), float.hex(imag).encode()))
    elif issubclass(t, str):
        _sized(b"s", str.encode(v, "utf-8", "surrogatepass"), out)
    elif issubclass(t, (bytes, bytearray)):
        _sized(b"y" if issubclass(t, bytes) else b"Y", bytes(memoryview(v)), out)
    elif t is range:
        out.append(b"r")
        for x in (v.start, v.stop, v.step):
            _encode(x, depth + 1, out)
    elif issubclass(t, dict):
        out.append(b"d%d:" % dict.__len__(v))
        for k, x in dict.items(v):
            _encode(k, depth + 1, out)
            _encode(x, depth + 1, out)
    else:
        _encode_items(v, t, depth, out)


def _encode_items(v: Any, t: type, depth: int, out: list[bytes]) -> None:
    for base, tag in ((list, b"l"), (tuple, b"t"), (set, b"S"), (frozenset, b"Z")):
        if issubclass(t, base):
            items = list(base.__iter__(v))
            break
    else:
        if not (hasattr(t, "__next__") and hasattr(t, "__iter__")):
            raise NotPlainData(f"a {t.__module__}.{t.__qualname__}")
        tag, items = b"I", []
        for x in v:
            if len(items) >= MAX_ITEMS:
                raise NotPlainData(f"an iterator that yields more than {MAX_ITEMS} items")
            items.append(x)
    out.append(b"%s%d:" % (tag, len(items)))
    for x in items:
        _encode(x, depth + 1, out)


def decode(data: bytes) -> Any:
    """The value :func:`encode` wrote, as exact built-in types; :class:`Malformed` otherwise.

    Safe on hostile input: every tag, length and count is checked against what is left, nesting
    is bounded, and nothing but the built-in types above is ever constructed.
    """
    reader = _Reader(bytes(data))
    try:
        value = reader.value(0)
    except (ValueError, TypeError, OverflowError, IndexError) as exc:
        if isinstance(exc, Malformed):
            raise
        raise Malformed(f"{type(exc).__name__}: {exc}"[:200]) from None
    if reader.pos != len(reader.buf):
        raise Malformed("bytes left after the value")
    return value


class _Reader:
    """A cursor over the encoded bytes."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def until(self, end: bytes) -> bytes:
        i = self.buf.index(end, self.pos)  # ValueError if absent
        text, self.pos = self.buf[self.pos:i], i + 1
        return text

    def count(self) -> int:
        digits = self.until(b":")
        if not digits.isdigit() or len(digits) > 12:
            raise Malformed("a bad length")
        n = int(digits)
        if n > len(self.buf) - self.pos:  # every item takes at least one byte
            raise Malformed("a length beyond the data")
        return n

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Malformed(f"nested deeper than {MAX_DEPTH}")
        tag = self.buf[self.pos:self.pos + 1]
        self.pos += 1
        if tag in (b"N", b"T", b"F"):
            return None if tag == b"N" else tag == b"T"
        if tag == b"i":
            digits = self.until(b";")
            if not digits or not _HEX.issuperset(digits):
                raise Malformed("a bad integer")
            return int(digits, 16)
        if tag == b"f":
            return float.fromhex(self.until(b";").decode("ascii"))
        if tag == b"c":
            real = float.fromhex(self.until(b",").decode("ascii"))
            return complex(real, float.fromhex(self.until(b";").decode("ascii")))
        if tag in (b"s", b"y", b"Y"):
            n = self.count()
            raw, self.pos = self.buf[self.pos:self.pos + n], self.pos + n
            return raw.decode("utf-8", "surrogatepass") if tag == b"s" else raw if tag == b"y" else bytearray(raw)
        if tag == b"r":
            start, stop, step = (self.value(depth + 1) for _ in range(3))
            if not all(type(e) is int for e in (start, stop, step)):
                raise Malformed("range bounds are not ints")
            return range(start, stop, step)
        if tag == b"d":
            n = self.count()
            return {self.value(depth + 1): self.value(depth + 1) for _ in range(n)}
        if tag in _SEQUENCES:
            n = self.count()
            items = [self.value(depth + 1) for _ in range(n)]
            return iter(items) if tag == b"I" else _SEQUENCES[tag](items)
        raise Malformed(f"unknown tag {tag!r}")

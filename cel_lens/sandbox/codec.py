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

Why not ``pickle``/``marshal``: both rebuild objects (code, classes) from untrusted bytes. The
wire format is JSON, each value tagged with its type; :func:`decode` accepts nothing else.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the sandbox process starts faster
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 100
"""Containers nested deeper than this are refused (both ways)."""
MAX_ITEMS = 1_000_000
"""An iterator that yields more than this is refused."""


class NotPlainData(ValueError):
    """The value is not plain data (see the module docstring); the message names its type."""


def encode(value: Any) -> str:
    """``value`` as one line of tagged JSON; raises :class:`NotPlainData` for anything else."""
    import json

    return json.dumps(_encode(value, 0), ensure_ascii=True, separators=(",", ":"))


def _encode(v: Any, depth: int) -> Any:  # noqa: C901 - one branch per type
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
    t = type(v)
    if v is None or t is bool:
        return v
    if issubclass(t, int):
        return ["i", int.__format__(v, "x")]  # hex: no limit on the number of digits
    if issubclass(t, float):
        return ["f", float.hex(v)]  # exact, and keeps nan, inf and -0.0
    if issubclass(t, complex):
        return ["c", float.hex(complex.real.__get__(v)), float.hex(complex.imag.__get__(v))]
    if issubclass(t, str):
        return str.__str__(v)
    if issubclass(t, bytes):
        return ["y", bytes.hex(v)]
    if issubclass(t, bytearray):
        return ["Y", bytearray.hex(v)]
    if t is range:
        return ["r", [_encode(x, depth + 1) for x in (v.start, v.stop, v.step)]]
    for base, tag in ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F")):
        if issubclass(t, base):
            return [tag, [_encode(x, depth + 1) for x in base.__iter__(v)]]
    if issubclass(t, dict):
        return ["d", [[_encode(k, depth + 1), _encode(x, depth + 1)] for k, x in dict.items(v)]]
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):
        items = []
        for x in v:
            if len(items) >= MAX_ITEMS:
                raise NotPlainData(f"an iterator that yields more than {MAX_ITEMS} items")
            items.append(_encode(x, depth + 1))
        return ["it", items]
    raise NotPlainData(f"a {t.__module__}.{t.__qualname__}")


class Malformed(ValueError):
    """What arrived is not a value :func:`encode` writes."""


def decode(text: str | bytes) -> Any:
    """The value :func:`encode` wrote, as exact built-in types; :class:`Malformed` otherwise.

    Safe on hostile input: JSON only, nesting bounded, every tag and payload type checked.
    """
    import json

    try:
        return _decode(json.loads(text), 0)
    except Malformed:
        raise
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise Malformed(f"{type(exc).__name__}: {exc}"[:200]) from None


_SEQUENCES = {"l": list, "t": tuple, "S": set, "F": frozenset}


def _decode(x: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise Malformed(f"nested deeper than {MAX_DEPTH}")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is not list or len(x) < 2 or type(x[0]) is not str:
        raise Malformed(f"not a tagged value: {t.__name__}")
    tag, payload = x[0], x[1]
    if tag in _SEQUENCES or tag == "it":
        items = [_decode(e, depth + 1) for e in _list(payload)]
        return iter(items) if tag == "it" else _SEQUENCES[tag](items)
    if tag == "d":
        pairs = [_list(p) for p in _list(payload)]
        if any(len(p) != 2 for p in pairs):
            raise Malformed("a dict item is not a pair")
        return {_decode(k, depth + 1): _decode(v, depth + 1) for k, v in pairs}
    if tag == "r":
        start, stop, step = (_decode(e, depth + 1) for e in _list(payload))
        if not all(type(e) is int for e in (start, stop, step)):
            raise Malformed("range bounds are not ints")
        return range(start, stop, step)
    if tag == "c" and len(x) == 3:
        return complex(float.fromhex(_str(payload)), float.fromhex(_str(x[2])))
    if len(x) != 2:
        raise Malformed(f"tag {tag!r} with {len(x) - 1} payloads")
    if tag == "i":
        return int(_str(payload), 16)
    if tag == "f":
        return float.fromhex(_str(payload))
    if tag == "y":
        return bytes.fromhex(_str(payload))
    if tag == "Y":
        return bytearray.fromhex(_str(payload))
    raise Malformed(f"unknown tag {tag!r}")


def _list(x: Any) -> list:
    if type(x) is not list:
        raise Malformed(f"expected a list, got {type(x).__name__}")
    return x


def _str(x: Any) -> str:
    if type(x) is not str:
        raise Malformed(f"expected a string, got {type(x).__name__}")
    return x

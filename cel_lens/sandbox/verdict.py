"""The test protocol between the supervisor and the program's process (standard library only).

After the program (and the setup code) ran, the supervisor evaluates each test's remainder
(:mod:`cel_lens.sandbox.judge`). Each time it needs a hole it writes the hole's number on the
*request* pipe; the program's process evaluates that expression in the program's namespace and
answers on the *reply* pipe with ``v <length>`` and that many bytes of the value (plain data,
:mod:`~cel_lens.sandbox.codec`), or one line ``x <exception name>`` or ``n <why the value is not
plain data>``. Tests run in order, each
hole when Python would evaluate it (so ``and``/``or`` short-circuit as in an ``assert``), and the
first test that does not hold ends the run, as the first failing ``assert`` would.

Everything the program's process says is treated as the program's word: a reply is only ever a
value, and the verdict is written by the supervisor on a pipe whose write end the program's
process never holds.
"""

from __future__ import annotations

import os

from cel_lens.sandbox import codec, frame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Callable

MAX_MESSAGE = 4 << 20
"""Bytes of one reply (one hole's value) the supervisor accepts."""


class HoleRaised(Exception):
    """Evaluating the hole raised an exception in the program's process (its name is the message)."""


class HoleFailed(Exception):
    """No usable value: the program's process ended, answered out of protocol, or the value was
    not plain data (the message says which)."""


def write_line(fd: int, text: str | bytes) -> None:
    """Write one whole line to ``fd`` (pipes may take it in parts)."""
    data = (text.encode("utf-8", "replace") if isinstance(text, str) else text) + b"\n"
    while data:
        data = data[os.write(fd, data):]


def exception_name(exc: BaseException) -> str:
    """How a failure is named: ``AssertionError`` for any of its subclasses (as an assert is);
    else the class's name, escaped (:func:`cel_lens.sandbox.frame.escape`: one ASCII field)."""
    if isinstance(exc, AssertionError):
        return "AssertionError"
    try:
        name = type.__dict__["__name__"].__get__(type(exc))
    except BaseException:  # noqa: BLE001
        name = "Exception"
    return frame.escape(name, 100)


# ----------------------------------------------------------------------- the program's process
def serve_holes(codes: list, namespace: dict, request_fd: int, reply_fd: int) -> None:
    """Answer the supervisor's requests until it closes the request pipe."""
    with os.fdopen(request_fd, "rb", buffering=0) as requests:
        for line in iter(requests.readline, b""):
            try:
                value = eval(codes[int(line)], namespace)  # noqa: S307 - the hole of a test
            except BaseException as exc:  # noqa: BLE001 - how the hole failed is the answer
                _print_exception(exc)
                write_line(reply_fd, "x " + exception_name(exc))
                continue
            try:
                payload = codec.encode(value)
            except (codec.NotPlainData, RecursionError, MemoryError, ValueError, TypeError) as exc:
                write_line(reply_fd, f"n {type(exc).__name__}: {exc}"[:300])
                continue
            if len(payload) > MAX_MESSAGE:
                write_line(reply_fd, f"n the value takes {len(payload)} bytes, more than {MAX_MESSAGE}")
            else:
                write_line(reply_fd, b"v %d\n%s" % (len(payload), payload))


def _print_exception(exc: BaseException) -> None:
    try:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # noqa: BLE001
        text = f"{type(exc).__name__}\n"
    try:
        os.write(2, text.encode("utf-8", "replace")[-4096:])
    except OSError:
        pass


# ------------------------------------------------------------------------------ the supervisor
def hole_fetcher(request_fd: int, replies: BinaryIO, seen: dict) -> Callable[[int], Any]:
    """The remainder's ``__hole__``: ask the program's process for hole ``k``, decode the answer."""
    def fetch(k: int) -> Any:
        try:
            write_line(request_fd, str(k))
        except OSError:
            raise HoleFailed("the program's process ended during the tests") from None
        line = replies.readline(1024)
        if not line:
            raise HoleFailed("the program's process ended during the tests")
        kind, _, rest = line.rstrip(b"\n").partition(b" ")
        text = rest.decode("utf-8", "replace")
        if kind == b"x":
            raise HoleRaised(frame.escape(text, 100) or "Exception")
        if kind == b"n":
            raise HoleFailed("the value is not plain data (" + frame.escape(text) + ")")
        if kind != b"v" or not rest.isdigit() or int(rest) > MAX_MESSAGE:
            raise HoleFailed(f"an answer out of protocol ({line[:40]!r})")
        payload = replies.read(int(rest) + 1)  # the value and the line's end
        if len(payload) != int(rest) + 1 or not payload.endswith(b"\n"):
            raise HoleFailed("the program's process ended during the tests")
        try:
            value = codec.decode(payload[:-1])
        except codec.Malformed as exc:
            raise HoleFailed(f"a malformed value ({exc})") from None
        seen[k] = value
        return value

    return fetch


def run_tests(checks: list[dict], fetch_for: Callable[[dict], Callable[[int], Any]],
              report: Callable[..., None]) -> None:
    """Judge ``checks`` in order; report ``test I STATUS REASON`` for each and one ``verdict``
    (each a record of fields, :mod:`cel_lens.sandbox.frame`; ``STATUS`` a fixed token)."""
    import builtins

    for i, check in enumerate(checks):
        seen: dict = {}
        env = {"__builtins__": builtins, "__hole__": fetch_for(seen)}
        for name in check["modules"]:
            env[name] = __import__(name)
        try:
            held = bool(eval(compile(check["remainder"], f"<test {i + 1}>", "eval"), env))  # noqa: S307
            status, reason = ("passed", "") if held else ("failed", "AssertionError")
        except HoleRaised as exc:
            status, reason = ("failed" if str(exc) == "AssertionError" else "error"), str(exc)
        except HoleFailed as exc:
            status, reason = "error", str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. a TypeError comparing the values
            status, reason = "error", type(exc).__name__
        report("test", str(i), status, reason)
        if status != "passed":
            report("verdict", status, reason)
            report("explain", *explanation(i, len(checks), check, seen, reason))
            return
    report("verdict", "passed", f"{len(checks)} test{'' if len(checks) == 1 else 's'} held")


EXPLAIN_HOLES = 20
"""Holes of a failing test whose values the explanation shows (the rest are counted)."""


def explanation(i: int, n: int, check: dict, seen: dict, reason: str) -> list[str]:
    """Which test failed and what the program's values were, as lines for the ``explain`` record
    (never raises). It goes on the verdict pipe to the caller, never on a stderr the program's
    process shares: the test's source holds the expected value. Each line is escaped ASCII and
    bounded, so the record stays far below :data:`cel_lens.sandbox.frame.MAX_RECORD`."""
    try:
        lines = [f"cel_lens.sandbox: test {i + 1} of {n} did not hold: {frame.escape(check['source'], 2000)}"]
        shown = [k for k in range(check["first_hole"], check["first_hole"] + len(check["holes"])) if k in seen]
        for k in shown[:EXPLAIN_HOLES]:
            source = check["holes"][k - check["first_hole"]]
            lines.append(f"  {frame.escape(source, 300)} -> {frame.escape(bounded_repr(seen[k]), 2 * REPR_LIMIT)}")
        if len(shown) > EXPLAIN_HOLES:
            lines.append(f"  ... and {len(shown) - EXPLAIN_HOLES} more")
        lines.append(frame.escape(reason or "AssertionError"))
        return lines
    except BaseException:  # noqa: BLE001 - the verdict is written already; say what can be said
        return [f"cel_lens.sandbox: test {i + 1} of {n} did not hold"]


REPR_LIMIT = 200
"""Characters of a failing value shown in the explanation (the caller adds it to ``Outcome.stderr``)."""


def bounded_repr(value: Any, limit: int = REPR_LIMIT) -> str:
    """``repr`` of a decoded value in at most about ``limit`` characters; never raises.

    Python's ``repr`` of an ``int`` over 4,300 digits raises ``ValueError``, and a large container
    takes long to print: both are cut here (an ``int`` over ``limit`` digits is shown by its size).
    """
    try:
        parts: list[str] = []
        _repr_into(value, parts, limit, 0)
        text = "".join(parts)
    except BaseException:  # noqa: BLE001 - say what it was, at least
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


_BRACKETS = {list: ("[", "]"), tuple: ("(", ")"), dict: ("{", "}"), set: ("{", "}"),
             frozenset: ("frozenset({", "})")}


def _repr_into(v: Any, parts: list[str], limit: int, depth: int) -> None:
    if sum(len(p) for p in parts) > limit:
        return
    t = type(v)
    if t is int and v.bit_length() > 3 * limit:
        parts.append(f"<int of {v.bit_length()} bits>")
    elif t in (set, frozenset) and not v:
        parts.append(f"{t.__name__}()")
    elif t in _BRACKETS and depth < 20:
        open_, close = _BRACKETS[t]
        parts.append(open_)
        for j, item in enumerate(v.items() if t is dict else v):
            if sum(len(p) for p in parts) > limit:
                parts.append("...")
                break
            parts.append(", " if j else "")
            if t is dict:
                _repr_into(item[0], parts, limit, depth + 1)
                parts.append(": ")
                _repr_into(item[1], parts, limit, depth + 1)
            else:
                _repr_into(item, parts, limit, depth + 1)
        parts.append("," + close if t is tuple and len(v) == 1 else close)
    elif t in (str, bytes, bytearray):
        parts.append(repr(v[: limit + 1]))
    else:
        parts.append(repr(v)[: limit + 1])

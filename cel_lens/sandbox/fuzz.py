"""A grammar-based fuzzer for the judge: hostile completions whose values are wrong, which must
never be judged "passed".

Every generated case is a program and its tests. The tests ask for :data:`EXPECTED` (``2``) in
one of :data:`TEST_TEMPLATES`' shapes (comparisons, membership, comprehensions, ``sorted`` with a
key, ``math.isclose``, ``sys.getsizeof``, a method of the value...); the program's function ``f``
returns a value that is *not* ``2`` under Python's own semantics of the built-in types, wrapped
(or not) in a lying subclass of its type (``__eq__``, ``__ne__``, ``__bool__``, ``__mod__``,
``__iter__``, ``__len__``, ``__hash__``, ``__repr__``, ``__str__`` say what the program likes), or
replaced by a huge value, or by an exit or an exception whose name carries line separators and a
forged verdict. Around it the grammar adds *poisons*: patched built-ins and modules the tests use,
forged verdict lines and framed records written to every descriptor, exit handlers, finalisers,
gc callbacks, background threads, and exits at every point; and the routes out of a run
(:data:`ROUTES`: the failing test's explanation read back from the stderr pipe, other runs'
cgroups, a futex shared between runs), which say on stdout when they got something. So a pass can
only be forged, and a route that yields anything is counted.

:func:`generate` yields cases from a seed; :func:`fuzz` runs them through
:func:`cel_lens.sandbox.run` for a time budget and reports how many ran, the statuses, any pass
(a forged verdict) and any crash (``run`` raising).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from cel_lens.sandbox import frame
from cel_lens.sandbox.runner import Program, run_many

__all__ = ["EXPECTED", "TEST_TEMPLATES", "BASES", "POISONS", "ROUTES", "LEAK_MARK", "Case", "FuzzReport", "generate",
           "fuzz"]

EXPECTED = 2
"""The value every test asks ``f(1)`` for; no generated program's value is it."""

TEST_TEMPLATES = (
    "assert f(1) == 2",
    "assert not f(1) != 2",
    "assert f(1) in [2]",
    "assert [x for x in [f(1)]] == [2]",
    "assert all(x == 2 for x in [f(1)])",
    "assert any(x == 2 for x in (f(1),))",
    "assert sorted([f(1)], key=lambda t: 0) == [2]",
    "assert {f(1): 1} == {2: 1}",
    "assert (f(1) == 2) is True",
    "assert abs(f(1) - 2) < 1e-9",
    "assert math.isclose(f(1), 2)",
    "assert sys.getsizeof(0) > 0 and f(1) == 2",
    "assert str(f(1)) == '2'",
    "assert repr(f(1)) == '2'",
    "assert f(1) + 0 == 2",
    "assert [f(1)][0] == 2",
    "assert f(1) == 2 or f(1) == 2.0",
    "assert len([f(1)]) == 1 and f(1) == 2",
    "assert g(0) == 0 and f(1) == 2",
)
"""Test shapes, each true only for a value equal to ``2`` (``g`` is an honest helper: ``g(0) == 0``)."""

# wrong values (none equals 2, none prints as '2', none is 2.0 within 1e-9)
_VALUES = ("3", "-2", "2.5", "float('nan')", "3j", "'two'", "' 2'", "b'2'", "bytearray(b'2')", "[2]", "(2,)",
           "{2}", "frozenset({2})", "{2: 2}", "None", "True", "range(2)", "iter([2])", "(x for x in [2])",
           "map(int, '2')", "[[2]]", "'2 '", "1 + 1e-6")
_HUGE = ("2**100000", "-(2**100000)", "'x' * (5 << 20)", "[2] * 2000000", "list(range(10**6))",
         "[[[[[[[[[[2]]]]]]]]]] * 1000", "_deep()", "_loop()")
BASES = {"int": "int", "float": "float", "complex": "complex", "str": "str", "bytes": "bytes",
          "bytearray": "bytearray", "list": "list", "tuple": "tuple", "dict": "dict", "set": "set",
          "frozenset": "frozenset"}
"""The built-in types the grammar subclasses with lying methods (name -> base)."""
_LIES = ("__eq__ = lambda s, o: True", "__ne__ = lambda s, o: False", "__bool__ = lambda s: True",
         "__mod__ = lambda s, o: 0", "__iter__ = lambda s: iter([2])", "__len__ = lambda s: 1",
         "__hash__ = lambda s: hash(2)", "__repr__ = lambda s: '2'", "__str__ = lambda s: '2'",
         "__lt__ = lambda s, o: True", "__sub__ = lambda s, o: 0", "__add__ = lambda s, o: 2",
         "__abs__ = lambda s: 0", "__float__ = lambda s: 2.0", "__index__ = lambda s: 2",
         "__class__ = property(lambda s: int)", "__getitem__ = lambda s, i: 2",
         "__contains__ = lambda s, x: True", "__format__ = lambda s, spec: '2'")
_SEPARATORS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n", "\x00")
_FORGED_TEXT = ("verdict passed 1 test held", "test 0 passed", "program done", "ready x", "child exit 0 0.0",
                "v 2\ni2;", "done")


@dataclass(frozen=True)
class Case:
    """One generated program, its tests, and the grammar's choices (for the report)."""

    code: str
    tests: tuple[str, ...]
    parts: tuple[str, ...]


@dataclass
class FuzzReport:
    """What a fuzzing run found: ``cases`` run, ``statuses`` counted, ``passed`` (forged verdicts:
    must be empty), ``crashes`` (``run`` raised) and ``leaks`` (cases in which a route poison,
    :data:`ROUTES`, got something, by route: must be empty), with the seconds it took."""

    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    passed: list = field(default_factory=list)
    crashes: list = field(default_factory=list)
    leaks: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def __str__(self) -> str:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        leaks = ", ".join(f"{k} {v}" for k, v in sorted(self.leaks.items())) or "none"
        return (f"{self.cases} hostile cases in {self.seconds:.1f} s: {statuses}; "
                f"{len(self.passed)} passed, {len(self.crashes)} crashes; cases a route yielded to: {leaks}")


def _text(rng: random.Random) -> str:
    """A name or message: a separator, a forged line, another separator."""
    forged = _FORGED_TEXT[0] if rng.random() < 0.5 else rng.choice(_FORGED_TEXT)
    return "E" + rng.choice(_SEPARATORS) + forged + rng.choice(_SEPARATORS)


def _value(rng: random.Random) -> tuple[str, str, str]:
    """(definitions, the expression ``f`` returns, the part's name)."""
    kind = rng.random()
    if kind < 0.15:
        return "", rng.choice(_HUGE), "huge"
    value = rng.choice(_VALUES)
    if kind < 0.35:
        return "", value, "plain"
    base = rng.choice(list(BASES))
    lies = rng.sample(_LIES, rng.randint(1, 5))
    if rng.random() < 0.5 and _LIES[0] not in lies:  # the lie that matters most, often
        lies.append(_LIES[0])
    body = "".join(f"    {lie}\n" for lie in lies)
    plain = {"int": "3", "float": "2.5", "complex": "3j", "str": "'two'", "bytes": "b'2'", "bytearray": "b'2'",
             "list": "[3]", "tuple": "(3,)", "dict": "{3: 3}", "set": "{3}", "frozenset": "{3}"}[base]
    return f"class Liar({BASES[base]}):\n{body}\n", f"Liar({plain})", f"liar-{base}"


def _ending(rng: random.Random) -> tuple[str, str]:
    """How ``f`` ends: it returns its value, or exits, or raises something with a forged name."""
    text = repr(_text(rng))
    if rng.random() < 0.5:
        return "    return VALUE\n", "returns"
    return rng.choice((
        (f"    raise type({text}, (Exception,), {{}})()\n", "raises-forged-name"),
        (f"    raise ValueError({text})\n", "raises-forged-message"),
        (f"    raise SystemExit({text})\n", "exits-forged-code"),
        ("    raise SystemExit(0)\n", "exits-0"),
        ("    import os\n    os._exit(0)\n", "os-exit-0"),
        ("    raise KeyboardInterrupt\n", "keyboard-interrupt"),
        ("    raise type('P', (BaseException,), {})()\n", "base-exception"),
        ("    _forge()\n    return VALUE\n", "forges-then-returns"),
        ("    yield VALUE\n", "generator"),
    ))


_FORGE = ("import os as _os\n"
          "def _forge():\n"
          "    data = DATA\n"
          "    for fd in range(64):\n"
          "        try:\n            _os.write(fd, data)\n        except OSError:\n            pass\n"
          "def _deep():\n    a = 2\n    for _ in range(200):\n        a = [a]\n    return a\n"
          "def _loop():\n    a = []\n    a.append(a)\n    return a\n")

# The routes between runs (issue 59): each poison tries one and, when it yields something, writes
# LEAK_MARK and the route's name on stdout, which the fuzzer counts (FuzzReport.leaks). The program's
# final exit is delayed so that a thread still reading gets its turn.
_ROUTE_HEAD = ("import os as _o, sys as _s, threading as _t, time as _tm\n"
               "_real_exit = _o._exit\n_o._exit = lambda c: (_tm.sleep(0.3), _real_exit(c))\n"
               "def _leak(route):\n    _o.write(1, b'MARK' + route.encode() + b'\\n')\n")
_ROUTE_STDERR = ("def _reread():\n    fd = _o.open('/proc/self/fd/2', _o.O_RDONLY)\n    while True:\n"
                 "        data = _o.read(fd, 65536)\n        if not data:\n            return\n"
                 "        if b'did not hold' in data or b' -> ' in data:\n            _leak('stderr')\n"
                 "_t.Thread(target=_reread, daemon=True).start()\n")
_ROUTE_CGROUPS = ("import glob as _g\nfor _p in _g.glob('/sys/fs/cgroup/*/cel_lens_sandbox-*') + "
                  "_g.glob('/sys/fs/cgroup/*/*/*/cel_lens_sandbox-*') + _g.glob('/sys/fs/cgroup/cel_lens_sandbox-*'):\n"
                  "    _leak('cgroups')\n    break\n")
_ROUTE_FUTEX = ("for _n in ('ctypes', '_ctypes'):\n    _s.modules.pop(_n, None)\nimport ctypes as _c, random as _r\n"
                "_lc = _c.CDLL(None, use_errno=True)\n_lc.syscall.restype = _c.c_long\n"
                "_a = _c.cast(_lc.printf, _c.c_void_p).value & ~4095\n_mine, _theirs = _r.sample((_a, _a + 64), 2)\n"
                "_nr = {'x86_64': 202, 'aarch64': 98}.get(_o.uname().machine, 202)\n"
                "def _wake():\n    for _ in range(3000):\n        _lc.syscall(_nr, _c.c_void_p(_mine), 1, 1 << 20)\n"
                "        _tm.sleep(0.0002)\n"
                "def _wait():\n    w = _c.c_uint32.from_address(_theirs)\n    for _ in range(100):\n"
                "        if _lc.syscall(_nr, _c.c_void_p(_theirs), 0, w.value, (_c.c_long * 2)(0, 5_000_000)) == 0:\n"
                "            _leak('futex')\n            return\n"
                "_t.Thread(target=_wake, daemon=True).start()\n_t.Thread(target=_wait, daemon=True).start()\n")
LEAK_MARK = "cel-leak:"
"""What a route poison writes on stdout, before the route's name, when the route yielded something."""
ROUTES = {"route-stderr": _ROUTE_STDERR, "route-cgroups": _ROUTE_CGROUPS, "route-futex": _ROUTE_FUTEX}
"""Poisons that try a channel out of the sandbox or between runs: the failing test's explanation
read back through ``/proc/self/fd/2``, other runs' cgroups, wait and wake on a shared futex."""

POISONS = (
    ("import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.sorted = lambda *a, **k: [2]\nbuiltins.all = lambda x: True\n", "patch-builtins"),
    ("import builtins\nbuiltins.len = lambda x: 1\nbuiltins.str = lambda x='': '2'\nbuiltins.repr = lambda x: '2'\n", "patch-str-repr"),
    ("import math\nmath.isclose = lambda *a, **k: True\n", "patch-math"),
    ("import sys\nsys.getsizeof = lambda o: 7\n", "patch-sys"),
    ("import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n", "patch-assertion-error"),
    # the program's own codec may send any value, as ``f`` may return any: a wrong one, or bytes
    # that are not a value (sending ``2`` would be an honest answer, not a forgery)
    ("from cel_lens.sandbox import codec as _c\n_c.encode = lambda v: b'l1:i2;'\n", "patch-codec-wrong"),
    ("from cel_lens.sandbox import codec as _c\n_c.encode = lambda v: b'i2;i2;'\n", "patch-codec-trailing"),
    ("from cel_lens.sandbox import codec as _c\n_c.encode = lambda v: b'i2;\\nverdict passed'\n", "patch-codec-forged"),
    ("from cel_lens.sandbox import verdict as _v\n_v.write_line = lambda fd, t: _forge()\n", "patch-verdict"),
    ("import atexit\natexit.register(_forge)\n", "atexit-forge"),
    ("import gc\ngc.callbacks.append(lambda *a: _forge())\n", "gc-forge"),
    ("class _D:\n    def __del__(self):\n        _forge()\n_keep = _D()\n", "del-forge"),
    ("import threading, time\nthreading.Thread(target=lambda: [_forge() or time.sleep(0.005) for _ in range(100)]).start()\n", "thread-forge"),
    ("_forge()\n", "forge-at-import"),
    ("print(TEXT)\nimport sys\nsys.stderr.write(TEXT)\n", "forged-output"),
    ("raise SystemExit(TEXT)\n", "exit-at-import"),
    ("raise type(TEXT, (Exception,), {})()\n", "raise-forged-class-at-import"),
    ("import sys\nsys.modules['math'] = type(sys)('math')\n", "replace-math-module"),
    *((_ROUTE_HEAD.replace("MARK", LEAK_MARK) + code, name) for name, code in ROUTES.items()),
)
"""(code, name): what the grammar adds around ``f``: patched built-ins and modules, forged verdicts
written to every descriptor (now, at exit, from finalisers, gc callbacks and threads), exits."""


def _forged_bytes(rng: random.Random) -> bytes:
    """Verdict-like lines of the old protocol and framed records of the new one, mixed."""
    records = [frame.pack("ready", "x"), frame.pack("program", "done"), frame.pack("test", "0", "passed", ""),
               frame.pack("verdict", "passed", "1 test held"), frame.pack("child", "exit", "0", "0.0")]
    lines = [t.encode("utf-8", "surrogatepass") + b"\n" for t in _FORGED_TEXT]
    parts = records + lines
    rng.shuffle(parts)
    return b"".join(parts)


def generate(seed: int) -> Iterator[Case]:
    """Cases from ``seed``, without end (the same seed gives the same cases)."""
    rng = random.Random(seed)
    while True:
        defs, value, value_part = _value(rng)
        ending, ending_part = _ending(rng)
        poisons = rng.sample(POISONS, rng.choice((0, 0, 1, 1, 2, 3)))
        text = _text(rng)
        body = _FORGE.replace("DATA", repr(_forged_bytes(rng)))
        head = "".join(p.replace("TEXT", repr(text)) for p, _ in poisons)
        code = body + defs + "def g(x):\n    return 0\n" + head + "def f(x):\n" + ending.replace("VALUE", value)
        tests = tuple(rng.sample(TEST_TEMPLATES, rng.randint(1, 3)))
        yield Case(code, tests, (value_part, ending_part, *(name for _, name in poisons)))


def fuzz(seed: int = 0, budget: float = 20.0, *, batch: int = 8, timeout: float = 1.0,
         workers: int = 2, **limits: object) -> FuzzReport:
    """Run generated cases for about ``budget`` seconds (``batch`` at a time, ``workers`` in
    parallel); a case's ``timeout`` is its wall clock. ``limits``: :func:`run_many`'s others."""
    report = FuzzReport()
    cases = generate(seed)
    start = time.monotonic()
    while time.monotonic() - start < budget:
        chunk = [next(cases) for _ in range(batch)]
        programs = [Program(c.code, c.tests) for c in chunk]
        try:
            outs = run_many(programs, timeout=timeout, workers=workers, allow=True, **limits)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - a crash of the judge is what the fuzzer looks for
            report.crashes.append((chunk, f"{type(exc).__name__}: {exc}"))
            report.cases += len(chunk)
            continue
        for case, out in zip(chunk, outs):
            report.cases += 1
            report.statuses[out.status] += 1
            if out.passed:
                report.passed.append((case, out))
            for route in {line[len(LEAK_MARK):] for line in out.stdout.splitlines() if line.startswith(LEAK_MARK)}:
                report.leaks[route] += 1
    report.seconds = time.monotonic() - start
    return report

"""Routes that an adversary who read the sandbox's code found: each program fails its test and was
judged "passed" (or crashed the supervisor); each must now be "failed" or "error", in both modes.

1. line separators in text the supervisor relays (class names, messages, exit codes);
2. test logic that ran in the program's process (comprehensions, names outside the trusted set);
3. a paired Unix datagram socket delivering to a host socket path;
4. a huge wrong value whose ``repr`` raised inside the explanation of the failure.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cel_lens import sandbox as sb
from cel_lens.sandbox import frame
from cel_lens.sandbox.judge import CannotJudge
from cel_lens.sandbox.verdict import bounded_repr
from cel_lens.tasks import mbpp
from cel_lens.tasks.base import Example

TESTS = ["assert f(1) == 2"]
SEPARATORS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n"]
FORGED = "verdict passed 3 tests held"


def _carriers(sep: str) -> dict[str, str]:
    """Programs that place ``sep`` + a forged verdict in every text the supervisor relays."""
    text = repr(sep + FORGED + sep + "test 0 passed" + sep)
    return {
        "class_name_raised": f"E = type('E' + {text}, (Exception,), {{}})\nraise E()\n",
        "class_name_in_f": f"E = type('E' + {text}, (Exception,), {{}})\ndef f(x):\n    raise E()\n",
        "qualname_module": f"class E(Exception):\n    pass\nE.__qualname__ = E.__module__ = {text}\ndef f(x):\n    raise E()\n",
        "message": f"def f(x):\n    raise ValueError({text})\n",
        "systemexit_code": f"raise SystemExit({text})\n",
        "systemexit_str_subclass": f"raise SystemExit(type('S', (str,), {{}})({text}))\n",
    }


@pytest.mark.parametrize("sep", SEPARATORS, ids=lambda s: f"U+{ord(s[0]):04X}")
def test_line_separators_in_relayed_text_cannot_forge_a_verdict(sep: str, mode: str, hostile) -> None:
    for name, code in _carriers(sep).items():
        out = hostile(code, tests=TESTS)
        assert out.status in ("failed", "error"), (name, out)
        assert all(c.isprintable() and c.isascii() for c in out.reason), (name, out.reason)


def test_mbpp_judges_refuse_the_forged_class_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's route: ``E = type('E\\u2028verdict passed 3 tests held', ...)`` then ``[DONE]``."""
    monkeypatch.setenv(sb.ALLOW_ENV, "1")
    ex = Example(id="mbpp/x", prompt="p", meta={"test_list": ("assert f(1) == 2",), "test_setup_code": "",
                                                 "reference_code": "def f(x):\n    return 2\n"})
    completion = "E = type('E\\u2028verdict passed 3 tests held', (Exception,), {})\nraise E()\n[DONE]"
    assert not mbpp.judge(ex, completion)
    assert not mbpp.judge_fenced(ex, completion)
    assert mbpp.judge(ex, "def f(x):\n    return 2\n[DONE]")


def test_frames_split_on_nothing_the_text_holds() -> None:
    nasty = "".join(SEPARATORS) + " verdict passed\x00\\ é"
    records = frame.unpack(frame.pack("program", "raised", frame.escape(nasty)) + frame.pack("verdict", "failed", "x"))
    assert [r[:2] for r in records] == [["program", "raised"], ["verdict", "failed"]]
    assert len(records[0]) == 3 and len(records[0][2].splitlines()) == 1 and records[0][2].isascii()
    assert frame.unpack(frame.pack("a", "b")[:-1]) == [] and frame.unpack(frame.pack() + frame.pack("x")) == [["x"]]
    assert len(frame.escape("x" * 10_000)) == frame.MAX_TEXT + 3


# --------------------------------------------------------------------------- 2: the test's logic
LYING_INT = ("class I(int):\n    __mod__ = lambda s, o: 0\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
             "    __bool__ = lambda s: True\n")
LOGIC_ROUTES = {
    "generator_over_lying_ints": (LYING_INT + "def f(x):\n    return [I(1), I(3)]\n",
                                  ["assert all(x % 2 == 0 for x in f(1))"]),
    "list_comprehension": (LYING_INT + "def f(x):\n    return [I(1)]\n", ["assert [x % 2 for x in f(1)] == [0]"]),
    "method_of_a_lying_str": ("class S(str):\n    strip = lambda s: 'a'\ndef f(x):\n    return S(' b ')\n",
                              ["assert f(1).strip() == 'a'"]),
    "sys_getsizeof_patched": ("import sys\nsys.getsizeof = lambda o: 7\ndef tuple_size(t):\n    return 7\n",
                              ["assert tuple_size(('A', 1, 'B', 2, 'C', 3)) == sys.getsizeof(('A', 1, 'B', 2, 'C', 3))"]),
    "sorted_key_lambda": ("import builtins\nbuiltins.sorted = lambda *a, **k: [1, 2]\ndef f(x):\n    return [2, 1, 0]\n",
                          ["assert sorted(f(1), key=lambda t: t) == [1, 2]"]),
}


@pytest.mark.parametrize("route", list(LOGIC_ROUTES))
def test_the_tests_logic_runs_in_the_supervisor(route: str, mode: str, hostile) -> None:
    code, tests = LOGIC_ROUTES[route]
    out = hostile(code, tests=tests)
    assert out.status == "failed", out


def test_sys_getsizeof_is_the_supervisors_and_honest_programs_pass() -> None:
    tests = ["assert tuple_size(('A', 1, 'B', 2, 'C', 3)) == sys.getsizeof(('A', 1, 'B', 2, 'C', 3))"]
    assert sb.run("import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)\n", tests=tests, allow=True).passed
    assert sb.run("def f(x):\n    return [2, 4]\n", tests=["assert all(x % 2 == 0 for x in f(1))"], allow=True).passed


def test_shapes_the_supervisor_cannot_evaluate_are_refused_not_passed() -> None:
    with pytest.raises(CannotJudge):
        sb.run("def g(x):\n    return True\n", tests=["assert all(g(x) for x in range(3))"], allow=True)


# --------------------------------------------------------------------------------- 3: sockets
def test_paired_unix_datagram_socket_cannot_reach_a_host_path(mode: str, hostile, tmp_path: Path) -> None:
    path = str(tmp_path / "host.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.setblocking(False)
    code = (
        "import _socket\nsaid = []\n"
        "for family, kind in ((_socket.AF_UNIX, _socket.SOCK_DGRAM), (_socket.AF_UNIX, _socket.SOCK_STREAM)):\n"
        "    try:\n"
        "        a, b = _socket.socketpair(family, kind)\n"
        f"        a.sendto(open('/etc/hostname', 'rb').read() or b'x', {path!r})\n"
        "    except OSError as e:\n"
        "        said.append(e.errno)\n"
        "print(said)\n"
        "def f(x):\n    return 0\n"
    )
    try:
        out = hostile(code, tests=TESTS)
        with pytest.raises(BlockingIOError):
            listener.recv(4096)
    finally:
        listener.close()
    assert out.stdout.strip() == "[1, 1]", out  # EPERM from seccomp, both times


# ------------------------------------------------------------------------------ 4: huge values
def test_a_huge_wrong_value_fails_and_is_shown_bounded(mode: str, hostile) -> None:
    out = hostile("def f(x):\n    return 2**100000\n", tests=TESTS)
    assert out.status == "failed" and out.reason == "AssertionError", out
    assert "f(1) -> <int of 100001 bits>" in out.stderr
    out = hostile("def f(x):\n    return [2**100000] * 3 + list(range(10**5))\n", tests=TESTS)
    assert out.status == "failed", out


def test_bounded_repr_never_raises_and_stays_short() -> None:
    for value in (2**100000, [2**100000], {"a": 10**5000}, list(range(10**5)), "x" * 10**6, (1.5, None, b"\x00")):
        text = bounded_repr(value)
        assert len(text) <= 200
    assert bounded_repr([1, "a", (2, 3)]) == repr([1, "a", (2, 3)])
    for small in ({1: [2]}, frozenset(), frozenset({1}), set(), {3}, (1,), (), [(1,), {2: (3, 4)}], 2**500, -1.5):
        assert bounded_repr(small) == repr(small)


def test_no_new_namespace_but_threads_and_fork_work(mode: str, hostile) -> None:
    """``unshare`` and ``clone`` with a namespace flag are refused (a new user namespace would give
    every capability back inside it); ``clone3`` says ENOSYS so the C library uses ``clone``."""
    code = (
        "import sys, threading, posix\n"
        "r = []\nt = threading.Thread(target=lambda: r.append(1))\nt.start()\nt.join()\n"
        "pid = posix.fork()\nif pid == 0:\n    posix._exit(7)\n_, st = posix.waitpid(pid, 0)\n"
        "for m in ('ctypes', '_ctypes'):\n    sys.modules.pop(m, None)\nimport ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\nout = [r, posix.waitstatus_to_exitcode(st)]\n"
        "out += [libc.unshare(0x10000000), ctypes.get_errno()]\n"
        "nr = {'x86_64': 56, 'aarch64': 220}[posix.uname().machine]\n"
        "ret = libc.syscall(nr, 0x10000000 | 17, 0, 0, 0, 0)\nif ret == 0:\n    posix._exit(0)\n"
        "out += [ret, ctypes.get_errno(), libc.syscall(435, 0, 0), ctypes.get_errno()]\nprint(out)\n"
        "def f(x):\n    return 0\n"
    )
    out = hostile(code, tests=TESTS)
    assert out.stdout.strip() == "[[1], 7, -1, 1, -1, 1, -1, 38]", out

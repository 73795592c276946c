"""Hostile programs end as failed/timeout/error within their limit, the test process survives,
nothing outside the sandbox's directory changes, no process is left behind; the kernel layers
stop programs that bypass the Python guard; a killed caller leaves nothing after the next start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cel_lens import sandbox as sb
from cel_lens.sandbox import cgroups, runner

TIMEOUT = 1.0
REPO = Path(__file__).resolve().parents[2]


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
def test_hostile_program(name: str, mode: str, hostile) -> None:
    code, statuses = HOSTILE[name]
    # a small address space, so that the memory hog reaches it well within the timeout
    out = hostile(code, memory_mb=256)
    assert out.status in statuses, out
    if name == "output_flood":
        assert "more bytes dropped" in out.stdout and len(out.stdout) < sb.DEFAULT_OUTPUT_LIMIT + 100
    if name in ("memory_hog", "big_allocation"):
        assert out.reason == "MemoryError", out


def test_hostile_file_operations(mode: str, outside: Path, hostile) -> None:
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
        # what the guard-only mode let through before: other ways to create or change files
        f"import io\nio.FileIO({str(outside / 'new.txt')!r}, 'w').write(b'x')",
        f"import os\nos.makedirs({str(outside / 'new' / 'dir')!r})",
        f"import tempfile\ntempfile.mkdtemp(dir={str(outside)!r})",
        f"import os\nos.utime({str(canary)!r}, (0, 0))",
        f"import os\nos.setxattr({str(canary)!r}, 'user.x', b'1')",
        f"import sqlite3\nsqlite3.connect({str(outside / 'new.db')!r}).execute('create table t(x)')",
    ]
    for code in programs:
        out = hostile(code)
        allowed = ("PermissionError", "OSError", "TypeError", "ModuleNotFoundError")
        assert out.status == "error" and out.reason in allowed, (code, out)
    assert not (outside / "new.txt").exists() and not Path("/etc/cel_lens_sandbox_probe").exists()


def test_hostile_network(mode: str, hostile) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.3)
    port = server.getsockname()[1]
    try:
        for code in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')",
            f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
            "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        ):
            out = hostile(code)
            assert out.status == "error", (code, out)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing reached the listener
    finally:
        server.close()
    assert ("netns" in out.isolation) == (mode == "namespaces")


@pytest.mark.parametrize("leave_group", [False, True])
def test_background_process_is_killed(
    leave_group: bool, mode: str, outside: Path, kernel_layers, sandbox_processes
) -> None:
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


def test_bypassing_fork_bomb_is_bounded(mode: str, hostile, kernel_layers) -> None:
    if os.geteuid() == 0 and "pids-cgroup" not in kernel_layers:
        pytest.skip("root without a pids cgroup: the number of processes is not bounded (documented)")
    out = hostile("import posix, time\nwhile True:\n    if posix.fork() == 0:\n        time.sleep(60)")
    assert out.status == "error" and out.reason == "BlockingIOError", out  # fork failed: EAGAIN


# ---------------------------------------------------------------------------------------------
# programs that bypass the Python guard on purpose: stopped by the kernel layers
# ---------------------------------------------------------------------------------------------
def test_bypass_cannot_signal_the_test_process(namespaces, hostile) -> None:
    me = os.getpid()
    out = hostile(f"import posix\nposix.kill({me}, 9)")
    assert out.reason == "ProcessLookupError", out  # the test process is not in its PID namespace
    hostile("import posix\nposix.kill(0, 9)\nimport time\ntime.sleep(5)")  # its own group
    code = "import os\nassert os.getppid() == 0\nassert sorted(p for p in os.listdir('/proc') if p.isdigit()) == ['1']"
    assert sb.run(code, allow=True).passed  # PID 1 of its own namespace, sees no other process


def test_bypass_cannot_write_outside(namespaces, outside: Path, hostile) -> None:
    if "fs:read-only" not in namespaces:
        pytest.skip("read-only mounts are not available here")
    canary = outside / "canary.txt"
    for code in (
        f"import posix\nfd = posix.open({str(canary)!r}, posix.O_WRONLY | posix.O_TRUNC)\nposix.write(fd, b'pwned')",
        f"import posix\nposix.unlink({str(canary)!r})",
        f"import _io\n_io.FileIO({str(outside / 'new.txt')!r}, 'w').write(b'x')",
        "import posix\nposix.open('/dev/null', posix.O_WRONLY)",  # nodev: no device node opens
    ):
        out = hostile(code)
        assert out.status == "error" and out.reason in ("OSError", "PermissionError"), (code, out)
    assert not (outside / "new.txt").exists()


def test_bypass_cannot_reach_the_network(namespaces, hostile) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.3)
    try:
        code = f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {server.getsockname()[1]}))"
        out = hostile(code)
        # seccomp refuses the socket itself (PermissionError) before the empty netns would (OSError)
        assert out.status == "error" and out.reason in ("OSError", "PermissionError"), out
        assert "seccomp" not in out.isolation or out.reason == "PermissionError", out
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_bypass_cannot_remount_or_regain_privileges(namespaces) -> None:
    if "caps:dropped" not in namespaces:
        pytest.skip("capabilities could not be dropped here")
    code = "assert open('/proc/self/status').read().split('CapEff:')[1].split()[0] == '0' * 16"
    assert sb.run(code, allow=True).passed, "the program still has capabilities"


def test_bypass_cannot_change_file_metadata_or_fill_the_disk(namespaces, outside: Path, hostile) -> None:
    if "fs:read-only" not in namespaces or "tmpfs" not in namespaces:
        pytest.skip("read-only mounts or the tmpfs are not available here")
    canary = outside / "canary.txt"
    for code in (
        f"import posix\nposix.utime({str(canary)!r}, (0, 0))",
        f"import posix\nposix.setxattr({str(canary)!r}, 'user.x', b'1')",
        f"import posix\nposix.mkdir({str(outside / 'new')!r})",
        f"import posix\nposix.chmod({str(canary)!r}, 0)",
    ):
        out = hostile(code)
        assert out.status == "error" and out.reason in ("OSError", "PermissionError"), (code, out)
    # the working directory is a tmpfs of 4 x file_size_mb: 600 MiB do not fit
    fill = "for i in range(60):\n    open(f'f{i}', 'wb').write(b'x' * (10 << 20))"
    out = hostile(fill)
    assert out.status == "error" and out.reason == "OSError", out


def test_weaker_mode_bypass_is_stopped_by_landlock_and_seccomp(
    monkeypatch: pytest.MonkeyPatch, kernel_layers, outside: Path, hostile
) -> None:
    """Without namespaces, Landlock (writes only under the working directory, no signal to and no
    ptrace of processes outside) and seccomp (no metadata changes) hold against ``posix``."""
    if "landlock" not in kernel_layers or "seccomp" not in kernel_layers:
        pytest.skip("Landlock (ABI 6+) or seccomp is not available here")
    monkeypatch.setattr(runner, "NAMESPACES", "off")
    monkeypatch.setenv(sb.WEAK_ENV, "1")
    canary, me = outside / "canary.txt", os.getpid()
    for code in (
        f"import posix\nfd = posix.open({str(canary)!r}, posix.O_WRONLY | posix.O_TRUNC)\nposix.write(fd, b'pwned')",
        f"import posix\nposix.unlink({str(canary)!r})",
        f"import _io\n_io.FileIO({str(outside / 'new.txt')!r}, 'w').write(b'x')",
        f"import posix\nposix.mkdir({str(outside / 'new')!r})",
        f"import posix\nposix.utime({str(canary)!r}, (0, 0))",
        f"import posix\nposix.chmod({str(canary)!r}, 0)",
        f"import posix\nposix.setxattr({str(canary)!r}, 'user.x', b'1')",
        f"import posix\nposix.kill({me}, 0)",  # signal 0: harmless even if it were delivered
        f"open('/proc/{me}/mem', 'rb')",
    ):
        out = hostile(code)
        assert out.status == "error" and out.reason == "PermissionError", (code, out)
        assert "landlock" in out.isolation and "pidns" not in out.isolation


# ---------------------------------------------------------------------------------------------
# host Unix-domain sockets: a network namespace does not hide them; seccomp refuses any socket
# ---------------------------------------------------------------------------------------------
def _unix_listeners(tmp_path: Path) -> list[tuple[str, socket.socket]]:
    paths = [str(tmp_path / "host.sock")]
    if os.access("/run", os.W_OK):
        paths.append(f"/run/cel_lens_test_{os.getpid()}.sock")
    out = []
    for path in paths:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(1)
        s.settimeout(0.3)
        out.append((path, s))
    return out


def test_host_unix_sockets_are_out_of_reach(mode: str, tmp_path: Path, hostile, kernel_layers) -> None:
    if "seccomp" not in kernel_layers:
        pytest.skip("no seccomp here: a host Unix-domain socket is reachable (documented)")
    listeners = _unix_listeners(tmp_path)
    try:
        for path, server in listeners:
            for code in (
                f"import _socket\ns = _socket.socket(_socket.AF_UNIX)\ns.connect({path!r})\ns.send(b'x')",
                f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.send(b'x')",
            ):
                out = hostile(code)
                assert out.status == "error" and out.reason == "PermissionError", (code, out)
            with pytest.raises(socket.timeout):
                server.accept()  # nothing reached the listener
    finally:
        for path, server in listeners:
            server.close()
            os.unlink(path)


# ---------------------------------------------------------------------------------------------
# memory of the whole process tree
# ---------------------------------------------------------------------------------------------
FORKED_ALLOCATIONS = """
import posix, time
kids = []
for i in range({n}):
    pid = posix.fork()
    if pid == 0:
        x = b'x' * ({mb} << 20)  # written, so resident
        time.sleep(0.5)
        posix._exit(0)
    kids.append(pid)
codes = [posix.waitpid(p, 0)[1] for p in kids]
assert codes == [0] * {n}, codes
"""


def test_memory_of_all_processes_together_is_capped(mode: str, kernel_layers) -> None:
    if "memory-cgroup" not in kernel_layers:
        pytest.skip("no memory cgroup here: memory_mb bounds each process only (documented)")
    # five children of 150 MB each stay under RLIMIT_AS (256 MB) one by one; together they do not fit
    out = sb.run(FORKED_ALLOCATIONS.format(n=5, mb=150), memory_mb=256, timeout=10, allow=True)
    assert out.status == "failed" and "AssertionError: [" in out.stderr, out  # some were OOM-killed
    assert ", 9" in out.stderr or "[9" in out.stderr, out.stderr  # SIGKILL, by the cgroup's OOM killer
    small = sb.run(FORKED_ALLOCATIONS.format(n=2, mb=60), memory_mb=256, timeout=5, allow=True)
    assert small.passed, small  # what fits still runs


# ---------------------------------------------------------------------------------------------
# a caller killed mid-run: nothing is left once the next caller starts
# ---------------------------------------------------------------------------------------------
CALLER = """
import sys
sys.path.insert(0, {repo!r})
from cel_lens.sandbox import runner
runner.NAMESPACES = {namespaces!r}
runner.run({code!r}, timeout={timeout}, allow=True, weak=True, tmp_root={root!r})
"""
DAEMON = (
    "import posix, time\n"
    "if posix.fork() == 0:\n"
    "    posix.setsid()\n"
    "    if posix.fork() == 0:\n"  # a daemon: its own session, its parent gone
    "        time.sleep(60)\n"
    "    posix._exit(0)\n"
    "time.sleep(60)\n"
)


@pytest.mark.slow
def test_killed_caller_leaves_nothing_after_the_next_start(mode: str, tmp_path: Path, kernel_layers, sandbox_processes) -> None:
    if mode == "guard-only" and "pids-cgroup" not in kernel_layers:
        pytest.skip("without namespaces or a cgroup, a daemonised process survives its caller (documented)")
    root = tmp_path / "sandboxes"
    root.mkdir()
    namespaces = "try" if mode == "namespaces" else "off"
    caller = subprocess.Popen([sys.executable, "-c", CALLER.format(
        repo=str(REPO), namespaces=namespaces, code=DAEMON, timeout=60, root=str(root))])
    deadline = time.monotonic() + 20
    while len(sandbox_processes(str(root))) < 4 and time.monotonic() < deadline:  # supervisor, program, 2 forks
        time.sleep(0.05)
    time.sleep(0.3)
    assert len(sandbox_processes(str(root))) >= 3 and list(root.iterdir()), "the sandbox did not start"
    assert cgroups.find(f"{cgroups.PREFIX}{caller.pid}-") or "pids-cgroup" not in kernel_layers
    caller.kill()
    caller.wait()
    # the next start: another caller runs a program under the same temporary root
    nxt = subprocess.run([sys.executable, "-c", CALLER.format(
        repo=str(REPO), namespaces=namespaces, code="pass", timeout=5, root=str(root))], timeout=60)
    assert nxt.returncode == 0
    time.sleep(0.2)
    assert sandbox_processes(str(root)) == [], "a sandbox process outlived its caller"
    assert list(root.iterdir()) == [], "the killed caller's temporary directory is still there"
    assert cgroups.find(f"{cgroups.PREFIX}{caller.pid}-") == [], "the killed caller's cgroups are still there"

"""Start the sandbox process, read its pipes as they fill, kill it on time (the parent's side).

The sandbox process is a fresh interpreter on :mod:`cel_lens.sandbox.child`, started with
``Popen`` and no ``preexec_fn`` (nothing Python-level runs in a copy of the caller, which may hold
a model), in a new session, with stdin ``/dev/null``, a minimal environment and no file
descriptor but its three pipes (stdout, stderr and the verdict pipe, see ``child``) and the two
sealed descriptors of its input (:func:`sealed`: the configuration, the tests). Only the
first ``output_limit`` bytes of stdout and stderr are kept (the rest is counted and dropped), so
a flood of output costs no memory. The wall clock starts when the supervisor reports ``ready``
(the program starts): ``timeout`` after that, or :data:`STARTUP_LIMIT` before it, the process
group and the run's cgroups are SIGKILLed; they are killed again when the process ends, before
it is reaped.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import selectors
import signal
import site
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from cel_lens.sandbox import cgroups as cg
from cel_lens.sandbox import frame

__all__ = ["STARTUP_LIMIT", "Finished", "execute"]

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
STARTUP_LIMIT = 15.0
"""Seconds the sandbox may take to start before the program's own clock begins (else ``error``)."""
_DRAIN_GRACE = 0.5  # seconds to collect output after the process ended
_STATUS_LIMIT = 1 << 16


@dataclass(frozen=True)
class Finished:
    """What came back from one sandbox process.

    ``events``: the supervisor's records (:mod:`cel_lens.sandbox.frame`), each a list of fields; ``killed``: ``"timeout"`` or
    ``"startup"`` when the parent killed it, else None; ``returncode`` and ``cpu``: the sandbox
    process's own exit code and CPU seconds.
    """

    events: list[list[str]]
    killed: Optional[str]
    returncode: Optional[int]
    cpu: float
    stdout: str
    stderr: str


class _Capped:
    """Keeps the first ``limit`` bytes written to it and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.kept = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = max(0, self.limit - self.kept)
        if room:
            self.parts.append(data[:room])
            self.kept += min(room, len(data))
        self.dropped += max(0, len(data) - room)

    def bytes(self) -> bytes:
        return b"".join(self.parts)

    def text(self) -> str:
        s = self.bytes().decode("utf-8", errors="replace")
        if self.dropped:
            s += f"\n[cel_lens.sandbox: {self.dropped} more bytes dropped]"
        return s


def child_env(workdir: str) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the caller's (no tokens, no secrets)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    return env


def site_paths() -> list[str]:
    """site-packages of this environment (the sandbox runs with ``-S``, so it adds them itself)."""
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    return [p for p in sys.path if p in paths] or paths


def sealed(name: str, data: object) -> int:
    """A descriptor holding ``data`` (marshal: plain types only, loads faster than json) that no path
    names: a memfd, sealed against every change, or (without memfd) a pipe filled by a thread.

    Private input (the program, the tests with their expected values) reaches the sandbox only so,
    inherited: nothing of it is ever a file under the temporary root, which the program of a
    concurrent run can read (it sees the host's file system, read-only)."""
    payload = marshal.dumps(data)
    try:
        fd = os.memfd_create(f"cel_lens_{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        return _pipe_of(payload)
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _pipe_of(payload: bytes) -> int:
    """The read end of a pipe a daemon thread fills with ``payload`` and closes."""
    r, w = os.pipe2(os.O_CLOEXEC)

    def fill() -> None:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        except OSError:
            pass  # the sandbox ended before reading it all
        finally:
            os.close(w)

    threading.Thread(target=fill, name="cel_lens_sandbox_input", daemon=True).start()
    return r


def execute(config: dict, tests: list, workdir: str, timeout: float, output_limit: int,
            cgroups: Sequence[tuple[str, str]]) -> Finished:
    """Run the sandbox process on ``config`` and collect what it says (see the module docstring).

    ``config`` and ``tests`` reach it as inherited descriptors (:func:`sealed`), closed here once
    it started; the supervisor reads the configuration at once and the tests only after the
    program's process has forked (which never holds them): the expected values never enter the
    program's memory, and no other process finds them by a path.
    """
    verdict_r, verdict_w = os.pipe()
    config_fd = sealed("config", {**config, "verdict_fd": verdict_w})
    tests_fd = sealed("tests", tests)
    try:
        proc = subprocess.Popen(
            # the working directory names the run in the process list (its processes are found by it)
            [sys.executable, "-I", "-S", "-B", CHILD, str(config_fd), str(tests_fd), workdir],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=child_env(workdir), start_new_session=True,
            pass_fds=(verdict_w, config_fd, tests_fd), close_fds=True,
        )
    except OSError as exc:
        os.close(verdict_r)
        return Finished([["setup-error", f"could not start the sandbox: {exc}"]], None, None, 0.0, "", "")
    finally:
        for fd in (verdict_w, config_fd, tests_fd):
            os.close(fd)
    pump = _Pump(proc, verdict_r, output_limit, list(cgroups))
    try:
        pump.loop(timeout)
    finally:
        rc, cpu = pump.close()
    # records cut at their lengths only (frame.py): nothing the program writes can start one
    return Finished(frame.unpack(pump.status.bytes()), pump.killed, rc, cpu, pump.out.text(), pump.err.text())


class _Pump:
    """Reads the sandbox's pipes without blocking and enforces the start-up and wall-clock limits."""

    def __init__(self, proc: subprocess.Popen, verdict_r: int, output_limit: int,
                 cgroups: list[tuple[str, str]]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc, self.verdict_r, self.cgroups = proc, verdict_r, cgroups
        self.out, self.err, self.status = _Capped(output_limit), _Capped(output_limit), _Capped(_STATUS_LIMIT)
        self.streams = {proc.stdout.fileno(): self.out, proc.stderr.fileno(): self.err, verdict_r: self.status}
        self.sel = selectors.DefaultSelector()
        for fd in self.streams:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.pidfd: Optional[int]
        try:
            self.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            self.pidfd = None  # no pidfd: poll for the exit
        self.killed: Optional[str] = None
        self.ready_at: Optional[float] = None
        self.exited_at: Optional[float] = None

    def kill_all(self) -> None:
        """The process group, and the cgroups (which nothing can leave)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        cg.kill(self.cgroups)

    def has_exited(self) -> bool:  # without reaping: the group id stays ours until wait4 in close
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def loop(self, timeout: float) -> None:
        """Read until the process has ended and its pipes are closed (or the drain grace is over)."""
        start = time.monotonic()
        open_fds = set(self.streams)
        while open_fds or self.exited_at is None:
            now = time.monotonic()
            if self.exited_at is not None:
                deadline = self.exited_at + _DRAIN_GRACE
            else:
                deadline = start + STARTUP_LIMIT if self.ready_at is None else self.ready_at + timeout
            if now >= deadline:
                if self.exited_at is not None:
                    break  # a process outside the group still holds a pipe: stop reading
                self.killed = "timeout" if self.ready_at is not None else "startup"
                self.kill_all()
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
                self.exited_at = time.monotonic()
                continue
            wait = deadline - now if self.pidfd is not None else min(deadline - now, 0.02)
            for key, _ in self.sel.select(timeout=wait):
                self.read(key.fd, open_fds)
            if self.pidfd is None and self.exited_at is None and self.has_exited():
                self.exited_at = time.monotonic()
                self.kill_all()

    def read(self, fd: int, open_fds: set[int]) -> None:
        """Take what ``fd`` holds; note the exit, the program's start and closed pipes."""
        if fd == self.pidfd:
            self.sel.unregister(fd)
            self.exited_at = time.monotonic()
            self.kill_all()  # whatever it left behind
            return
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(fd)
            open_fds.discard(fd)
            return
        self.streams[fd].add(data)
        if fd == self.verdict_r and self.ready_at is None and frame.unpack(self.status.bytes())[:1] \
                and frame.unpack(self.status.bytes())[0][0] == "ready":
            self.ready_at = time.monotonic()

    def close(self) -> tuple[Optional[int], float]:
        """Kill what is left, reap the process, close every descriptor; its exit code and CPU."""
        self.kill_all()  # the leader is not reaped yet, so its group id cannot be reused
        self.sel.close()
        _, wstatus, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(wstatus)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        os.close(self.verdict_r)
        if self.pidfd is not None:
            os.close(self.pidfd)
        return self.proc.returncode, usage.ru_utime + usage.ru_stime

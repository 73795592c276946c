"""Cross-process kernel objects are refused in both modes: SysV shared memory, semaphores and
message queues, POSIX message queues, file locks and leases on the files every run can read, and
inotify watches. In the guard-only mode such objects lived on the host after the run (32 MiB of
shared memory stayed allocated) and a later run could read them: a channel between runs."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from cel_lens import sandbox as sb

PROGRAM = r'''
import sys
for name in ("ctypes", "_ctypes"):
    sys.modules.pop(name, None)  # the guard blocks the import; this program undoes it on purpose
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
results = {}

def call(name, *args):
    ctypes.set_errno(0)
    value = getattr(libc, name)(*args)
    results[name] = (value, ctypes.get_errno())

IPC_CREAT = 0o1000
call("shmget", KEY, 32 << 20, IPC_CREAT | 0o600)
call("msgget", KEY, IPC_CREAT | 0o600)
call("semget", KEY, 1, IPC_CREAT | 0o600)
call("mq_open", QUEUE, os.O_CREAT | os.O_RDWR, 0o600, None)
call("inotify_init1", 0)
fd = os.open(sys.executable, os.O_RDONLY)  # a file every run can read
for name, lock in (("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
                   ("F_SETLK", lambda: fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))),
                   ("F_OFD_SETLK", lambda: fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))),
                   ("F_GETLK", lambda: fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)))):
    try:
        lock()
        results[name] = (0, 0)
    except OSError as exc:
        results[name] = (-1, exc.errno)
results["F_GETFL"] = (fcntl.fcntl(fd, fcntl.F_GETFL) >= 0, 0)  # other fcntl commands still work
print(results)
'''


def _host_objects(key: int) -> list[str]:
    """The host's SysV objects of ``key`` (from /proc/sysvipc, the key in decimal)."""
    found = []
    for kind in ("shm", "msg", "sem"):
        path = Path("/proc/sysvipc") / kind
        if path.exists():
            for line in path.read_text().splitlines()[1:]:
                if line.split() and line.split()[0] == str(key):
                    found.append(f"{kind}: {line.split()[1]}")
    return found


def test_kernel_objects_are_refused(mode, tmp_path):
    key = random.randrange(1 << 20, 1 << 30)
    queue = f"/cel_lens_test_{key}".encode()
    code = PROGRAM.replace("KEY", str(key)).replace("QUEUE", repr(queue))
    try:
        out = sb.run(code, timeout=5.0, allow=True, tmp_root=str(tmp_path))
        assert out.status == "passed", out
        results = eval(out.stdout)  # noqa: S307 - the dict this test's own program printed
        for name in ("shmget", "msgget", "semget", "mq_open", "inotify_init1", "flock", "F_SETLK", "F_OFD_SETLK", "F_GETLK"):
            assert results[name] == (-1, 1), (name, results[name])  # EPERM
        assert results["F_GETFL"][0] is True
        assert _host_objects(key) == []
        assert not Path("/dev/mqueue", queue.decode().lstrip("/")).exists()
    finally:  # what the sandbox of old left on the host
        for kind, flag in (("shm", "-M"), ("msg", "-Q"), ("sem", "-S")):
            subprocess.run(["ipcrm", flag, str(key)], capture_output=True)


OTHER_PROCESS = r'''
import sys
sys.modules.pop("resource", None)  # the guard blocks the import; this program undoes it on purpose
import os, resource
results = {}

def attempt(name, call):
    try:
        call()
        results[name] = "done"
    except OSError as exc:
        results[name] = exc.errno

attempt("prlimit", lambda: resource.prlimit(PID, resource.RLIMIT_NOFILE, (7, 7)))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, PID, 19))
attempt("sched_setaffinity", lambda: os.sched_setaffinity(PID, {0}))
attempt("sched_setscheduler", lambda: os.sched_setscheduler(PID, os.SCHED_IDLE, os.sched_param(0)))
# on itself, the same calls still work
attempt("own prlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))
attempt("own nice", lambda: os.nice(1))
attempt("own affinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
print(results)
'''


def test_other_processes_limits_priority_and_cpus_are_out_of_reach(mode, tmp_path):
    """A process of the same user (the caller, a concurrent run) keeps its limits, priority and CPU
    set: in the guard-only mode a program lowered the caller's RLIMIT_NOFILE to 7 (and could renice
    or pin it); the calls now act on the program's own process only."""
    import resource

    other = subprocess.Popen(["sleep", "30"])
    try:
        before = (resource.prlimit(other.pid, resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, other.pid),
                  os.sched_getaffinity(other.pid), os.sched_getscheduler(other.pid))
        out = sb.run(OTHER_PROCESS.replace("PID", str(other.pid)), timeout=5.0, allow=True, tmp_root=str(tmp_path))
        assert out.status == "passed", out
        results = eval(out.stdout)  # noqa: S307 - the dict this test's own program printed
        after = (resource.prlimit(other.pid, resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, other.pid),
                 os.sched_getaffinity(other.pid), os.sched_getscheduler(other.pid))
        assert after == before
        for name in ("prlimit", "setpriority", "sched_setaffinity", "sched_setscheduler"):
            assert results[name] in (1, 3), (name, results)  # EPERM (ESRCH in a PID namespace: not visible)
        assert results["own prlimit"] == results["own nice"] == results["own affinity"] == "done", results
    finally:
        other.kill()
        other.wait()

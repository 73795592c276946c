"""Run untrusted generated code (MBPP completions) in isolated, limited, throw-away processes.

Linux only. Running model-generated code needs an explicit opt-in: ``CEL_LENS_ALLOW_CODE_EXECUTION=1`` in the
environment, ``allow=True``, or ``--allow-code-execution`` on the command line. Without it,
:func:`run` raises :class:`CodeExecutionNotAllowed` before anything runs.

How one program runs (:func:`run`)
----------------------------------
* A **fresh interpreter** (``sys.executable -I -S -B`` on this file; the standard library and the
  environment's site-packages are importable, ``.pth`` hooks are not run) is started with
  ``Popen`` and no ``preexec_fn``, so nothing Python-level runs in a copy of the calling process
  (which may hold a model), and the child inherits no file descriptor but its pipes. It starts a
  **new session**; its whole process group is SIGKILLed on timeout and again when it ends, before
  it is reaped. stdin is ``/dev/null``; the environment is a minimal one (no tokens or secrets of
  the caller).
* As root, the parent makes a **pids cgroup** per program (``pids.max`` = ``max_processes`` + 2;
  cgroup v1 ``/sys/fs/cgroup/pids`` or v2 with the pids controller) that the child joins first:
  it bounds the number of processes even for uid 0 (whom ``RLIMIT_NPROC`` does not bind), and
  the parent kills every process in it when the program ends, even one that left the process
  group; the cgroup is removed afterwards (*pids-cgroup*).
* The child then tries to ``unshare`` new **PID, network, mount and IPC namespaces** (directly
  as root; through a user namespace otherwise, *userns*). Where that works:

  - *pidns*: the program runs as PID 1 of its own namespace: it cannot see or signal any
    process outside (``os.getppid()`` is 0), and when it ends or is killed every process it
    started dies with it, even one that left the process group. A private ``/proc`` is mounted.
  - *netns*: a network namespace with no interface up: no connection, not even to localhost
    (abstract Unix sockets of the host are out of reach too). *ipcns*: no SysV IPC of the host.
  - *fs:read-only*: every mount is made read-only, ``nosuid`` and ``nodev`` (so no device node,
    e.g. a raw disk, can be opened), and a private **tmpfs** (4 x ``file_size_mb``) is mounted
    on the temporary working directory, so files the program writes live in memory and vanish
    with it.
  - *caps:dropped*: all capabilities, the bounding and ambient sets are dropped and
    ``no_new_privs`` is set, so a process running as root cannot undo the mounts, load modules
    or regain privileges through ``execve``.

  Where namespaces are not permitted (e.g. a container whose seccomp profile forbids
  ``unshare``), the program runs with the Python-level guard below only, and ``socket`` is
  disabled in Python instead of by the kernel. :attr:`Outcome.isolation` (and :func:`isolation`)
  names the layers that applied: ``process``, ``rlimits``, ``guard`` always; ``pids-cgroup``,
  ``userns``, ``pidns``, ``netns``, ``ipcns``, ``fs:read-only``, ``tmpfs``, ``proc:private``,
  ``caps:dropped`` where they worked; ``net:socket-patched`` without namespaces.
* **Resource limits** (``setrlimit``, hard = soft): ``RLIMIT_AS`` = ``memory_mb``,
  ``RLIMIT_CPU`` = ``ceil(timeout) + 1`` s, ``RLIMIT_NPROC`` (``max_processes`` more than the
  user already runs), ``RLIMIT_FSIZE`` = ``file_size_mb``, ``RLIMIT_NOFILE`` = ``max_open_files``,
  ``RLIMIT_CORE`` = 0. The wall-clock ``timeout`` (default 3 s, counted from the moment the
  program starts, after interpreter start-up) is enforced by the parent.
* A **guard** in the spirit of human-eval's ``reliability_guard`` (all of it, plus more): ``os``
  functions that kill, fork, exec, spawn, delete, rename, chmod/chown, change directory, user or
  session are set to ``None``, as are ``subprocess``'s entry points and the destructive
  ``shutil`` functions; ``exit``/``quit``/``help`` are ``None``; ``ctypes``, ``resource``,
  ``psutil``, ``multiprocessing`` and a few other modules cannot be imported;
  ``open``/``io.open``/``os.open`` refuse to write outside the working directory;
  ``faulthandler`` is off. One deviation: human-eval sets ``os.getcwd`` to ``None``, which breaks
  ``os.path.abspath`` and ``tempfile``; here it returns the (fixed) working directory. As in
  human-eval (and so in lm-eval's MBPP), ``os.putenv`` is ``None``, so packages that call it on
  import (e.g. numpy 2) cannot be imported.
* **Output** on stdout and stderr is read as it comes and only the first ``output_limit`` bytes
  of each are kept (the rest is counted and dropped), so a flood of output costs no memory.
* **Passing** means the program ran *to its end*: after its last statement the sandbox writes a
  per-run random nonce on a separate pipe (so ``sys.exit(0)``, ``os._exit(0)``, a signal or a
  crash before the asserts never passes), and a program built by :func:`check_program` must also
  have reached its sentinel call after the asserts. An ``AssertionError`` is ``failed``; the wall
  clock or the CPU limit is ``timeout``; anything else (another exception, ``SystemExit``, a
  signal, ``MemoryError``, a syntax error) is ``error``.
* The temporary working directory is deleted afterwards.

What is *not* contained
-----------------------
This is a box for code that is careless, not a security boundary against code written to escape
it (use a VM or gVisor for that). In particular:

* The Python-level guard can be undone by the program itself (``import posix``, ``_io.FileIO``,
  ``importlib`` tricks); the nonce can be found by a program that inspects its own interpreter.
  Only the kernel layers (namespaces, read-only mounts, dropped capabilities, rlimits, the pids
  cgroup, the kill of the process group) hold against deliberate code.
* The program can **read** every file its user can read (as root: everything, e.g. ``/root``)
  and print it into the captured output. With *netns* it cannot send it anywhere.
* As root without a pids cgroup (no writable cgroup hierarchy), the number of processes is not
  bounded (the kernel exempts uid 0 from ``RLIMIT_NPROC``): a fork bomb that bypasses the guard
  (``posix.fork``) runs until the timeout kills the PID namespace (without it: the process
  group). CPU time, memory bandwidth and the page cache are shared with the host;
  ``RLIMIT_AS`` bounds each process, not the sum over its processes.
* Without namespaces: no kernel-level network cut (only ``socket`` is patched), files outside the
  working directory are protected only by the guard and by file permissions, the host's
  processes are visible, and, without a pids cgroup too, a process that leaves the process group
  (``posix.setsid``) survives the kill until its CPU limit.
* Timing side channels and kernel bugs are out of scope.

Layout of this file: the code of the sandbox process comes first and the file stops there when it
runs as that process, so it never imports what only the parent needs (start-up is paid once per
program); the public API (:func:`run`, :func:`run_many`, :class:`Outcome`, ...) follows.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time: the sandbox process starts faster
if TYPE_CHECKING:
    import ctypes
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable

    _Patch = Callable[[ModuleType], None]

__all__ = [
    "ALLOW_ENV",
    "SENTINEL",
    "CodeExecutionNotAllowed",
    "Outcome",
    "check_allowed",
    "check_program",
    "isolation",
    "run",
    "run_many",
]

ALLOW_ENV = "CEL_LENS_ALLOW_CODE_EXECUTION"
"""Environment variable that opts in to running generated code (value ``1``)."""

_SENTINEL_NAME = "__cel_lens_end__"
SENTINEL = f"{_SENTINEL_NAME}()"
"""Statement :func:`check_program` puts after the asserts; the program passes only if it ran."""


# ---------------------------------------------------------------------------------------------
# the sandbox process: ``python -I -S -B sandbox.py CONFIG`` (standard library only, imported late)
# ---------------------------------------------------------------------------------------------
_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture with the generic syscall table
_SIGKILL = 9  # the signal module is not imported here: it costs start-up time
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# What the guard sets to None: human-eval's reliability_guard, plus exec/spawn/session/link.
_GUARDED_OS = (
    "kill", "killpg", "system", "popen", "putenv", "remove", "removedirs", "rmdir", "fchdir",
    "setuid", "seteuid", "setgid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setsid", "setpgid", "setpgrp", "fork", "forkpty", "rename", "renames",
    "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags",
    "lchmod", "lchown", "chflags", "chdir", "link", "symlink", "mkfifo", "mknod",
    "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl",
    "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
    "posix_spawnp", "plock",
)
_GUARDED_SHUTIL = ("rmtree", "move", "chown")
_GUARDED_SUBPROCESS = (
    "Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput",
)
_BLOCKED_MODULES = (
    "ipdb", "joblib", "resource", "psutil", "tkinter", "ctypes", "_ctypes", "multiprocessing", "pty",
)


class _PatchOnImport:
    """A meta-path finder that patches a module right after it is first imported.

    The guard must reach ``subprocess``, ``shutil`` and ``socket``, but importing them up front
    would cost every program tens of milliseconds of start-up; most programs never import them.
    """

    def __init__(self, patches: dict[str, _Patch]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.patches[name])  # type: ignore[assignment]
                return spec
        return None


class _PatchingLoader:
    """Wraps a module's loader: runs the module, then applies the patch."""

    def __init__(self, loader: Any, patch: _Patch) -> None:
        self.loader, self.patch = loader, patch

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)


def _reliability_guard(workdir: str, patch_socket: bool) -> None:
    """Disable destructive Python-level calls (a superset of human-eval's ``reliability_guard``)."""
    import builtins
    import errno
    import faulthandler
    import io

    faulthandler.disable()
    real_open, real_os_open = builtins.open, os.open
    normpath, isabs, join, fspath = os.path.normpath, os.path.isabs, os.path.join, os.fspath
    inside = workdir.rstrip(os.sep) + os.sep

    def check_inside(path: Any) -> None:
        p = fspath(path)
        if isinstance(p, bytes):
            p = p.decode("utf-8", "surrogateescape")
        p = normpath(p if isabs(p) else join(workdir, p))
        if p != workdir and not p.startswith(inside):
            raise PermissionError(errno.EACCES, "writing outside the sandbox directory is disabled", p)

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, int) and any(c in mode for c in "wax+"):
            check_inside(file)
        return real_open(file, mode, *args, **kwargs)

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def guarded_os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if flags & write_flags:
            if dir_fd is not None:
                raise PermissionError(errno.EACCES, "os.open with dir_fd is disabled", path)
            check_inside(path)
        return real_os_open(path, flags, mode)

    def no_network(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "network access is disabled in the cel_lens sandbox")

    def guard_socket(socket: Any) -> None:
        socket.socket.__init__ = no_network
        for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
            setattr(socket, name, no_network)

    def disable(names: tuple[str, ...]) -> _Patch:
        def patch(module: ModuleType) -> None:
            for name in names:
                if hasattr(module, name):
                    setattr(module, name, None)

        return patch

    builtins.open = guarded_open
    io.open = guarded_open  # type: ignore[assignment]
    os.open = guarded_os_open
    builtins.exit = None  # type: ignore[assignment]
    builtins.quit = None  # type: ignore[assignment]
    builtins.help = None  # type: ignore[assignment]
    disable(_GUARDED_OS)(os)
    # human-eval sets getcwd to None too, which breaks os.path.abspath and tempfile; with chdir
    # disabled the working directory is fixed, so report it instead
    os.getcwd = lambda: workdir
    os.getcwdb = lambda: os.fsencode(workdir)

    patches: dict[str, _Patch] = {
        "subprocess": disable(_GUARDED_SUBPROCESS), "shutil": disable(_GUARDED_SHUTIL),
    }
    if patch_socket:
        patches["socket"] = guard_socket
    for name, patch in list(patches.items()):
        if name in sys.modules:  # already imported: patch it now
            patch(sys.modules[name])
            del patches[name]
    sys.meta_path.insert(0, _PatchOnImport(patches))  # type: ignore[arg-type]  # duck-typed finder
    for name in _BLOCKED_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]


def _tasks_of_user(uid: int) -> int:
    """How many tasks (threads included) ``uid`` runs now; ``RLIMIT_NPROC`` counts them all."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields.get("Threads", "1"))
        except (OSError, KeyError, ValueError):
            continue
    return count


def _runner_main(config_path: str) -> None:  # pragma: no cover - runs in the sandbox process
    """Entry of the sandbox process: isolate, limit, guard, run the program, report on a pipe."""
    import ctypes
    import marshal

    with open(config_path, "rb") as f:
        cfg = marshal.load(f)
    os.unlink(config_path)
    sys.path.extend(cfg["site_paths"])
    status_fd: int = cfg["status_fd"]
    prefix = (cfg["nonce"] + " ").encode()
    write = os.write

    def report(msg: str) -> None:
        try:
            write(status_fd, prefix + msg.encode() + b"\n")
        except OSError:
            pass

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != cfg["parent_pid"]:
        os._exit(3)  # the parent is gone already
    layers = ["process", "rlimits", "guard"]
    if cfg["cgroup"]:  # join the pids cgroup the parent made: bounds processes even for root
        try:
            with open(os.path.join(cfg["cgroup"], "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
            layers.append("pids-cgroup")
        except OSError:
            pass
    namespaces = cfg["namespaces"] != "off" and _unshare(libc, layers)
    if cfg["namespaces"] == "require" and not namespaces:
        report(f"setup-error namespaces required but unshare failed: {os.strerror(ctypes.get_errno())}")
        os._exit(4)
    if namespaces:
        _isolate_files(libc, cfg["workdir"], 4 * cfg["file_size_bytes"], layers)
        _become_init(libc, report, layers)
    else:
        layers.append("net:socket-patched")
    try:
        _set_limits(cfg)
    except (OSError, ValueError) as err:
        report(f"setup-error rlimits: {err}")
        os._exit(4)
    if namespaces or os.geteuid() == 0:
        _drop_capabilities(libc, layers)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _run_program(cfg["source"], cfg["workdir"], report, layers, patch_socket=not namespaces)


def _unshare(libc: ctypes.CDLL, layers: list[str]) -> bool:
    """New PID, network, mount and IPC namespaces; through a user namespace when unprivileged."""
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC
    if libc.unshare(flags) != 0:
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(flags | _CLONE_NEWUSER) != 0:
            return False
        layers.append("userns")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            try:
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
            except OSError:
                pass
    layers += ["pidns", "netns", "ipcns"]
    return True


def _isolate_files(libc: ctypes.CDLL, workdir: str, tmpfs_bytes: int, layers: list[str]) -> None:
    """Make every mount read-only, nosuid, nodev and private; put a tmpfs on the working directory."""
    import ctypes

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, _MS_PRIVATE, 0)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), b"/", ctypes.c_uint(_AT_RECURSIVE),
        ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
    ) == 0:
        layers.append("fs:read-only")
    else:  # at least keep our mounts from propagating to the host
        libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None)
    if libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                  f"size={tmpfs_bytes},mode=0700".encode()) == 0:
        os.chdir(workdir)  # enter the tmpfs that now covers the directory
        layers.append("tmpfs")


def _become_init(libc: ctypes.CDLL, report: Callable[[str], None], layers: list[str]) -> None:
    """Fork PID 1 of the new PID namespace and return in it; the parent waits, reports, exits alike."""
    import ctypes

    init_pid = os.fork()
    if init_pid:
        _, wstatus, usage = os.wait4(init_pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        if os.WIFSIGNALED(wstatus):
            report(f"child signal {os.WTERMSIG(wstatus)} {cpu:.3f}")
            os._exit(128 + os.WTERMSIG(wstatus))
        report(f"child exit {os.WEXITSTATUS(wstatus)} {cpu:.3f}")
        os._exit(os.WEXITSTATUS(wstatus))
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    flags = ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if libc.mount(b"proc", b"/proc", b"proc", flags, None) == 0:
        layers.append("proc:private")


def _set_limits(cfg: dict) -> None:
    """Hard resource limits (soft = hard, so the program cannot raise them)."""
    import resource

    nproc = cfg["max_processes"]
    if os.geteuid() != 0:
        nproc += _tasks_of_user(os.getuid())
    for which, value in (
        (resource.RLIMIT_AS, cfg["memory_bytes"]),
        (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, cfg["file_size_bytes"]),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _drop_capabilities(libc: ctypes.CDLL, layers: list[str]) -> None:
    """Drop every capability, the bounding and ambient sets: root can no longer remount or execve back."""
    import ctypes

    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)()) == 0:
        layers.append("caps:dropped")


def _run_program(source: str, workdir: str, report: Callable[[str], None], layers: list[str], patch_socket: bool) -> None:
    """Guard, run the program as ``__main__``, report how it ended, exit."""
    import builtins

    write, exit_now = os.write, os._exit
    filename = os.path.join(workdir, "program.py")
    reached_end: list[bool] = []

    def end() -> None:
        if not reached_end:
            reached_end.append(True)
            report("end")

    program_globals = {"__name__": "__main__", "__builtins__": builtins, _SENTINEL_NAME: end}
    stdout, stderr = sys.stdout, sys.stderr

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr, stdout, stderr):
            try:
                stream.flush()
            except Exception:
                pass

    _reliability_guard(workdir, patch_socket=patch_socket)
    report("ready " + " ".join(layers))
    try:
        exec(compile(source, filename, "exec"), program_globals)
    except SystemExit as exc:
        flush()
        report(f"exit {exc.code!r}")
        exit_now(1)
    except BaseException as exc:  # noqa: BLE001 - how the program failed is the result
        name = "AssertionError" if isinstance(exc, AssertionError) else type(exc).__name__
        report(f"raised {name}")
        flush()
        program_globals.clear()  # free what the program held before formatting
        try:
            import linecache
            import traceback

            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            text = "".join(traceback.format_exception(type(exc), exc, tb))
        except BaseException:  # noqa: BLE001 - e.g. MemoryError: say at least what it was
            text = f"{type(exc).__name__}\n"
        try:
            write(2, text.encode("utf-8", "replace")[-4096:])
        except OSError:
            pass
        exit_now(1)
    flush()
    report("done")
    exit_now(0)


# The sandbox process runs this file as a script and stops here.
if __name__ == "__main__":  # pragma: no cover
    _runner_main(sys.argv[1])


# ---------------------------------------------------------------------------------------------
# public API (the parent side)
# ---------------------------------------------------------------------------------------------
import marshal  # noqa: E402 - below the sandbox process's entry on purpose (see the docstring)
import math  # noqa: E402
import secrets  # noqa: E402
import selectors  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import site  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Literal, Optional, Sequence  # noqa: E402

Status = Literal["passed", "failed", "timeout", "error"]

# Defaults: generous for MBPP-style solutions, small enough to run many at once.
DEFAULT_MEMORY_MB = 1024
DEFAULT_OUTPUT_LIMIT = 8192
DEFAULT_FILE_SIZE_MB = 16
DEFAULT_MAX_PROCESSES = 32
DEFAULT_MAX_OPEN_FILES = 64
STARTUP_LIMIT = 15.0
"""Seconds the sandbox may take to start before the program's own clock begins (else ``error``)."""
_DRAIN_GRACE = 0.5  # seconds to collect output after the process ended
_STATUS_LIMIT = 1 << 16

# "try": use namespaces where permitted; "off": guard only (tests use it to exercise that path);
# "require": refuse to run the program without them (tests of programs that bypass the guard).
_NAMESPACES: Literal["try", "off", "require"] = "try"
_USE_CGROUP = True  # a pids cgroup per program where this process may make one (root)


class CodeExecutionNotAllowed(RuntimeError):
    """Raised when generated code would run without the explicit opt-in."""


def check_allowed(allow: Optional[bool] = None) -> None:
    """Raise :class:`CodeExecutionNotAllowed` unless running generated code was opted in to.

    ``allow=True`` opts in; ``allow=None`` defers to ``$CEL_LENS_ALLOW_CODE_EXECUTION``;
    ``allow=False`` refuses even when the variable is set. Call it early (before generating) to
    fail fast.
    """
    if allow is None:
        allow = os.environ.get(ALLOW_ENV, "") == "1"
    if not allow:
        raise CodeExecutionNotAllowed(
            "running model-generated code is disabled because it may be destructive; read what "
            "cel_lens.sandbox does and does not contain, then opt in with "
            f"{ALLOW_ENV}=1, allow=True, or --allow-code-execution"
        )


@dataclass(frozen=True)
class Outcome:
    """How one program ended.

    ``status`` is ``passed`` (ran to its end), ``failed`` (an ``AssertionError``), ``timeout``
    (wall clock or CPU limit) or ``error`` (anything else); ``reason`` says what in a few words.
    ``stdout``/``stderr`` hold at most ``output_limit`` bytes each (decoded), with a note when
    cut. ``returncode`` is the program's exit code (negative: killed by that signal; ``None``:
    killed by the sandbox). ``duration`` is wall seconds from start to reaping. ``isolation``
    names the layers that applied (see the module docstring).
    """

    status: Status
    reason: str
    stdout: str
    stderr: str
    returncode: Optional[int]
    duration: float
    isolation: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True iff the program ran to its end (so every assert in it held)."""
        return self.status == "passed"


def check_program(code: str, test_setup_code: str, tests: Sequence[str]) -> str:
    """The program MBPP runs: generated code, the problem's setup, its asserts, then the sentinel.

    The setup goes after the code because MBPP's setup code uses names the solution defines
    (tasks 367 and 927 build trees of the solution's ``Node`` class).
    """
    parts = [code.rstrip(), test_setup_code.rstrip(), *(t.rstrip() for t in tests), SENTINEL]
    return "\n".join(p for p in parts if p) + "\n"


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


def _child_env(workdir: str) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    return env


def _site_paths() -> list[str]:
    """site-packages of this environment (the sandbox runs with ``-S``, so it adds them itself)."""
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    return [p for p in sys.path if p in paths] or paths


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_CGROUP_BASES = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")  # cgroup v1 pids hierarchy, then v2


def _make_pids_cgroup(name: str, limit: int) -> Optional[str]:
    """A fresh cgroup allowing ``limit`` processes, where this process may make one (root), else None.

    ``RLIMIT_NPROC`` does not bind uid 0; a pids cgroup does. It also lets the parent find and
    kill every process of the sandbox, even one that left its process group.
    """
    if os.geteuid() != 0:
        return None
    for base in _CGROUP_BASES:
        try:
            if base == "/sys/fs/cgroup":
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if "pids" not in f.read().split():
                        continue
            elif not os.path.isfile(os.path.join(base, "cgroup.procs")):
                continue
            path = os.path.join(base, name)
            os.mkdir(path, 0o755)
        except OSError:
            continue
        try:
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(limit))
            return path
        except OSError:
            _remove_cgroup(path)
    return None


def _kill_cgroup(path: str) -> int:
    """SIGKILL every process in the cgroup ``path``; how many there were."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(p) for p in f.read().split()]
    except OSError:
        return 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(pids)


def _remove_cgroup(path: str) -> None:
    """Kill whatever is still in the sandbox's cgroup, then remove it."""
    for _ in range(100):
        if not _kill_cgroup(path):
            break
        time.sleep(0.005)
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:  # the last killed processes are still exiting
            time.sleep(0.005)


def run(
    code: str,
    timeout: float = 3.0,
    memory_mb: int = DEFAULT_MEMORY_MB,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    *,
    allow: Optional[bool] = None,
    file_size_mb: int = DEFAULT_FILE_SIZE_MB,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    tmp_root: Optional[str] = None,
) -> Outcome:
    """Run ``code`` as a program in a fresh, limited, isolated interpreter and say how it ended.

    ``timeout`` is the program's wall-clock seconds (interpreter start-up excluded);
    ``memory_mb`` its address-space limit; ``output_limit`` the bytes kept of stdout and of
    stderr; ``tmp_root`` where its temporary working directory is made (default: the system's).
    Requires the opt-in (see :func:`check_allowed`).
    """
    check_allowed(allow)
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"cel_lens.sandbox runs generated code on Linux only, not on {sys.platform}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if memory_mb < 64:
        raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {memory_mb}")
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="cel_lens_sandbox_", dir=tmp_root))
    nonce = secrets.token_hex(16)
    # the sandbox's own processes (2 with namespaces) come on top of the program's
    cgroup = _make_pids_cgroup(f"cel_lens_sandbox_{nonce}", max_processes + 2) if _USE_CGROUP else None
    try:
        cpu_limit = int(math.ceil(timeout)) + 1
        config = {
            "nonce": nonce, "parent_pid": os.getpid(), "workdir": workdir, "source": code,
            "site_paths": _site_paths(), "namespaces": _NAMESPACES, "cgroup": cgroup,
            "memory_bytes": memory_mb << 20, "cpu_seconds": cpu_limit,
            "file_size_bytes": file_size_mb << 20, "max_processes": max_processes,
            "max_open_files": max_open_files,
        }
        start = time.monotonic()
        events, killed, rc, cpu, out, err = _execute(workdir, config, timeout, output_limit)
        return _classify(
            events, needs_sentinel=SENTINEL in code, killed=killed, leader_rc=rc, leader_cpu=cpu,
            cpu_limit=cpu_limit, timeout=timeout, stdout=out, stderr=err,
            duration=time.monotonic() - start,
        )
    finally:
        if cgroup is not None:
            _remove_cgroup(cgroup)
        shutil.rmtree(workdir, ignore_errors=True)


def _execute(
    workdir: str, config: dict, timeout: float, output_limit: int
) -> tuple[list[list[str]], Optional[str], Optional[int], float, str, str]:
    """Start the sandbox process, collect its output and reports, kill it on timeout.

    Returns (status events, why the sandbox killed it or None, the leader's exit code, its CPU
    seconds, stdout, stderr).
    """
    status_r, status_w = os.pipe()
    config = {**config, "status_fd": status_w}
    config_path = os.path.join(workdir, ".cel_lens_config")
    with os.fdopen(os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        marshal.dump(config, f)  # plain types only; loads faster in the child than json
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), config_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=_child_env(workdir), start_new_session=True,
            pass_fds=(status_w,), close_fds=True,
        )
    except OSError as exc:
        os.close(status_r)
        return [["setup-error", f"could not start the sandbox: {exc}"]], None, None, 0.0, "", ""
    finally:
        os.close(status_w)
    assert proc.stdout is not None and proc.stderr is not None

    out, err, status = _Capped(output_limit), _Capped(output_limit), _Capped(_STATUS_LIMIT)
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, status_r: status}
    sel = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd: Optional[int]
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None  # no pidfd: poll for the exit

    ready_mark = f"{config['nonce']} ready".encode()
    start = time.monotonic()
    ready_at: Optional[float] = None
    exited_at: Optional[float] = None
    killed: Optional[str] = None
    open_fds = set(streams)

    def kill_all() -> None:  # the process group, and the cgroup (which nothing can leave)
        _killpg(proc.pid)
        if config["cgroup"]:
            _kill_cgroup(config["cgroup"])

    def has_exited() -> bool:  # without reaping: the group id stays ours until wait4 below
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    try:
        while open_fds or exited_at is None:
            now = time.monotonic()
            if exited_at is not None:
                deadline = exited_at + _DRAIN_GRACE
            elif ready_at is None:
                deadline = start + STARTUP_LIMIT
            else:
                deadline = ready_at + timeout
            if now >= deadline:
                if exited_at is not None:
                    break  # a process outside the group still holds a pipe: stop reading
                killed = "timeout" if ready_at is not None else "startup"
                kill_all()
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                exited_at = time.monotonic()
                continue
            wait = deadline - now if pidfd is not None else min(deadline - now, 0.02)
            for key, _ in sel.select(timeout=wait):
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                    kill_all()  # whatever it left behind
                    continue
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if data:
                    streams[key.fd].add(data)
                    if key.fd == status_r and ready_at is None and ready_mark in status.bytes():
                        ready_at = time.monotonic()
                else:
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
            if pidfd is None and exited_at is None and has_exited():
                exited_at = time.monotonic()
                kill_all()
    finally:
        kill_all()  # the leader is not reaped yet, so its group id cannot be reused
        sel.close()
        _, wstatus, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wstatus)
        proc.stdout.close()
        proc.stderr.close()
        os.close(status_r)
        if pidfd is not None:
            os.close(pidfd)

    prefix = config["nonce"] + " "
    events = [
        line[len(prefix):].split(" ")
        for line in status.bytes().decode("utf-8", errors="replace").splitlines()
        if line.startswith(prefix)
    ]
    return events, killed, proc.returncode, usage.ru_utime + usage.ru_stime, out.text(), err.text()


def _classify(
    events: list[list[str]],
    *,
    needs_sentinel: bool,
    killed: Optional[str],
    leader_rc: Optional[int],
    leader_cpu: float,
    cpu_limit: int,
    timeout: float,
    stdout: str,
    stderr: str,
    duration: float,
) -> Outcome:
    """Turn what the sandbox reported into an :class:`Outcome`."""
    kinds = {e[0] for e in events}
    isolation = next((tuple(e[1:]) for e in events if e[0] == "ready"), ())
    rc, cpu = leader_rc, leader_cpu  # the program's own exit (reported by the namespace's parent)
    for e in events:
        if e[0] == "child" and len(e) == 4:
            rc = -int(e[2]) if e[1] == "signal" else int(e[2])
            cpu = float(e[3])

    def outcome(status: Status, reason: str, code: Optional[int] = rc) -> Outcome:
        return Outcome(status, reason, stdout, stderr, code, duration, isolation)

    if killed == "timeout":
        return outcome("timeout", f"wall-clock limit of {timeout:g} s", None)
    if killed == "startup":
        return outcome("error", f"the sandbox did not start within {STARTUP_LIMIT:g} s", None)
    end_ok = "end" in kinds or not needs_sentinel
    if "done" in kinds and end_ok and rc == 0 and leader_rc == 0:
        return outcome("passed", "ran to the end")
    for e in events:
        if e[0] == "raised":
            name = e[1] if len(e) > 1 else "?"
            return outcome("failed" if name == "AssertionError" else "error", name)
        if e[0] == "exit":
            return outcome("error", f"SystemExit({' '.join(e[1:])}) before the end")
        if e[0] == "setup-error":
            return outcome("error", "sandbox setup failed: " + " ".join(e[1:]))
    if "done" in kinds and not end_ok:
        return outcome("error", "the sentinel after the tests was not reached")
    for code in (rc, leader_rc):
        if code is not None and code < 0:
            sig = -code
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_limit - 0.05):
                return outcome("timeout", f"CPU limit of {cpu_limit} s")
            return outcome("error", f"killed by signal {signal.Signals(sig).name}")
    if "ready" not in kinds:
        return outcome("error", f"the sandbox failed before the program started (exit code {rc})")
    return outcome("error", f"exited with code {rc} before the end")


def run_many(
    programs: Sequence[str],
    timeout: float = 3.0,
    workers: Optional[int] = None,
    *,
    memory_mb: int = DEFAULT_MEMORY_MB,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    allow: Optional[bool] = None,
    progress: bool = False,
    **limits: int,
) -> list[Outcome]:
    """Run each program with :func:`run`, ``workers`` at a time (default: one per CPU core).

    Results come back in the order of ``programs``; ``limits`` are :func:`run`'s other keyword
    limits (``file_size_mb``, ``max_processes``, ``max_open_files``).
    """
    from concurrent.futures import ThreadPoolExecutor

    check_allowed(allow)
    workers = max(1, workers or os.cpu_count() or 1)

    def one(code: str) -> Outcome:
        return run(code, timeout, memory_mb, output_limit, allow=True, **limits)  # type: ignore[arg-type]

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cel_lens_sandbox") as pool:
        results = pool.map(one, programs)
        if progress:
            from tqdm.auto import tqdm

            results = tqdm(results, total=len(programs), desc="sandbox", unit="program")
        return list(results)


def isolation(allow: Optional[bool] = None) -> tuple[str, ...]:
    """The isolation layers that apply on this machine (found by running an empty program)."""
    return run("pass", allow=allow).isolation

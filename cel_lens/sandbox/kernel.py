"""The kernel layers of the sandbox, set up inside the sandbox process (standard library only).

Each function appends the name of the layer it set to ``layers`` (what :attr:`Outcome.isolation`
reports) and says nothing when the kernel refuses; the caller decides whether that is fatal. The
seccomp filter has a module of its own (:mod:`cel_lens.sandbox.syscalls`).
Linux only; ``ctypes`` calls into the C library.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from typing import Optional

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
SIGKILL = 9  # the signal module is not imported here: it costs start-up time
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def libc() -> ctypes.CDLL:
    """The C library, with errno kept for :func:`errno_text`."""
    import ctypes

    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


def errno_text() -> str:
    """The text of the last C call's errno."""
    import ctypes

    return os.strerror(ctypes.get_errno())


def die_with_parent(lib: ctypes.CDLL) -> None:
    """SIGKILL this process when the process that started it ends (``PR_SET_PDEATHSIG``)."""
    lib.prctl(_PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)


def set_dumpable(lib: ctypes.CDLL, on: bool) -> None:
    """``PR_SET_DUMPABLE``: off, no process without ``CAP_SYS_PTRACE`` may trace this one, read
    its memory or open its ``/proc/PID/fd`` (the supervisor turns it off before the fork)."""
    lib.prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0)


def protect_from_oom(pid: int, score: int) -> None:
    """Set ``oom_score_adj`` of ``pid`` (the supervisor -1000, the program +1000), where permitted."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write(str(score))
    except OSError:
        pass


def join_cgroups(cgroups: list, layers: list[str]) -> None:
    """Move this process into each ``(controller, path)`` cgroup the parent made (``pids-cgroup``,
    ``memory-cgroup``); every process it starts is born there and cannot leave."""
    for controller, path in cgroups:
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        except OSError:
            continue
        if f"{controller}-cgroup" not in layers:
            layers.append(f"{controller}-cgroup")


def unshare(lib: ctypes.CDLL, layers: list[str]) -> bool:
    """New PID, network, mount and IPC namespaces; through a user namespace when unprivileged."""
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC
    if lib.unshare(flags) != 0:
        uid, gid = os.getuid(), os.getgid()
        if lib.unshare(flags | _CLONE_NEWUSER) != 0:
            return False
        layers.append("userns")
        set_dumpable(lib, True)  # a process that is not dumpable cannot write its own maps
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            try:
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
            except OSError:
                pass
        set_dumpable(lib, False)
    layers += ["pidns", "netns", "ipcns"]
    return True


def isolate_files(lib: ctypes.CDLL, workdir: str, tmpfs_bytes: int, layers: list[str]) -> None:
    """Make every mount read-only, nosuid, nodev and private; put a tmpfs on the working directory."""
    import ctypes

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, _MS_PRIVATE, 0)
    if lib.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), b"/", ctypes.c_uint(_AT_RECURSIVE),
        ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
    ) == 0:
        layers.append("fs:read-only")
    else:  # at least keep our mounts from propagating to the host
        lib.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None)
    if lib.mount(b"tmpfs", workdir.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                 f"size={tmpfs_bytes},mode=0700".encode()) == 0:
        os.chdir(workdir)  # enter the tmpfs that now covers the directory
        layers.append("tmpfs")


def hide_cgroups(lib: ctypes.CDLL, mount_points: list[str], layers: list[str]) -> None:
    """Cover each cgroup file system with an empty read-only tmpfs (in the run's own mount
    namespace, after it joined its cgroups): no other run's cgroup is there to read, with or
    without Landlock (which hides them too, in both modes)."""
    import ctypes

    flags = ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    covered = [p for p in mount_points if lib.mount(b"tmpfs", p.encode(), b"tmpfs", flags, b"size=4k,mode=0555") == 0]
    if covered and len(covered) == len(mount_points):
        layers.append("cgroupfs:hidden")


def mount_proc(lib: ctypes.CDLL, layers: list[str]) -> None:
    """A private ``/proc`` for PID 1 of a new PID namespace (it shows only the sandbox's processes)."""
    import ctypes

    flags = ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if lib.mount(b"proc", b"/proc", b"proc", flags, None) == 0:
        layers.append("proc:private")


def set_limits(cfg: dict) -> None:
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


def drop_capabilities(lib: ctypes.CDLL, layers: list[str]) -> None:
    """Drop every capability, the bounding and ambient sets: root can no longer remount or execve back."""
    import ctypes

    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        lib.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    lib.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    if lib.capset(header, (ctypes.c_uint32 * 6)()) == 0:
        layers.append("caps:dropped")


def no_new_privs(lib: ctypes.CDLL) -> None:
    """``PR_SET_NO_NEW_PRIVS``: no privilege comes back through ``execve`` (and seccomp may be set)."""
    lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


# Landlock (Linux 5.13+): file-system rights by path, for this process and its children, for good.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_READ = 1 | 4 | 8  # EXECUTE, READ_FILE, READ_DIR
_LANDLOCK_FILE = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # EXECUTE, WRITE_FILE, READ_FILE, TRUNCATE, IOCTL_DEV
_O_PATH = 0o10000000


def readable(hidden: list[str], keep: list[str]) -> list[str]:
    """The paths to grant reading beneath: everything but what lies in the ``hidden`` directories
    (the temporary roots, where concurrent runs live), except the ``keep`` paths (Python, its
    site-packages) and their parents. Landlock grants by allow-list, so what appears in a hidden
    directory later (the next run's directory) is hidden too; the walk lists only the directories
    on the way to a hidden or kept path."""
    hidden = sorted({os.path.realpath(h) for h in hidden} - {"/"})
    keep = [os.path.realpath(k) for k in keep]

    def holds(d: str, paths: list[str]) -> bool:  # d is one of paths, or a parent of one
        return any(p == d or p.startswith(d.rstrip("/") + "/") for p in paths)

    def kept(p: str) -> bool:  # p is a kept path, or inside one
        return any(p == k or p.startswith(k + "/") for k in keep)

    grants: list[str] = []

    def visit(d: str, inside: bool) -> None:
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            return
        for entry in entries:
            p = os.path.join(d, entry)
            within = inside or p in hidden  # p lies in a hidden directory (or is one)
            if holds(p, hidden) or (within and holds(p, keep) and not kept(p)):
                if not os.path.islink(p):
                    visit(p, within)  # on the way to a hidden directory, or to a kept path inside one
            elif (not within or kept(p)) and not os.path.islink(p):  # a link is reached by its target's path
                grants.append(p)

    visit("/", False)
    return grants


def landlock(lib: ctypes.CDLL, workdir: str, layers: list[str], hidden: Optional[list[str]] = None,
             keep: Optional[list[str]] = None) -> None:
    """Allow writing under ``workdir`` only, reading everywhere but the ``hidden`` directories
    (:func:`readable`), no TCP, and (ABI 6+) no signal to or ``ptrace`` of a process outside the
    sandbox. Where Landlock is missing, nothing happens."""
    import ctypes

    abi = lib.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return
    every = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = Ruleset(every, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # net: BIND, CONNECT_TCP; scoped: UNIX, SIGNAL
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = lib.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                          ctypes.c_uint32(0))
    if ruleset < 0:
        return
    rules = [(p, _LANDLOCK_READ) for p in (readable(hidden, keep or []) if hidden else ["/"])]
    try:
        for path, allowed in rules + [(workdir, every)]:
            try:
                fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since it was listed: nothing to grant
            try:
                if not os.path.isdir(path):
                    allowed &= _LANDLOCK_FILE  # a file takes file rights only
                rule = PathBeneath(allowed, fd)
                if lib.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1),
                               ctypes.byref(rule), ctypes.c_uint32(0)) != 0 and path == workdir:
                    return
            finally:
                os.close(fd)
        if lib.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0:
            layers.append("landlock" if abi >= 6 else "landlock:files")
    finally:
        os.close(ruleset)

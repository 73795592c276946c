"""The kernel layers of the sandbox, set up inside the sandbox process (standard library only).

Each function appends the name of the layer it set to ``layers`` (what :attr:`Outcome.isolation`
reports) and says nothing when the kernel refuses; the caller decides whether that is fatal.
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
_PR_SET_SECCOMP = 22
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


# seccomp: the system calls refused with EPERM, by architecture (audit arch -> numbers); the full
# audit of what stays allowed is in docs/sandbox.md ("The system-call filter").
# * every socket call: socket and socketpair (a paired Unix datagram socket can sendto() any host
#   socket path, which neither a network namespace nor Landlock's TCP rules stop), connect, bind,
#   listen, accept(4), send*/recv* (msg, mmsg), shutdown, get/setsockopt, getsockname, getpeername:
#   the program's process holds no socket and can make none, so the filter alone decides;
# * io_uring (it could open and connect sockets behind seccomp's back);
# * ptrace, process_vm_*, pidfd_getfd, kcmp: no reading or writing another process's memory or
#   descriptors;
# * unshare, setns, mount and the new mount API, umount2, pivot_root, chroot: no new user namespace
#   (which would give back every capability inside it) and no change of the mount tree;
# * the key-ring calls, bpf, perf_event_open, userfaultfd, fanotify_init, name_to_handle_at,
#   open_by_handle_at, kexec_*, *_module, acct, swapon/off, reboot, sethost/domainname, quotactl:
#   kernel interfaces a program never needs (most need a capability it has dropped anyway).
_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_SOCKET_SYSCALLS = {
    # socket, connect, accept, sendto, recvfrom, sendmsg, recvmsg, shutdown, bind, listen,
    # getsockname, getpeername, socketpair, setsockopt, getsockopt, accept4, recvmmsg, sendmmsg
    _AUDIT_ARCH_X86_64: (41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 288, 299, 307),
    _AUDIT_ARCH_AARCH64: (198, 203, 202, 206, 207, 211, 212, 210, 200, 201, 204, 205, 199, 208, 209, 242, 243, 269),
}
_DENIED_SYSCALLS = {
    # ptrace, add_key, request_key, keyctl, perf_event_open, process_vm_readv, process_vm_writev,
    # bpf, userfaultfd, io_uring_setup, io_uring_enter, io_uring_register, pidfd_getfd, kcmp,
    # unshare, setns, mount, umount2, pivot_root, chroot, open_tree, move_mount, fsopen, fsconfig,
    # fsmount, fspick, mount_setattr, fanotify_init, name_to_handle_at, open_by_handle_at,
    # kexec_load, init_module, finit_module, delete_module, acct, swapon, swapoff, reboot,
    # sethostname, setdomainname, quotactl
    _AUDIT_ARCH_X86_64: (101, 248, 249, 250, 298, 310, 311, 321, 323, 425, 426, 427, 438, 312,
                         272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442, 300, 303, 304,
                         246, 175, 313, 176, 163, 167, 168, 169, 170, 171, 179),
    _AUDIT_ARCH_AARCH64: (117, 217, 218, 219, 241, 270, 271, 280, 282, 425, 426, 427, 438, 272,
                          97, 268, 40, 39, 41, 51, 428, 429, 430, 431, 432, 433, 442, 262, 264, 265,
                          104, 105, 273, 106, 89, 224, 225, 142, 161, 162, 60),
}
# Cross-process kernel objects, in both modes (the IPC namespace bounds the first two only where it
# applies; objects of the guard-only mode outlived the run, on the host): SysV shared memory,
# semaphores and message queues; POSIX message queues; and locks and watches on the files every run
# can read (flock, inotify; fcntl's lock commands below), each a channel between concurrent runs.
_IPC_SYSCALLS = {
    # shmget, shmat, shmctl, shmdt, semget, semop, semctl, semtimedop, msgget, msgsnd, msgrcv, msgctl,
    # mq_open, mq_unlink, mq_timedsend, mq_timedreceive, mq_notify, mq_getsetattr, flock,
    # inotify_init, inotify_add_watch, inotify_rm_watch, inotify_init1, process_madvise, process_mrelease,
    # ioprio_set
    _AUDIT_ARCH_X86_64: (29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71, 240, 241, 242, 243, 244, 245, 73,
                         253, 254, 255, 294, 440, 448, 251),
    _AUDIT_ARCH_AARCH64: (194, 196, 195, 197, 190, 193, 191, 192, 186, 189, 188, 187, 180, 181, 182, 183, 184, 185,
                          32, 27, 28, 26, 440, 448, 30),
}
_FCNTL = {_AUDIT_ARCH_X86_64: 72, _AUDIT_ARCH_AARCH64: 25}
# Calls that name another process by its pid (the same user may change its limits, priority and CPU
# set: without a PID namespace, the caller's and every other run's) run only on the calling process:
# these arguments must be 0 (self). setpriority: which (PRIO_PROCESS) and who; the others: the pid.
# (ioprio_set, whose IOPRIO_WHO_USER reaches every process of a user, is refused outright, in _IPC_SYSCALLS.)
_SELF_ONLY = {
    # prlimit64, setpriority, sched_setaffinity, sched_setparam, sched_setscheduler, sched_setattr,
    # migrate_pages, move_pages
    _AUDIT_ARCH_X86_64: ((302, (0,)), (141, (0, 1)), (203, (0,)), (142, (0,)), (144, (0,)), (314, (0,)),
                         (256, (0,)), (279, (0,))),
    _AUDIT_ARCH_AARCH64: ((261, (0,)), (140, (0, 1)), (122, (0,)), (118, (0,)), (119, (0,)), (274, (0,)),
                          (238, (0,)), (239, (0,))),
}
# fcntl commands refused: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW (record
# locks), F_SETLEASE, F_GETLEASE (leases), F_NOTIFY (directory notification)
_FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
# Without a read-only file system (no namespaces), also every call that changes a file's metadata
# (Landlock does not cover them): chmod, chown, utime and extended attributes, all variants.
_METADATA_SYSCALLS = {
    _AUDIT_ARCH_X86_64: (90, 91, 268, 452, 92, 93, 94, 260, 132, 235, 261, 280, 188, 189, 190, 197, 198, 199, 463, 466),
    _AUDIT_ARCH_AARCH64: (52, 53, 452, 54, 55, 88, 5, 6, 7, 14, 15, 16, 463, 466),
}
_MACHINES = {"x86_64": _AUDIT_ARCH_X86_64, "aarch64": _AUDIT_ARCH_AARCH64}
_CLONE = {_AUDIT_ARCH_X86_64: (56, 435), _AUDIT_ARCH_AARCH64: (220, 435)}  # clone, clone3
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: clone may not make a namespace
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def _self_only(nr: int, args: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """Filter instructions: system call ``nr`` is refused (EPERM) unless each of ``args`` is 0 (both
    halves); any other call falls through with its number reloaded."""
    ld_abs, jeq, ret = 0x20, 0x15, 0x06
    halves = [16 + 8 * arg + half for arg in args for half in (0, 4)]  # args[i]: low, then high 32 bits
    deny_at = 2 * len(halves) + 2  # after the number's test, the checks (2 each) and the allow
    block = [(jeq, 0, deny_at + 1, nr)]  # another call: on to the reload after the deny
    for offset in halves:
        block += [(ld_abs, 0, 0, offset), (jeq, 0, deny_at - (len(block) + 2), 0)]
    return block + [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1), (ld_abs, 0, 0, 0)]


def seccomp(lib: ctypes.CDLL, layers: list[str], metadata: bool = False) -> None:
    """Install a seccomp filter refusing every socket call, :data:`_DENIED_SYSCALLS`, the
    cross-process objects (:data:`_IPC_SYSCALLS`, fcntl's lock commands), the :data:`_SELF_ONLY`
    calls on any process but the caller (and, with ``metadata``, the calls that change file
    metadata) with EPERM; needs no_new_privs first.

    Any other architecture's system calls (the i386 ABI on x86_64, x32) kill the process, so the
    filter cannot be walked around. Irrevocable, and inherited by every child.
    """
    import ctypes

    arch = _MACHINES.get(os.uname().machine)
    if arch is None:
        return
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # ALLOW, ERRNO(EPERM), KILL_PROCESS
    enosys = 0x00050000 | 38
    denied = (_SOCKET_SYSCALLS[arch] + _DENIED_SYSCALLS[arch] + _IPC_SYSCALLS[arch]
              + (_METADATA_SYSCALLS[arch] if metadata else ()))
    n = len(denied)
    clone, clone3 = _CLONE[arch]
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld_abs, 0, 0, 0)]
    if arch == _AUDIT_ARCH_X86_64:  # x32 system calls carry bit 30
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]
    # clone3 hides its flags in memory the filter cannot read: ENOSYS, so the C library falls back
    # to clone, whose flags (args[0], low half at offset 16) may not ask for a new namespace
    prog += [(jeq, 0, 1, clone3), (ret, 0, 0, enosys),
             (jeq, 0, 4, clone), (ld_abs, 0, 0, 16), (jset, 0, 1, _CLONE_NAMESPACES), (ret, 0, 0, deny),
             (ret, 0, 0, allow), (ld_abs, 0, 0, 0)]
    # fcntl: its command (args[1], low half at offset 24) may not be one of the lock commands
    locks = len(_FCNTL_DENIED)
    prog += [(jeq, 0, locks + 3, _FCNTL[arch]), (ld_abs, 0, 0, 24)]
    prog += [(jeq, locks - i, 0, cmd) for i, cmd in enumerate(_FCNTL_DENIED)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny), (ld_abs, 0, 0, 0)]
    prog += [insn for nr, args in _SELF_ONLY[arch] for insn in _self_only(nr, args)]
    prog += [(jeq, n - i, 0, nr) for i, nr in enumerate(denied)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(prog))(*[Filter(*insn) for insn in prog])
    fprog = Program(len(prog), filters)
    if lib.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) == 0:  # SECCOMP_MODE_FILTER
        layers.append("seccomp")


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

"""The seccomp filter of the program's process (standard library only): what it refuses, by architecture.

Installed by the program's process after its mounts, limits and capabilities (:mod:`cel_lens.sandbox.kernel`
sets those); the audit of what stays allowed is in ``docs/sandbox.md`` ("The system-call filter").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes

_PR_SET_SECCOMP = 22


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
# futex: a wait or wake without the private flag is keyed on the page, not on the process, and a
# page of a file every run maps (the C library's text) is one page for every run: FUTEX_WAKE in one
# run woke FUTEX_WAIT in another. Every futex call must carry the private flag (keyed on its own
# memory): futex's op (args[1]) FUTEX_PRIVATE_FLAG, futex_wake's and futex_wait's flags (args[3])
# FUTEX2_PRIVATE; futex_waitv and futex_requeue keep their flags in memory the filter cannot
# read, so they answer ENOSYS (no C library or Python needs them).
_FUTEX_PRIVATE = 128  # FUTEX_PRIVATE_FLAG and FUTEX2_PRIVATE
_FUTEX = {  # (nr, the argument holding the flag): futex, futex_wake, futex_wait
    _AUDIT_ARCH_X86_64: ((202, 1), (454, 3), (455, 3)),
    _AUDIT_ARCH_AARCH64: ((98, 1), (454, 3), (455, 3)),
}
_FUTEX_UNREADABLE = (449, 456)  # futex_waitv, futex_requeue: the same numbers on both architectures
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


def _flag_required(nr: int, arg: int, flag: int) -> list[tuple[int, int, int, int]]:
    """Filter instructions: system call ``nr`` is refused (EPERM) unless ``flag`` is set in the low
    half of ``args[arg]``; any other call falls through with its number reloaded."""
    ld_abs, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    return [(jeq, 0, 4, nr), (ld_abs, 0, 0, 16 + 8 * arg), (jset, 0, 1, flag),
            (ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1), (ld_abs, 0, 0, 0)]


def seccomp(lib: ctypes.CDLL, layers: list[str], metadata: bool = False) -> None:
    """Install a seccomp filter refusing every socket call, :data:`_DENIED_SYSCALLS`, the
    cross-process objects (:data:`_IPC_SYSCALLS`, fcntl's lock commands, a futex call without the
    private flag: :data:`_FUTEX`), the :data:`_SELF_ONLY` calls on any process but the caller (and, with ``metadata``, the calls that change file
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
    prog += [insn for nr, arg in _FUTEX[arch] for insn in _flag_required(nr, arg, _FUTEX_PRIVATE)]
    prog += [insn for nr in _FUTEX_UNREADABLE for insn in ((jeq, 0, 1, nr), (ret, 0, 0, enosys))]
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

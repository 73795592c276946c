"""The sandbox's own interpreter: ``python -I -S -B child.py CONFIG_FD TESTS_FD WORKDIR`` (standard library
only; ``WORKDIR`` only names the run in the process list).

The parent (:mod:`cel_lens.sandbox.runner`) starts this file in a fresh interpreter with two
inherited descriptors of input (the configuration and the tests: sealed memfds, never a path
another process can open) and three pipes it reads: stdout, stderr and the **verdict pipe**. This process becomes the **supervisor**: it joins the run's cgroups, enters new
namespaces and mounts, then forks the **program's process**, which sets the limits, drops every
capability, restricts itself with Landlock and seccomp, installs the Python guard, runs the
program and answers the supervisor's test requests (:mod:`cel_lens.sandbox.verdict`). The program's process never holds
the verdict pipe, cannot see the supervisor (another PID namespace; the supervisor is not
dumpable, and seccomp and Landlock refuse ``ptrace``, so ``/proc/PID/fd`` and ``/proc/PID/mem``
do not reach it), and no code of the program's ever runs in the supervisor: the supervisor alone
writes what the parent believes. The tests (with their expected values) come on a descriptor of
their own, which the supervisor reads only after the fork, so they never enter the program's
memory.

Supervisor -> parent, one record each (:mod:`cel_lens.sandbox.frame`: length-prefixed fields,
never split on anything the program can write): ``ready LAYER...``, ``program EVENT TEXT`` (what
the program's process said of its own run: ``done``, ``end``, ``raised NAME``, ``exit CODE``; its
word only, escaped), ``test I STATUS REASON``, ``verdict STATUS REASON``, ``explain LINE...`` (after a
verdict that is not a pass: the failing test, the program's values, the reason; the caller adds
it to ``Outcome.stderr``), ``child exit|signal N CPU``, ``setup-error TEXT`` and ``refused TEXT``
(no namespaces and the weaker mode not allowed). After the fork the supervisor writes nothing on
stdout or stderr (both are ``/dev/null`` to it): the program's process shares those pipes and can
reopen them for reading.

Only what the two processes need is imported, all of it before the program starts (so a file
the program writes can never become the supervisor's code); this file never imports the parent's
side.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # pragma: no cover - make cel_lens.sandbox importable without running
    # cel_lens/__init__.py or the parent's API: two empty packages over the real directories
    _here = os.path.dirname(os.path.abspath(__file__))
    for _name, _path in (("cel_lens", os.path.dirname(_here)), ("cel_lens.sandbox", _here)):
        _package = type(sys)(_name)
        _package.__path__ = [_path]  # type: ignore[attr-defined]
        sys.modules.setdefault(_name, _package)

from cel_lens.sandbox import frame, guard, kernel, syscalls, verdict  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from typing import BinaryIO, Callable

SENTINEL_NAME = "__cel_lens_end__"
"""The function a plain program calls after its asserts (see :func:`cel_lens.sandbox.check_program`)."""
_EVENT_LIMIT = 4096


def main(config_fd: int, tests_fd: int) -> None:  # pragma: no cover - runs in the sandbox process
    """Entry of the sandbox process: isolate, fork the program's process, supervise it.

    ``config_fd`` and ``tests_fd``: the inherited descriptors of the input (sealed memfds or
    pipes, never a path); the configuration is read at once, the tests after the fork."""
    import marshal

    with os.fdopen(config_fd, "rb") as f:
        cfg = marshal.load(f)
    os.set_inheritable(tests_fd, False)  # read after the fork, by the supervisor
    sys.path.extend(cfg["site_paths"])
    verdict_fd: int = cfg["verdict_fd"]

    def report(*fields: str) -> None:
        try:
            frame.write(verdict_fd, *fields)
        except OSError:
            pass

    # where the supervisor's own fds 1 and 2 go after the fork: /dev/null, opened before the mounts
    # are made nodev; the pipes of stdout and stderr are then the program's alone
    try:
        quiet_fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:  # no /dev/null: a pipe without a reader (Python ignores SIGPIPE)
        quiet_fd, reader = os.pipe()[::-1]
        os.close(reader)
    lib = kernel.libc()
    kernel.die_with_parent(lib)
    if os.getppid() != cfg["parent_pid"]:
        os._exit(3)  # the parent is gone already
    layers = ["process", "rlimits", "guard"]
    kernel.join_cgroups(cfg["cgroups"], layers)
    # from here on, no process without CAP_SYS_PTRACE reaches this one's descriptors (the tests)
    kernel.set_dumpable(lib, False)
    namespaces = cfg["namespaces"] != "off" and kernel.unshare(lib, layers)
    if not namespaces:
        why = "namespaces are turned off" if cfg["namespaces"] == "off" else f"unshare: {kernel.errno_text()}"
        if cfg["namespaces"] == "require":
            report("setup-error", f"namespaces required but unavailable ({why})")
            os._exit(4)
        if not cfg["weak"]:
            report("refused", why)
            os._exit(4)
    else:
        kernel.isolate_files(lib, cfg["workdir"], 4 * cfg["file_size_bytes"], layers)
        kernel.hide_cgroups(lib, cfg.get("cgroup_mounts", []), layers)
    import time  # noqa: F401 - all the supervisor imports, loaded before the program can plant files

    for module in cfg["modules"]:
        __import__(module)
    requests, replies = os.pipe(), os.pipe()
    pid = os.fork()  # the supervisor is not dumpable: neither is the program's process
    if pid == 0:
        os.close(tests_fd)
        os.close(verdict_fd)
        os.close(quiet_fd)
        os.close(requests[1])
        os.close(replies[0])
        _program_process(lib, cfg, namespaces, layers, requests[0], replies[1])
    os.close(requests[0])
    os.close(replies[1])
    # the program's process can reopen the stderr pipe it shares (``/proc/self/fd/2``) for reading:
    # from here on the supervisor writes nothing there (warnings, tracebacks included); what it says
    # of the tests, expected values included, goes on the verdict pipe only (``explain``)
    for fd in (1, 2):
        os.dup2(quiet_fd, fd)
    os.close(quiet_fd)
    kernel.protect_from_oom(os.getpid(), -1000)
    with os.fdopen(tests_fd, "rb") as f:
        checks = marshal.load(f)
    _supervise(checks, pid, requests[1], os.fdopen(replies[0], "rb"), report)


# ------------------------------------------------------------------------------ the supervisor
def _read_event(replies: BinaryIO) -> list[str] | None:
    line = replies.readline(_EVENT_LIMIT)
    if not line:
        return None
    return line.rstrip(b"\n").decode("utf-8", "replace").split(" ")


_PROGRAM_EVENTS = ("done", "end", "raised", "exit")


def _supervise(checks: list, pid: int, request_fd: int, replies: BinaryIO, report: Callable[..., None]) -> None:
    """Relay the program's start and end, run the tests if it ended well, reap it, exit alike.

    Every field relayed is either one of the supervisor's fixed tokens or escaped text
    (:func:`cel_lens.sandbox.frame.escape`): what the program's process wrote never becomes a
    record or a field of its own."""
    first = _read_event(replies)
    if first is not None and first[0] == "ready":
        report("ready", *(frame.escape(layer, 40) for layer in first[1:40]))
    elif first is not None and first[0] == "setup-error":
        report("setup-error", frame.escape(" ".join(first[1:])))
    ended = None
    while first is not None and first[0] == "ready":
        event = _read_event(replies)
        if event is None:
            break
        if event[0] not in _PROGRAM_EVENTS:  # out of protocol: the program wrote on the pipe itself
            report("program", "unknown", frame.escape(" ".join(event)))
            break
        report("program", event[0], *([frame.escape(" ".join(event[1:]))] if len(event) > 1 else []))
        if event[0] in ("done", "raised", "exit"):
            ended = event[0]
            break
    if ended == "done" and checks:
        verdict.run_tests(checks, lambda seen: verdict.hole_fetcher(request_fd, replies, seen), report)
        grace = 1.0  # the verdict is in: the program gets a moment to flush its output, no more
    else:
        grace = None
    os.close(request_fd)
    _reap(pid, grace, report)


def _reap(pid: int, grace: float | None, report: Callable[..., None]) -> None:
    """Wait for the program's process (killing it after ``grace`` seconds), report, exit alike."""
    import time

    deadline = None if grace is None else time.monotonic() + grace
    while True:
        done, wstatus, usage = os.wait4(pid, 0 if deadline is None else os.WNOHANG)
        if done:
            break
        if deadline is not None and time.monotonic() > deadline:
            os.kill(pid, kernel.SIGKILL)
            deadline = None
        else:
            time.sleep(0.005)
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(wstatus):
        report("child", "signal", str(os.WTERMSIG(wstatus)), f"{cpu:.3f}")
        os._exit(128 + os.WTERMSIG(wstatus))
    report("child", "exit", str(os.WEXITSTATUS(wstatus)), f"{cpu:.3f}")
    os._exit(os.WEXITSTATUS(wstatus))


# ----------------------------------------------------------------------- the program's process
def _program_process(lib: ctypes.CDLL, cfg: dict, namespaces: bool, layers: list[str],
                     request_fd: int, reply_fd: int) -> None:
    """Limit and guard this process, then run the program, then answer the tests; never returns."""
    kernel.die_with_parent(lib)
    kernel.protect_from_oom(os.getpid(), 1000)
    if namespaces:
        kernel.mount_proc(lib, layers)
    try:
        kernel.set_limits(cfg)
    except (OSError, ValueError) as err:
        verdict.write_line(reply_fd, f"setup-error rlimits: {err}")
        os._exit(4)
    if namespaces or os.geteuid() == 0:
        kernel.drop_capabilities(lib, layers)
    kernel.no_new_privs(lib)
    kernel.landlock(lib, cfg["workdir"], layers, cfg.get("hidden"), cfg.get("keep"))
    syscalls.seccomp(lib, layers, metadata=not namespaces)
    if not namespaces:
        layers.append("net:socket-patched")
    # the tests' holes are compiled before the program runs (they come from the caller)
    codes = [compile(h, f"<hole {k}>", "eval") for k, h in enumerate(cfg["holes"])]
    guard.reliability_guard(cfg["workdir"], patch_socket=not namespaces)
    verdict.write_line(reply_fd, "ready " + " ".join(layers))
    namespace = _run_program(cfg["source"], cfg["setup"], cfg["workdir"], reply_fd, cfg.get("main", True))
    if cfg["holes"]:
        verdict.serve_holes(codes, namespace, request_fd, reply_fd)
    _flush()
    os._exit(0)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - the program may have replaced or closed them
            pass


def _exit_code_text(exc: SystemExit) -> str:
    """``SystemExit``'s code as the program's process reports it: an ``int`` (bounded), ``None``,
    or the code's type; never the program's own ``repr`` (it may raise, or carry a line end)."""
    try:
        code = exc.code
        if code is None or type(code) is bool:
            return str(code)
        if type(code) is int:
            return str(code) if code.bit_length() < 64 else "a large int"
        return "a " + frame.escape(type.__dict__["__name__"].__get__(type(code)), 60)
    except BaseException:  # noqa: BLE001
        return "?"


def _run_program(source: str, setup: str, workdir: str, reply_fd: int, main: bool = True) -> dict:
    """Run the program (parsed on its own) as ``__main__``, or with ``main=False`` in a namespace
    without ``__name__`` (as lm-eval's ``exec(program, {})``: ``__name__`` is then the built-ins'
    ``'builtins'``, so an ``if __name__ == "__main__":`` block does not run); then ``setup`` in
    its namespace; say how it ended; return its namespace, or exit if it did not end well."""
    import builtins

    write, exit_now = os.write, os._exit
    filename = os.path.join(workdir, "program.py")
    reached_end: list[bool] = []

    def end() -> None:
        if not reached_end:
            reached_end.append(True)
            verdict.write_line(reply_fd, "end")

    namespace = {"__builtins__": builtins, SENTINEL_NAME: end}
    if main:
        namespace["__name__"] = "__main__"
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the program under test
        if setup:
            exec(compile(setup, "<setup>", "exec"), namespace)  # noqa: S102
    except SystemExit as exc:
        _flush()
        verdict.write_line(reply_fd, "exit " + _exit_code_text(exc))
        exit_now(1)
    except BaseException as exc:  # noqa: BLE001 - how the program failed is the result
        verdict.write_line(reply_fd, "raised " + verdict.exception_name(exc))
        _flush()
        namespace.clear()  # free what the program held before formatting
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
    _flush()
    verdict.write_line(reply_fd, "done")
    return namespace


if __name__ == "__main__":  # pragma: no cover
    main(int(sys.argv[1]), int(sys.argv[2]))

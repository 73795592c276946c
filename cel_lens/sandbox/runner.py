"""The parent's API: :func:`run` a program (and judge its tests), :func:`run_many`, :class:`Outcome`.

See the package docstring (:mod:`cel_lens.sandbox`) for what is contained and what is not. This
module validates the request, makes the run's temporary directory and cgroups, hands a plain
configuration to :mod:`~cel_lens.sandbox.process`, and reads the supervisor's report into an
:class:`Outcome`.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Union

from cel_lens.sandbox import cgroups as cg
from cel_lens.sandbox.child import SENTINEL_NAME
from cel_lens.sandbox.judge import split_tests
from cel_lens.sandbox.process import STARTUP_LIMIT, Finished, execute, site_paths

__all__ = [
    "ALLOW_ENV", "WEAK_ENV", "SENTINEL", "NAMESPACES", "CodeExecutionNotAllowed", "NamespacesUnavailable",
    "Outcome", "Program", "check_allowed", "check_program", "isolation", "run", "run_many",
]

ALLOW_ENV = "CEL_LENS_ALLOW_CODE_EXECUTION"
"""Environment variable that opts in to running generated code (value ``1``)."""
WEAK_ENV = "CEL_LENS_SANDBOX_WEAK"
"""Environment variable that accepts the weaker sandbox where namespaces are not permitted (``1``)."""
SENTINEL = f"{SENTINEL_NAME}()"
"""Statement :func:`check_program` puts after the asserts; a plain program passes only if it ran."""

Status = Literal["passed", "failed", "timeout", "error"]

# Defaults: generous for MBPP-style solutions, small enough to run many at once.
DEFAULT_MEMORY_MB = 1024
"""Memory limit, MiB: the address space of each process of a sandboxed run and the memory of the whole run."""
DEFAULT_OUTPUT_LIMIT = 8192
"""Bytes kept of a program's stdout, and of its stderr."""
DEFAULT_FILE_SIZE_MB = 16
"""Largest file a program may write, MiB."""
DEFAULT_MAX_PROCESSES = 32
"""Processes (and threads) a program may have at once."""
DEFAULT_MAX_OPEN_FILES = 64
"""File descriptors a program may hold open."""
_SUPERVISOR_MB = 48  # the memory cgroup holds the supervisor as well as the program

NAMESPACES: Literal["try", "off", "require"] = "try"
"""``try``: namespaces where permitted; ``off``: never (tests of the weaker mode); ``require``:
refuse to run without them (tests of programs that bypass the Python guard)."""
USE_CGROUP = True
"""Make a pids and a memory cgroup per run where this process may (root, or delegated v2)."""

_swept: set[str] = set()
_swept_lock = threading.Lock()


class CodeExecutionNotAllowed(RuntimeError):
    """Raised when generated code would run without the explicit opt-in."""


class NamespacesUnavailable(CodeExecutionNotAllowed):
    """Raised when namespaces are not permitted and the weaker sandbox was not accepted."""


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

    ``status`` is ``passed`` (its tests held; without tests: it ran to its end), ``failed`` (an
    ``AssertionError``: a test did not hold), ``timeout`` (wall clock or CPU limit) or ``error``
    (anything else); ``reason`` says what in a few words. ``stdout``/``stderr`` hold at most
    ``output_limit`` bytes each of the program's output (decoded), with a note when cut; after a
    failing test, ``stderr`` ends with the supervisor's explanation (the test, the program's values),
    which came on the verdict pipe, never through the program's stderr. ``returncode`` is the program's
    exit code (negative: killed by that signal; ``None``: killed by the sandbox). ``duration`` is
    wall seconds from start to reaping. ``isolation`` names the layers that applied.
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
        """True iff the verdict is a pass (see ``status``)."""
        return self.status == "passed"


@dataclass(frozen=True)
class Program:
    """A program with its tests, for :func:`run_many` (the arguments of :func:`run` of that name)."""

    code: str
    tests: tuple[str, ...] = ()
    setup: str = ""
    entry_points: tuple[str, ...] = ()
    main: bool = True


def check_program(code: str, test_setup_code: str, tests: Sequence[str]) -> str:
    """One plain program: generated code, the problem's setup, its asserts, then the sentinel.

    The setup goes after the code because MBPP's setup code uses names the solution defines
    (tasks 367 and 927 build trees of the solution's ``Node`` class). A plain program reports its
    own end, so the program could fake it; for a verdict it cannot fake, pass the asserts to
    :func:`run` as ``tests`` instead.
    """
    parts = [code.rstrip(), test_setup_code.rstrip(), *(t.rstrip() for t in tests), SENTINEL]
    return "\n".join(p for p in parts if p) + "\n"


def hidden_roots(tmp_root: str) -> list[str]:
    """Directories whose contents the program does not see (where Landlock applies): the run's
    temporary root and the system's (concurrent runs' directories), ``/dev/shm`` (POSIX shared
    memory and semaphores of other processes), and the cgroup file systems (every run's cgroup)."""
    return sorted({tmp_root, os.path.realpath(tempfile.gettempdir()), "/dev/shm", *cg.mount_points()} - {"/"})


def kept_paths() -> list[str]:
    """What the program's interpreter reads even inside a hidden directory: Python, its standard
    library and site-packages, this package."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, here,
             os.path.dirname(os.path.realpath(sys.executable)), *site_paths()}
    return sorted(os.path.realpath(p) for p in paths if p)


def _sweep_once(tmp_root: str) -> None:
    """At the first run under ``tmp_root``: remove what runs of dead callers left behind."""
    with _swept_lock:
        if tmp_root in _swept:
            return
        _swept.add(tmp_root)
    cg.sweep([tmp_root])


def run(
    code: str,
    timeout: float = 3.0,
    memory_mb: int = DEFAULT_MEMORY_MB,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    *,
    tests: Sequence[str] = (),
    setup: str = "",
    entry_points: Sequence[str] = (),
    allow: Optional[bool] = None,
    weak: Optional[bool] = None,
    file_size_mb: int = DEFAULT_FILE_SIZE_MB,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    tmp_root: Optional[str] = None,
    main: bool = True,
) -> Outcome:
    """Run ``code`` in a fresh, limited, isolated interpreter; judge ``tests``; say how it ended.

    ``code`` is parsed on its own and runs as ``__main__`` (``main=False``: in a namespace without
    ``__name__``, as lm-eval's ``exec(program, {})``, so ``if __name__ == "__main__":`` blocks do not
    run); then ``setup`` runs in its namespace;
    then each of ``tests`` (one ``assert`` statement each) is judged by the supervisor, the
    program contributing only the values of its sub-expressions (:mod:`cel_lens.sandbox.judge`;
    ``entry_points``: built-in names the tests use for the program's own functions).
    ``timeout`` is wall-clock seconds for all of it (interpreter start-up excluded);
    ``memory_mb`` the address space of each process and the memory of the whole run;
    ``output_limit`` the bytes kept of stdout and of stderr; ``tmp_root`` where the temporary
    working directory is made (default: the system's). Requires the opt-in
    (:func:`check_allowed`); where namespaces are not permitted, also ``weak=True`` or
    ``$CEL_LENS_SANDBOX_WEAK=1`` (else :class:`NamespacesUnavailable`).
    """
    check_allowed(allow)
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"cel_lens.sandbox runs generated code on Linux only, not on {sys.platform}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if memory_mb < 64:
        raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {memory_mb}")
    checks = split_tests(tests, entry_points)
    if weak is None:
        weak = os.environ.get(WEAK_ENV, "") == "1"
    root = os.path.realpath(tmp_root or tempfile.gettempdir())
    _sweep_once(root)
    name = cg.new_name()
    workdir = os.path.realpath(tempfile.mkdtemp(prefix=name + "-", dir=root))
    # the sandbox's own process (the supervisor) comes on top of the program's
    groups = cg.make(name, max_processes + 2, (memory_mb + _SUPERVISOR_MB) << 20) if USE_CGROUP else []
    try:
        cpu_limit = int(math.ceil(timeout)) + 1
        config = {
            "parent_pid": os.getpid(), "workdir": workdir, "source": code, "setup": setup,
            "holes": [h for c in checks for h in c.holes],
            "modules": sorted({m for c in checks for m in c.modules}),
            "site_paths": site_paths(), "namespaces": NAMESPACES, "weak": bool(weak),
            "cgroups": [list(g) for g in groups], "memory_bytes": memory_mb << 20,
            "cpu_seconds": cpu_limit, "file_size_bytes": file_size_mb << 20,
            "max_processes": max_processes, "max_open_files": max_open_files, "main": bool(main),
            "hidden": hidden_roots(root), "keep": kept_paths(), "cgroup_mounts": cg.mount_points(),
        }
        start = time.monotonic()
        # the supervisor's part (the expected values) never enters the program's process
        tests_config = [{"source": c.source, "remainder": c.remainder, "holes": list(c.holes),
                         "first_hole": c.first_hole, "modules": list(c.modules)} for c in checks]
        finished = execute(config, tests_config, workdir, timeout, output_limit, groups)
        return _classify(finished, judged=bool(checks), needs_sentinel=SENTINEL in code,
                         cpu_limit=cpu_limit, timeout=timeout, duration=time.monotonic() - start)
    finally:
        cg.remove(groups)
        shutil.rmtree(workdir, ignore_errors=True)


def _classify(f: Finished, *, judged: bool, needs_sentinel: bool, cpu_limit: int, timeout: float,
              duration: float) -> Outcome:
    """Turn what the supervisor reported into an :class:`Outcome`."""
    import signal

    events = f.events
    first = {e[0]: e for e in reversed(events)}  # the first event of each kind
    isolation = tuple(first["ready"][1:]) if "ready" in first else ()
    rc, cpu = f.returncode, f.cpu
    if "child" in first and len(first["child"]) == 4:  # the program's own exit, said by the supervisor
        e = first["child"]
        rc, cpu = (-int(e[2]) if e[1] == "signal" else int(e[2])), float(e[3])

    # the supervisor's explanation of a failing test came on the verdict pipe (the program's
    # process shares the stderr pipe, and the explanation holds the expected value): added here
    stderr = f.stderr
    if "explain" in first:
        stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + "\n".join(first["explain"][1:]) + "\n"

    def outcome(status: Status, reason: str, code: Optional[int] = rc) -> Outcome:
        return Outcome(status, reason, f.stdout, stderr, code, duration, isolation)

    if "refused" in first:
        raise NamespacesUnavailable(
            f"cel_lens.sandbox: namespaces are not permitted here ({' '.join(first['refused'][1:])}), so the "
            f"sandbox cannot keep the program from writing files; set {WEAK_ENV}=1 (or weak=True) to run "
            "with the weaker guard-only sandbox described in docs/sandbox.md"
        )
    verdict = first.get("verdict")
    if judged and verdict is not None and verdict[1] == "passed":
        return outcome("passed", " ".join(verdict[2:]))
    if f.killed == "timeout":
        return outcome("timeout", f"wall-clock limit of {timeout:g} s", None)
    if f.killed == "startup":
        return outcome("error", f"the sandbox did not start within {STARTUP_LIMIT:g} s", None)
    program = [e[1:] for e in events if e[0] == "program" and len(e) > 1]
    said = {e[0] for e in program}
    if not judged and "done" in said and ("end" in said or not needs_sentinel) and rc == 0 and f.returncode == 0:
        return outcome("passed", "ran to the end")
    for e in program:
        if e[0] == "raised":
            name = e[1] if len(e) > 1 else "?"
            return outcome("failed" if name == "AssertionError" else "error", name)
        if e[0] == "exit":
            return outcome("error", f"SystemExit({' '.join(e[1:])}) before the end")
    if "setup-error" in first:
        return outcome("error", "sandbox setup failed: " + " ".join(first["setup-error"][1:]))
    for code in (rc, f.returncode):
        if code is not None and code < 0:
            sig = -code
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_limit - 0.05):
                return outcome("timeout", f"CPU limit of {cpu_limit} s")
            if verdict is None:
                return outcome("error", f"killed by signal {signal.Signals(sig).name}")
    if verdict is not None:
        return outcome(verdict[1] if verdict[1] in ("failed", "error") else "error", " ".join(verdict[2:]))
    if "done" in said and not judged:
        return outcome("error", "the sentinel after the tests was not reached")
    if "ready" not in first:
        return outcome("error", f"the sandbox failed before the program started (exit code {rc})")
    return outcome("error", f"exited with code {rc} before the end")


def run_many(
    programs: Sequence[Union[str, Program]],
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

    A program is its code, or a :class:`Program` with its tests. Results come back in the order
    of ``programs``; ``limits`` are :func:`run`'s other keyword arguments (``file_size_mb``,
    ``max_processes``, ``max_open_files``, ``weak``, ``tmp_root``).
    """
    from concurrent.futures import ThreadPoolExecutor

    check_allowed(allow)
    workers = max(1, workers or os.cpu_count() or 1)

    def one(p: Union[str, Program]) -> Outcome:
        if isinstance(p, str):
            p = Program(p)
        return run(p.code, timeout, memory_mb, output_limit, tests=p.tests, setup=p.setup,
                   entry_points=p.entry_points, main=p.main, allow=True, **limits)  # type: ignore[arg-type]

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cel_lens_sandbox") as pool:
        results = pool.map(one, programs)
        if progress:
            from tqdm.auto import tqdm

            results = tqdm(results, total=len(programs), desc="sandbox", unit="program")
        return list(results)


def isolation(allow: Optional[bool] = None) -> tuple[str, ...]:
    """The isolation layers that apply on this machine (found by running an empty program; the
    weaker mode is accepted for this probe, so it answers where namespaces are not permitted)."""
    return run("pass", allow=allow, weak=True).isolation

"""Run untrusted generated code (MBPP completions) in isolated, limited, throw-away processes,
and judge its tests with a verdict the program cannot forge.

Linux only. Running model-generated code needs an explicit opt-in: ``CEL_LENS_ALLOW_CODE_EXECUTION=1``
in the environment, ``allow=True``, or ``--allow-code-execution`` on the command line; without
it :func:`run` raises :class:`CodeExecutionNotAllowed` before anything runs. Where the kernel does
not permit namespaces, :func:`run` also needs ``CEL_LENS_SANDBOX_WEAK=1`` or ``weak=True``
(else :class:`NamespacesUnavailable`): that weaker mode cannot keep a deliberate program from
changing files outside its directory. ``docs/sandbox.md`` has the full account.

How one run goes
----------------
* :mod:`~cel_lens.sandbox.process` starts ``python -I -S -B child.py`` (no ``preexec_fn``, a new
  session, stdin ``/dev/null``, a minimal environment), hands it the program and the tests on two
  inherited, sealed memfds (never a file another run could open), reads its stdout, stderr and
  verdict pipe, and enforces the wall clock (``timeout``, counted from the program's start).
* That process, the **supervisor** (:mod:`~cel_lens.sandbox.child`), joins the run's pids and
  memory cgroups (:mod:`~cel_lens.sandbox.cgroups`; the memory cgroup bounds the whole process
  tree), enters new PID, network, mount and IPC namespaces, makes every mount read-only,
  ``nosuid``, ``nodev``, puts a tmpfs on the working directory, and forks the **program's
  process** (PID 1 of the new PID namespace), which mounts a private ``/proc``, sets rlimits
  (``RLIMIT_AS`` = ``memory_mb``, CPU, processes, file size, open files, no core), drops every
  capability, sets ``no_new_privs``, restricts itself with Landlock where the kernel has it
  (writes only under the working directory; the temporary roots, ``/dev/shm`` and the cgroup file
  systems unreadable, so nothing of a concurrent run is in view; no signal to or ``ptrace`` of processes outside),
  installs a seccomp filter (no socket call of any kind, ``socketpair`` and ``sendto`` included:
  no path to a host Unix-domain socket and no network even without namespaces; no new namespace
  or mount; no io_uring, ``ptrace``, ``process_vm_*``, key rings, ``bpf``; no SysV or POSIX IPC
  object, file lock, lease or inotify watch, no futex call without the private flag (channels
  between runs); limits, priority and CPU set
  of its own process only (``prlimit``, ``setpriority``, ``sched_*`` of another pid refused); without namespaces also
  no chmod/chown/utime/xattr calls; the audit is in ``docs/sandbox.md``), installs the Python guard
  (:mod:`~cel_lens.sandbox.guard`) and runs the program. Both die with their parent
  (``PR_SET_PDEATHSIG``); leftovers of a caller
  that was killed (cgroups, temporary directories) are removed at the next start.
* **The verdict.** The program is parsed on its own and runs as ``__main__``; ``setup`` runs in its
  namespace; then the supervisor judges each test (:mod:`~cel_lens.sandbox.judge`,
  :mod:`~cel_lens.sandbox.verdict`): the program's process only evaluates the sub-expressions
  that call the program's functions (or name its values) and sends their values as plain data
  (:mod:`~cel_lens.sandbox.codec`); comparisons, built-ins, methods, comprehensions and the
  pass/fail decision are computed by the supervisor, which never runs the program's code, and
  written on a pipe the program's process never holds (the explanation of a failing test, which
  shows the expected value, too: never on the stderr the program shares), as length-prefixed records
  (:mod:`~cel_lens.sandbox.frame`) that nothing the program writes can split; a test of any other
  shape is refused (:class:`CannotJudge`). The program can change only those values: it cannot skip an
  assert, make a wrong value compare equal (a custom ``__eq__`` never reaches the comparison),
  patch a built-in the test uses, or write a pass (no secret exists to steal). A passing result
  therefore means the values the program produced satisfy every test.
* :attr:`Outcome.isolation` names the layers that applied: ``process``, ``rlimits``, ``guard``
  always; ``pids-cgroup``, ``memory-cgroup``, ``userns``, ``pidns``, ``netns``, ``ipcns``,
  ``fs:read-only``, ``tmpfs``, ``cgroupfs:hidden``, ``proc:private``, ``caps:dropped``, ``landlock`` (ABI 6+;
  ``landlock:files`` before), ``seccomp`` where they worked; ``net:socket-patched`` without
  namespaces.

What is not contained
---------------------
* The program can **read** every file its user can read and print it into the captured output
  (with the network namespace and seccomp, it cannot send it anywhere).
* A program can always return the expected values it knows (MBPP's prompt shows the tests); no
  judge can tell that from a solution. (Expected values never enter the program's memory.)
* Without namespaces (the weaker mode): the working directory has no size limit; without Landlock
  too, files outside it are protected only by the Python guard (``posix`` and ``_io.FileIO``
  undo it) and processes of the same user can be signalled; without a pids cgroup, a process
  that leaves the process group survives a killed caller.
* Without seccomp (an architecture other than x86_64 and aarch64), host Unix-domain sockets are
  reachable.
* Values cross as plain data only: a test whose program value is an object of the program's own
  class (not ``int``, ``str``, ``list``...) fails here even where Python's ``==`` would say yes.
* CPU time, memory bandwidth and the page cache are shared, and the machine's counters in
  ``/proc`` (``loadavg``, ``stat``, ``meminfo``...) are visible: cooperating runs can signal each
  other through them, carrying only what they have (their own values, whether each of their tests
  held), never an expected value. Timing side channels and kernel bugs are out of scope. For code
  written to escape, use a VM or gVisor.
"""

from cel_lens.sandbox.runner import (
    ALLOW_ENV,
    DEFAULT_FILE_SIZE_MB,
    DEFAULT_MAX_OPEN_FILES,
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_MB,
    DEFAULT_OUTPUT_LIMIT,
    SENTINEL,
    WEAK_ENV,
    CodeExecutionNotAllowed,
    NamespacesUnavailable,
    Outcome,
    Program,
    check_allowed,
    check_program,
    isolation,
    run,
    run_many,
)
from cel_lens.sandbox.process import STARTUP_LIMIT
from cel_lens.sandbox.judge import CannotJudge

__all__ = [
    "ALLOW_ENV",
    "DEFAULT_FILE_SIZE_MB",
    "DEFAULT_MAX_OPEN_FILES",
    "DEFAULT_MAX_PROCESSES",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_OUTPUT_LIMIT",
    "SENTINEL",
    "STARTUP_LIMIT",
    "CannotJudge",
    "WEAK_ENV",
    "CodeExecutionNotAllowed",
    "NamespacesUnavailable",
    "Outcome",
    "Program",
    "check_allowed",
    "check_program",
    "isolation",
    "run",
    "run_many",
]

"""Per-run cgroups and the clean-up of what a killed caller left behind (the parent's side).

Each run gets a **pids** cgroup (``pids.max``: bounds the number of processes even for uid 0,
whom ``RLIMIT_NPROC`` does not bind) and a **memory** cgroup (``memory.max`` in cgroup v2,
``memory.limit_in_bytes`` in v1: bounds the memory of the whole process tree, which
``RLIMIT_AS`` bounds per process only), where this process may make them (as root, or in a
delegated cgroup v2 subtree). Nothing can leave a cgroup, so the parent kills every process of
the run through it, even one that left its process group.

Names carry no secret, only the owner: ``cel_lens_sandbox-PID-START-N`` (the caller's pid, its
start time in clock ticks since boot, a counter), the same prefix as the run's temporary
directory. :func:`sweep` removes the cgroups and directories whose owner is no longer alive
(killed before it could clean up), killing what is still in those cgroups.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import time
from typing import Iterable, Optional

__all__ = ["PREFIX", "owner_tag", "new_name", "make", "kill", "remove", "find", "sweep", "mount_points"]

PREFIX = "cel_lens_sandbox-"
_ROOT = "/sys/fs/cgroup"
_counter = itertools.count()


def _start_time(pid: int) -> Optional[str]:
    """Field 22 of ``/proc/PID/stat`` (start time after boot): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_tag() -> str:
    """``PID-START`` of this process."""
    return f"{os.getpid()}-{_start_time(os.getpid())}"


def new_name() -> str:
    """A fresh name for one run's cgroups: :data:`PREFIX`, :func:`owner_tag`, a counter."""
    return f"{PREFIX}{owner_tag()}-{next(_counter)}"


def _owner_alive(name: str) -> bool:
    """Whether the process that made ``name`` (a cgroup or directory) still runs."""
    parts = name[len(PREFIX):].split("-")
    if len(parts) < 3 or not parts[0].isdigit():
        return True  # not one of ours, or not understood: leave it
    return _start_time(int(parts[0])) == parts[1]


def _own_path(controller: str) -> Optional[str]:
    """This process's cgroup path for ``controller`` (``""`` selects the v2 line)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return path
    except (OSError, ValueError):
        pass
    return None


def _bases(controller: str) -> list[str]:
    """Directories under which a cgroup with ``controller`` can be made, best first."""
    v1 = os.path.join(_ROOT, controller)
    if os.path.isfile(os.path.join(v1, "cgroup.procs")):
        own = _own_path(controller) or "/"
        return [d for d in dict.fromkeys((v1 + own.rstrip("/"), v1)) if os.access(d, os.W_OK)]
    if not os.path.isfile(os.path.join(_ROOT, "cgroup.controllers")):
        return []
    bases = []
    for d in dict.fromkeys((_ROOT + (_own_path("") or "/").rstrip("/"), _ROOT)):
        try:
            with open(os.path.join(d, "cgroup.subtree_control")) as f:
                if controller in f.read().split() and os.access(d, os.W_OK):
                    bases.append(d)
        except OSError:
            continue
    return bases


def mount_points() -> list[str]:
    """Where the cgroup file systems are mounted (v1 and v2), outermost only, :data:`_ROOT` with
    them when it holds one: what the program of a run must not see, since every run's cgroup (its
    ``pids.current``, which the run sets by starting threads) is readable there by every other."""
    points = {_ROOT} if os.path.isdir(_ROOT) else set()
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
                    points.add(fields[1].replace("\\040", " "))
    except OSError:
        pass
    points = {os.path.realpath(p) for p in points} - {"/"}
    return sorted(p for p in points if not any(p.startswith(q + "/") for q in points))


def _limit_files(controller: str, base: str) -> list[str]:
    if controller == "pids":
        return ["pids.max"]
    if os.path.isfile(os.path.join(base, "memory.limit_in_bytes")):  # v1; memsw only with swap accounting
        return ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    return ["memory.max", "memory.swap.max"]


def make(name: str, max_pids: int, memory_bytes: int) -> list[tuple[str, str]]:
    """Make the run's ``(controller, path)`` cgroups where permitted (none where not)."""
    made: list[tuple[str, str]] = []
    if os.geteuid() != 0 and not os.path.isfile(os.path.join(_ROOT, "cgroup.controllers")):
        return made
    for controller, value in (("pids", max_pids), ("memory", memory_bytes)):
        for base in _bases(controller):
            path = os.path.join(base, name)
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            try:
                for i, limit in enumerate(_limit_files(controller, base)):
                    if i == 0 or os.path.exists(os.path.join(path, limit)):
                        with open(os.path.join(path, limit), "w") as f:
                            f.write(str(0 if limit == "memory.swap.max" else value))
                made.append((controller, path))
                break
            except OSError:
                remove([(controller, path)])
    return made


def kill(cgroups: Iterable[tuple[str, str]]) -> int:
    """SIGKILL every process in the cgroups; how many there were."""
    n = 0
    for _, path in cgroups:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        n += len(pids)
    return n


def remove(cgroups: Iterable[tuple[str, str]]) -> None:
    """Kill whatever is still in the cgroups, then remove them."""
    cgroups = list(cgroups)
    for _ in range(200):
        if not kill(cgroups):
            break
        time.sleep(0.005)
    for _, path in cgroups:
        for _ in range(200):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:  # the last killed processes are still exiting
                time.sleep(0.005)


def find(prefix: str = PREFIX) -> list[tuple[str, str]]:
    """Every run cgroup (``(controller, path)``) whose name starts with ``prefix``."""
    found = []
    for controller in ("pids", "memory"):
        for base in _bases(controller):
            try:
                found += [(controller, os.path.join(base, n)) for n in os.listdir(base) if n.startswith(prefix)]
            except OSError:
                continue
    return found


def sweep(tmp_dirs: Iterable[str]) -> list[str]:
    """Remove the cgroups and temporary directories of runs whose owner died; what was removed."""
    stale = [(c, p) for c, p in find() if not _owner_alive(os.path.basename(p))]
    remove(stale)
    removed = [p for _, p in stale]
    for root in tmp_dirs:
        try:
            names = [n for n in os.listdir(root) if n.startswith(PREFIX)]
        except OSError:
            continue
        for n in names:
            if not _owner_alive(n):
                shutil.rmtree(os.path.join(root, n), ignore_errors=True)
                removed.append(os.path.join(root, n))
    return removed

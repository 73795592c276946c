"""How many CPU threads torch uses: one for tiny models, the free cores otherwise, or what you say.

torch's default (one thread per physical core, OpenMP threads that spin while waiting) is a poor
fit for two common cases. A tiny model (the model organism, test models) does too little work per
operation to gain from a second thread: on two cores the demo spent twice the CPU time for the same
wall time, and on a busy machine the spinning threads fight every other process (the demo took
52-100 s with torch's default and 17 s with one thread on a loaded 2-core machine). And on a
machine others are using, threads beyond the idle cores only queue.

So :func:`choose_threads` gives one thread to models under :data:`TINY_PARAMS` parameters and,
when asked to look at the machine (the ``cel-lens`` command does at start, when its own process
has not run yet), the cores the others leave idle (measured over a tenth of a second from
``/proc/stat``, else by the one-minute load average); never more than torch's own default. ``CEL_LENS_THREADS=N`` pins the count (``auto`` or unset: this policy);
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` or a ``torch.set_num_threads`` call after cel_lens set one
are respected as they are.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import weakref
from typing import Any, Iterator, Optional

import torch

__all__ = ["ENV", "TINY_PARAMS", "STAT", "SAMPLE_S", "busy_now", "choose_threads", "configure_threads", "idle_cores",
           "param_count", "single_thread"]

ENV = "CEL_LENS_THREADS"
"""Environment variable that pins torch's thread count (an integer >= 1, or ``auto``)."""

TINY_PARAMS = 20_000_000
"""Models with fewer parameters run on one thread (their operations are too small to split)."""

_BASELINE = torch.get_num_threads()  # torch's own default (or the user's choice before cel_lens)
_last_set: Optional[int] = None
_ceiling: Optional[int] = None  # the idle cores, when the machine was looked at
_counts: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def _pinned() -> Optional[int]:
    """The count ``CEL_LENS_THREADS`` pins, or ``None`` (unset or ``auto``)."""
    text = os.environ.get(ENV, "").strip().lower()
    if text in ("", "auto"):
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV}={text!r}: expected a number of threads >= 1, or 'auto'")
    return value


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


STAT = "/proc/stat"
"""Where Linux counts every core's busy and idle time (its first line: all cores together)."""
SAMPLE_S = 0.1
"""How long :func:`busy_now` watches the machine (10 ticks of 1/100 s per core: enough to count whole cores)."""


def _cpu_times(path: str = STAT) -> Optional[tuple[int, int]]:
    """``(idle, total)`` clock ticks of all cores from ``path``'s ``cpu`` line (idle includes
    waiting for I/O), or ``None`` where it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:]]
    except (OSError, ValueError):
        return None
    if fields[:1] != ["cpu"] or len(ticks) < 4:
        return None
    return ticks[3] + (ticks[4] if len(ticks) > 4 else 0), sum(ticks[:8])


def busy_now(path: str = STAT, seconds: float = SAMPLE_S) -> Optional[float]:
    """The fraction of the machine's cores busy over the next ``seconds`` (this process sleeps
    meanwhile, so it counts the others), or ``None`` without ``/proc/stat``. Unlike the load
    average it does not remember a process that finished a minute ago: a search started right
    after another command gets the cores that command left."""
    first = _cpu_times(path)
    if first is None:
        return None
    time.sleep(seconds)
    second = _cpu_times(path)
    if second is None or second[1] <= first[1]:
        return None
    return min(1.0, max(0.0, 1.0 - (second[0] - first[0]) / (second[1] - first[1])))


def idle_cores() -> Optional[float]:
    """Cores of this process's share that other processes leave idle: the busy share measured now
    (:func:`busy_now`), else the one-minute load average spread over every core of the machine;
    ``None`` where neither is known."""
    busy = busy_now()
    if busy is None:
        try:
            busy = os.getloadavg()[0] / (os.cpu_count() or 1)
        except (AttributeError, OSError):  # pragma: no cover - not Unix
            return None
    return _usable_cores() * max(0.0, 1.0 - busy)


def param_count(model: Any) -> Optional[int]:
    """Number of parameters of ``model`` (counted once per model object); ``None`` without any."""
    try:
        return _counts[model]
    except (KeyError, TypeError):
        pass
    if not hasattr(model, "parameters"):
        return None
    n = sum(p.numel() for p in model.parameters())
    try:
        _counts[model] = n
    except TypeError:
        pass
    return n


def choose_threads(n_params: Optional[int] = None, *, look_at_load: bool = False) -> int:
    """The thread count for a model of ``n_params`` parameters (``None``: unknown): ``CEL_LENS_THREADS``
    when set; one for a tiny model; else torch's default, lowered to the idle cores when
    ``look_at_load`` (use it only before this process has been busy: its own work is in the load)."""
    pinned = _pinned()
    if pinned is not None:
        return pinned
    if n_params is not None and n_params < TINY_PARAMS:
        return 1
    ceiling = max(1, _BASELINE if _ceiling is None else _ceiling)
    idle = idle_cores() if look_at_load else None
    if idle is None:
        return ceiling
    return max(1, min(ceiling, math.floor(idle + 0.5)))


def configure_threads(model: Any = None, *, look_at_load: bool = False) -> int:
    """Set torch's thread count by :func:`choose_threads` (for ``model`` when given) and return it;
    with ``look_at_load``, the idle cores also cap later calls. Leaves the count alone when
    ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` are set (and ``CEL_LENS_THREADS`` is not) or when it was
    changed since cel_lens last set it (or since cel_lens was imported)."""
    global _last_set, _ceiling
    current = torch.get_num_threads()
    if _pinned() is None:
        if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
            return current
        if current != (_BASELINE if _last_set is None else _last_set):
            return current
    n = choose_threads(None if model is None else param_count(model), look_at_load=look_at_load)
    if look_at_load and model is None and _pinned() is None:
        _ceiling = n
    if n != current:
        torch.set_num_threads(n)
    _last_set = n
    return n


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run the block on one torch thread (tiny tensors: the thread pool is pure overhead and extra
    threads only contend), then restore the thread count."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)

"""One writer per run directory: an exclusive ``flock`` on ``<run>/.lock``, named by its holder.

A search holds the lock from the moment it opens its run directory until it closes it, so a second
search into the same directory cannot evaluate (and record) what the first is evaluating, and two
processes that create the same directory at the same instant take turns: the first writes the
manifest, the second finds it. The holder writes ``pid host start-time`` into the lock file, so the
one that has to wait (or give up) can say who holds it. ``flock`` locks belong to an open file, so
the kernel drops them when the holder dies: a SIGKILLed search never leaves a stale lock.

Inside one process a second lock, per directory, stands beside the ``flock`` (which does not
tell threads apart): the thread that took the directory may open it again (every
:class:`~cel_lens.runs.RunDir` of one directory holds one reference, and the last to let go
releases it), while another thread of the process waits or is refused like another process, with
a message naming that thread. Two searches in two threads of one process therefore cannot write
one directory at once either.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOCK", "RunBusyError", "DirectoryLock", "acquire_lock", "lock_holder", "held_by"]

LOCK = ".lock"
"""Name of the lock file inside a run directory."""

_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class RunBusyError(RuntimeError):
    """Another process holds the run directory."""


@dataclass
class _Held:
    fd: int  # -1 while the owner is still taking the flock
    count: int
    owner: int  # threading.get_ident() of the thread that took it
    owner_name: str


_HELD: dict[str, _Held] = {}
_GUARD = threading.Condition()  # guards _HELD; notified whenever a directory is let go


def lock_holder(directory: Path, *, patience: float = 1.0) -> str:
    """Who holds ``directory``'s lock, as its holder wrote it (``"process 123 on host since ..."``).

    A holder writes its name just after taking the lock, so a reader that lost the race by a few
    milliseconds may find the file still empty: it looks again for up to ``patience`` seconds.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            text = (directory / LOCK).read_text(encoding="utf-8").split()
        except OSError:
            text = []
        if len(text) >= 3 and text[0].isdigit():
            return f"process {text[0]} on {text[1]} (since {text[2]})"
        if time.monotonic() >= deadline:
            return "another process"
        time.sleep(0.02)


def held_by(directory: Path) -> "str | None":
    """Who holds ``directory``'s lock now (:func:`lock_holder`), or ``None`` when nobody does: a
    shared ``flock`` on a read-only descriptor, taken and dropped at once, so a reader needs no
    write access and never blocks a writer for longer than that. A lock file a killed search left
    behind is not held (the kernel dropped its lock), and neither is a directory without one."""
    key = os.path.realpath(directory)
    with _GUARD:
        if key in _HELD:
            return f"this process ({os.getpid()})"
    try:
        fd = os.open(Path(directory) / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return lock_holder(Path(directory))
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the shared lock if it was taken
    return None


class DirectoryLock:
    """This process's share of the exclusive lock on one directory; :meth:`release` gives it back
    (idempotent). Obtained from :func:`acquire_lock`."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.released = False

    def release(self) -> None:
        """Drop this share; the last share of the process unlocks the file."""
        if self.released:
            return
        self.released = True
        with _GUARD:
            held = _HELD.get(self.key)
            if held is None:
                return
            held.count -= 1
            if held.count == 0:
                del _HELD[self.key]
                os.close(held.fd)  # closing the file releases the flock
                _GUARD.notify_all()


def _open_lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _try_flock(fd: int, wait: float, directory: Path) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                advice = "wait for it to finish, or choose another output directory"
                raise RunBusyError(f"run directory {directory} is in use by {lock_holder(directory)}; {advice}") from None
            time.sleep(0.05 if math.isinf(wait) else min(0.05, max(0.0, deadline - time.monotonic())))


def acquire_lock(directory: Path, *, wait: float = 0.0) -> "DirectoryLock | None":
    """Lock ``directory`` (which must exist) for this process: a new :class:`DirectoryLock` share.

    ``wait``: seconds to wait for another holder (``0``: fail at once, ``math.inf``: forever);
    then :class:`RunBusyError` names the holder. Returns ``None`` when the directory is not
    writable (nothing can be written there anyway; reading needs no lock).
    """
    key = os.path.realpath(directory)
    deadline = time.monotonic() + wait
    if not _reserve(key, deadline, directory):
        return DirectoryLock(key)  # this thread holds it already: one more share
    try:
        fd = _open_lock_file(directory / LOCK)
    except OSError as err:
        _unreserve(key)
        if err.errno in _NOT_WRITABLE:
            return None
        raise
    try:
        _try_flock(fd, max(0.0, deadline - time.monotonic()) if math.isfinite(wait) else wait, directory)
    except BaseException:
        _unreserve(key)
        raise
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    try:
        line = f"{os.getpid()} {socket.gethostname()} {stamp}\n".encode()
        os.pwrite(fd, line, 0)  # written before the cut, so a reader never sees an empty name
        os.ftruncate(fd, len(line))
    except OSError:
        pass  # the holder's name is a courtesy; the lock itself holds
    with _GUARD:
        _HELD[key].fd = fd
    return DirectoryLock(key)


def _reserve(key: str, deadline: float, directory: Path) -> bool:
    """Take ``key`` for this thread inside the process (True), or add a share to this thread's
    hold (False); wait for another thread's hold until ``deadline``, then :class:`RunBusyError`."""
    me = threading.get_ident()
    with _GUARD:
        while True:
            held = _HELD.get(key)
            if held is None:
                _HELD[key] = _Held(-1, 1, me, threading.current_thread().name)
                return True
            if held.owner == me:
                held.count += 1
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunBusyError(
                    f"run directory {directory} is in use by another thread ({held.owner_name}) of this process "
                    f"({os.getpid()}); wait for it to finish, or choose another output directory"
                )
            _GUARD.wait(timeout=min(left, 1.0))


def _unreserve(key: str) -> None:
    """Drop a reservation whose ``flock`` was not taken."""
    with _GUARD:
        held = _HELD.get(key)
        if held is not None and held.fd == -1:
            del _HELD[key]
            _GUARD.notify_all()

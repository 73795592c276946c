"""Progress bars: one helper, so every long loop of cel_lens reports progress the same way.

Where the output goes decides the form:

* a Jupyter kernel: a ``tqdm`` widget (``ipywidgets`` is a dependency of cel_lens), one for a whole
  search (:func:`progress_session`): each loop reuses it, and a loop nested inside another one
  adds no widget of its own (a saved notebook keeps no stale half-filled bars);
* a terminal: a ``tqdm`` text bar; nested bars take the next line and vanish when done;
* anything else (a pipe, a file, a notebook without ``ipywidgets``): a few plain lines, no carriage
  returns: one when a loop ends, and one at most every :data:`LOG_INTERVAL_S` seconds while it runs.
  A loop nested inside another one says nothing, so only the outer loop's lines appear.

``CEL_LENS_PROGRESS`` forces a form: ``bar``, ``log`` or ``off``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Iterable, Iterator, Optional, TextIO

__all__ = ["progress_bar", "progress_mode", "progress_session", "info_stream", "LogBar", "WidgetBar", "LOG_INTERVAL_S"]

LOG_INTERVAL_S = 30.0
"""Seconds between two lines of a plain-text progress report."""

_open_bars = 0  # plain-text reports open now: an inner one stays silent
_session: Optional[Any] = None  # the one notebook widget of a running search (progress_session)
_widget_open = False  # a notebook loop is showing now: a nested one stays silent


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (as tqdm.autonotebook decides)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # noqa: BLE001 - any failure: not a notebook
        return False


def progress_mode() -> str:
    """``"notebook"``, ``"bar"`` (a terminal), ``"log"`` (plain lines) or ``"off"``."""
    forced = os.environ.get("CEL_LENS_PROGRESS", "").strip().lower()
    if forced in ("bar", "log", "off"):
        return forced
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401 - tqdm's widget needs it
        except ImportError:
            return "log"
        return "notebook"
    stream = sys.stderr
    return "bar" if stream is not None and hasattr(stream, "isatty") and stream.isatty() else "log"


class _Loop:
    """What both reports share: iterating the loop (one ``update`` per item, closed at the end,
    whatever ends it) and ``with`` (closed on exit). Subclasses set ``iterable`` and define
    ``update`` and ``close``."""

    iterable: Optional[Iterable[Any]] = None

    def update(self, n: int = 1) -> None:  # pragma: no cover - defined by each report
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - defined by each report
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable if self.iterable is not None else ():
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> "_Loop":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LogBar(_Loop):
    """The ``tqdm`` calls cel_lens makes (``update``, ``close``, iteration, ``with``), reported as
    plain lines on stderr: at most one every ``interval`` seconds, and one at the end. Silent when
    ``enabled`` is False or when another report is open (a nested loop)."""

    def __init__(
        self, total: int, desc: str = "", unit: str = "it", iterable: Optional[Iterable[Any]] = None,
        enabled: bool = True, interval: float = LOG_INTERVAL_S,
    ) -> None:
        global _open_bars
        self.total, self.desc, self.unit, self.iterable, self.n = total, desc, unit, iterable, 0
        self.interval = interval
        self.silent = not enabled or _open_bars > 0
        self.closed = False
        self.start = self.last = time.monotonic()
        _open_bars += 0 if self.silent else 1

    def _line(self, now: float) -> str:
        elapsed = now - self.start
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = ""
        if 0 < self.n < self.total:
            eta = f", about {elapsed * (self.total - self.n) / self.n:.0f} s left"
        name = f"{self.desc}: " if self.desc else ""
        return f"{name}{self.n}/{self.total} {self.unit}{pct} in {elapsed:.1f} s{eta}"

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps; print a line if ``interval`` seconds passed since the last."""
        self.n += n
        now = time.monotonic()
        if not self.silent and not self.closed and now - self.last >= self.interval and self.n < self.total:
            print(self._line(now), file=sys.stderr, flush=True)
            self.last = now

    def close(self) -> None:
        """Print the final line (once)."""
        global _open_bars
        if self.closed:
            return
        self.closed = True
        if not self.silent:
            _open_bars -= 1
            print(self._line(time.monotonic()), file=sys.stderr, flush=True)


class WidgetBar(_Loop):
    """One loop shown on a notebook widget: the search's (:func:`progress_session`), reset to this
    loop's total and description, or its own when no search is running (closed with the loop)."""

    def __init__(self, total: int, desc: str, unit: str, iterable: Optional[Iterable[Any]], leave: bool) -> None:
        global _widget_open
        from tqdm.notebook import tqdm

        self.iterable, self.own = iterable, _session is None
        self.bar = tqdm(total=total, desc=desc, unit=unit, leave=leave) if self.own else _session
        if not self.own:
            self.bar.reset(total=total)
            self.bar.set_description(desc, refresh=False)
            self.bar.unit = unit
        self.closed, _widget_open = False, True

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps."""
        self.bar.update(n)

    def close(self) -> None:
        """End the loop: its own widget closes, the search's stays for the next loop."""
        global _widget_open
        if self.closed:
            return
        self.closed, _widget_open = True, False
        self.bar.close() if self.own else self.bar.refresh()


@contextlib.contextmanager
def progress_session(enabled: bool = True, desc: str = "search") -> Iterator[None]:
    """Within it (a whole search), notebook progress is one widget that every loop reuses; outside a
    notebook, or nested in another session, it changes nothing."""
    global _session
    if not enabled or _session is not None or progress_mode() != "notebook":
        yield
        return
    from tqdm.notebook import tqdm

    _session = tqdm(total=1, desc=desc, leave=True)
    try:
        yield
    finally:
        bar, _session = _session, None
        bar.close()


def info_stream() -> TextIO:
    """Where a search's plan and estimate go: stdout in a notebook (stderr shows red there, like an
    error), stderr elsewhere (stdout stays for results, and for ``--json`` alone)."""
    return sys.stdout if progress_mode() == "notebook" else sys.stderr


def progress_bar(
    total: int,
    enabled: bool = True,
    desc: str = "",
    unit: str = "it",
    leave: bool = False,
    iterable: Optional[Iterable[Any]] = None,
) -> Any:
    """A progress report over ``total`` steps in the form the output calls for (:func:`progress_mode`);
    a no-op when ``enabled`` is False. Use it as a context manager or call ``update``/``close``, or
    iterate over it when ``iterable`` is given."""
    mode = progress_mode() if enabled else "off"
    if mode in ("log", "off"):
        return LogBar(total, desc, unit, iterable, enabled=mode == "log")
    if mode == "notebook":
        if _widget_open:  # a loop inside a shown loop: no widget of its own
            return LogBar(total, desc, unit, iterable, enabled=False)
        return WidgetBar(total, desc, unit, iterable, leave)
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave)

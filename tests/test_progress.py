"""Progress reports: widgets in a notebook, text bars in a terminal, a few plain lines elsewhere
(a pipe gets no carriage returns), and nested loops that do not pile up."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cel_lens import progress
from cel_lens.progress import LogBar, progress_bar, progress_mode

ROOT = Path(__file__).resolve().parents[1]


def test_mode_follows_the_output(monkeypatch):
    monkeypatch.delenv("CEL_LENS_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", open(__file__))  # not a terminal
    assert progress_mode() == "log"
    monkeypatch.setenv("CEL_LENS_PROGRESS", "bar")
    assert progress_mode() == "bar"
    monkeypatch.setenv("CEL_LENS_PROGRESS", "")
    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    assert progress_mode() == "notebook"


def test_notebook_bars_are_widgets_without_a_warning(monkeypatch):
    from tqdm.notebook import tqdm_notebook

    monkeypatch.delenv("CEL_LENS_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TqdmWarning "IProgress not found" would fail here
        bar = progress_bar(3, True, "x")
        assert isinstance(bar.bar, tqdm_notebook)
        bar.close()


def test_plain_lines_one_at_the_end_and_nested_loops_silent(capsys, monkeypatch):
    monkeypatch.setenv("CEL_LENS_PROGRESS", "log")
    with progress_bar(4, True, "outer", unit="set") as outer:
        for _ in range(4):
            for _ in progress_bar(10, True, "inner", unit="batch", iterable=range(10)):
                pass
            outer.update(1)
    err = capsys.readouterr().err
    assert "\r" not in err and err.count("\n") == 1 and err.startswith("outer: 4/4 set (100%)")
    with progress_bar(5, False, "off") as bar:
        bar.update(5)
    assert capsys.readouterr().err == ""


def test_plain_lines_while_a_long_loop_runs(capsys):
    bar = LogBar(100, "long", interval=0.0)
    for _ in range(3):
        bar.update(10)
    bar.close()
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("long: 10/100 it (10%)") and "left" in lines[0]
    assert len(lines) == 4 and lines[-1].startswith("long: 30/100")


@pytest.mark.slow
def test_piped_cli_writes_a_few_lines(tmp_path):
    """``cel-lens evaluate ... 2>file``: plain lines, no carriage returns."""
    cmd = [sys.executable, "-m", "cel_lens.cli", "evaluate", "--model", "organism", "--task", "organism_a",
           "--n-test", "300", "--batch-size", "8", "--heads", "L0H1"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    progress_lines = [l for l in out.stderr.splitlines() if l.startswith("evaluate ")]
    assert "\r" not in out.stderr and 1 <= len(progress_lines) <= 3, out.stderr[-2000:]


class _Widgets:
    """A stand-in for ``tqdm.notebook.tqdm`` that counts the widgets made and what they last showed."""

    made: list["_Widgets"] = []

    def __init__(self, iterable=None, total=None, desc="", unit="it", leave=True):
        self.total, self.desc, self.n, self.closed = total, desc, 0, False
        _Widgets.made.append(self)

    def update(self, n=1):
        self.n += n

    def reset(self, total=None):
        self.total, self.n = total, 0

    def set_description(self, desc, refresh=True):
        self.desc = desc

    def refresh(self):
        pass

    def close(self):
        self.closed = True


def test_a_notebook_search_shows_one_widget_and_its_plan_on_stdout(monkeypatch, tmp_path, capsys, tiny_model):
    """A 5.6 s quick search made 13 widgets in a notebook, the saved notebook kept stale nested bars
    ("evaluate organism_a/dist x1: 0% 0/25"), and the plan went to stderr (red, like an error)."""
    import tqdm.notebook

    import cel_lens as cl
    from cel_lens.testing import planted_task

    monkeypatch.delenv("CEL_LENS_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    monkeypatch.setattr(tqdm.notebook, "tqdm", _Widgets)
    _Widgets.made = []
    task = planted_task(tiny_model, n=24, heads="L1H2")
    cl.search(tiny_model, task, k=2, pool_size=4, n_null=4, n_boot=50, out=tmp_path / "run", progress=True)
    assert len(_Widgets.made) == 1  # one widget for the whole search, every loop on it
    widget = _Widgets.made[0]
    assert widget.closed and widget.n == widget.total  # the last loop ended full: nothing stale
    captured = capsys.readouterr()
    assert "search plan:" in captured.out and "search plan:" not in captured.err
    _Widgets.made = []
    with progress_bar(2, True, "outer") as outer:  # outside a search: one widget, nested loops silent
        for _ in range(2):
            for _ in progress_bar(3, True, "inner", iterable=range(3)):
                pass
            outer.update(1)
    assert [w.desc for w in _Widgets.made] == ["outer"] and _Widgets.made[0].closed

"""save_figure: HTML always, static formats when the exporter works, one warning otherwise; PNG
export names the fix when no browser can start."""

from __future__ import annotations

import warnings
from pathlib import Path

import plotly.graph_objects as go
import pytest

from cel_lens.report import save
from cel_lens.report.side_effects import plot_side_effects


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    monkeypatch.setattr(save, "_static_failure", None)
    monkeypatch.setattr(save, "_warned", False)


def _patch_exporter(monkeypatch, fn) -> None:
    """Replace whatever static exporter save_figure goes through."""

    def as_method(self, path, format=None, scale=None):
        return fn(path)

    monkeypatch.setattr(go.Figure, "write_image", as_method)
    monkeypatch.setattr(save, "write_static_image", lambda fig, path, fmt="png", scale=2.0: fn(path), raising=False)


def _fig() -> go.Figure:
    return go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]))


def test_html_written_and_suffix_stripped(tmp_path):
    paths = save.save_figure(_fig(), tmp_path / "sub" / "plot.html", formats=("html",))
    assert paths == [tmp_path / "sub" / "plot.html"]
    text = paths[0].read_text()
    assert "plotly" in text.lower() and "[3,1,2]" in text.replace(" ", "")


def test_png_written_when_exporter_works(tmp_path, monkeypatch):
    def fake_write_image(path):
        with open(path, "wb") as f:
            f.write(b"\x89PNG fake")

    _patch_exporter(monkeypatch, fake_write_image)
    paths = save.save_figure(_fig(), tmp_path / "plot")
    assert [p.name for p in paths] == ["plot.html", "plot.png"]
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert save.png_export_available()


def test_png_failure_falls_back_to_html_and_warns_once(tmp_path, monkeypatch):
    calls = []

    def broken_write_image(path):
        calls.append(path)
        raise RuntimeError("Kaleido requires Google Chrome to be installed")

    _patch_exporter(monkeypatch, broken_write_image)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = save.save_figure(_fig(), tmp_path / "a")
        second = save.save_figure(_fig(), tmp_path / "b")
    assert [p.name for p in first] == ["a.html"] and [p.name for p in second] == ["b.html"]
    assert not (tmp_path / "a.png").exists()
    assert len([w for w in caught if "static figure export unavailable" in str(w.message)]) == 1
    assert len(calls) == 1  # the exporter is not retried after it failed once
    assert not save.png_export_available()


def test_unknown_format_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown figure format"):
        save.save_figure(_fig(), tmp_path / "x", formats=("bmp",))


def test_png_export_names_the_fix_when_no_browser_can_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import kaleido
    from kaleido.errors import ChromeNotFoundError

    def no_chrome(*args, **kwargs):
        raise ChromeNotFoundError("no chrome")

    monkeypatch.setattr(kaleido, "calc_fig_sync", no_chrome)
    monkeypatch.setattr(save, "_png_server_started", None)
    with pytest.raises(RuntimeError, match="apt-get install chromium"):
        save.write_static_image(plot_side_effects([[0.1]], ["a"]), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_a_first_render_that_fails_is_retried_once_and_a_failure_is_one_short_line(tmp_path, monkeypatch):
    """The first ``make demo`` after Chromium was installed printed a 700-character RuntimeWarning
    ("kaleido_scopes is not defined") and wrote HTML only; the next run wrote the PNGs."""
    import kaleido

    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("{'result': {'description': 'ReferenceError: kaleido_scopes is not defined'" + "x" * 700)
        return b"\x89PNG ok"

    monkeypatch.setattr(kaleido, "calc_fig_sync", flaky)
    monkeypatch.setattr(save, "_png_server_started", None)
    assert save.static_image(_fig()) == b"\x89PNG ok" and len(calls) == 2

    def broken(*args, **kwargs):
        raise RuntimeError("ReferenceError: kaleido_scopes is not defined " + "x" * 700)

    monkeypatch.setattr(kaleido, "calc_fig_sync", broken)
    monkeypatch.setattr(save, "_png_server_started", None)
    monkeypatch.setattr(save, "_static_failure", None)
    monkeypatch.setattr(save, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [p.name for p in save.save_figure(_fig(), tmp_path / "a")] == ["a.html"]
    (message,) = [str(w.message) for w in caught if "static figure export unavailable" in str(w.message)]
    assert len(message) < 200 and "\n" not in message and "kaleido_scopes is not defined" in message

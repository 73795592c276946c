"""Saving plotly figures: interactive HTML always, static PNG when an exporter works.

PNG export goes through kaleido, which needs a Chrome/Chromium it can launch. Where that is
missing (or fails), :func:`save_figure` still writes the HTML and warns once per process, so a
figure-producing command never fails just because a static renderer is absent.

plotly.js (4.8 MB) is not copied next to every figure. ``include_plotlyjs="shared"`` (what a run's
figures use) loads one copy per plotly version kept in a cache directory
(:func:`shared_plotlyjs`: ``$CEL_LENS_CACHE`` or ``~/.cache/cel_lens``), and the plotly CDN when that
copy cannot be read (a page served over HTTP, or a folder moved to another machine). The local copy
comes first so that figures open offline on the machine that wrote them; the CDN keeps a shared or
moved folder working wherever there is a network. A file that must open anywhere without a network
is ``include_plotlyjs=True`` (self-contained, +4.8 MB).

kaleido >= 1 drives a Chrome/Chromium found on the machine (Debian: ``apt-get install chromium``;
elsewhere set ``BROWSER_PATH``). plotly.js comes from the installed plotly package and MathJax is
off, so nothing is fetched from a network. The first image of a process is rendered by a one-shot
browser (an error surfaces instead of a hang); from the second on, a persistent browser renders
them (~0.3 s an image instead of ~3 s), closed at exit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence, Union

__all__ = [
    "save_figure", "png_export_available", "write_static_image", "static_image", "shared_plotlyjs", "CHROMIUM_HINT", "one_line",
]

#: What to install when PNG export cannot start a browser.
CHROMIUM_HINT = (
    "PNG export needs kaleido>=1 and a Chrome/Chromium: `apt-get install chromium` "
    "(or set BROWSER_PATH to a Chrome/Chromium binary)"
)

_STATIC_FORMATS = {"png", "svg", "pdf", "jpg", "jpeg", "webp"}
_static_failure: Union[str, None] = None  # first static-export error seen in this process
_warned = False
_png_server_started: Union[bool, None] = None  # None: no image rendered yet


def png_export_available() -> bool:
    """Whether static (PNG) export has not failed in this process so far."""
    return _static_failure is None


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        _warned = True


def shared_plotlyjs() -> Path:
    """The one local copy of plotly.js that ``include_plotlyjs="shared"`` figures load (written once
    per plotly version into ``$CEL_LENS_CACHE``, else ``$XDG_CACHE_HOME/cel_lens``, else
    ``~/.cache/cel_lens``)."""
    import plotly
    from plotly.offline import get_plotlyjs_version

    root = os.environ.get("CEL_LENS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cel_lens"
    target = Path(root) / f"plotly-{get_plotlyjs_version()}.min.js"
    source = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as src, tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".tmp") as tmp:
            shutil.copyfileobj(src, tmp)
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, target)  # atomic: two writers never leave a half-written copy
    return target


def _shared_loader() -> str:
    """Script tags: the shared local plotly.js, then the CDN if that did not load."""
    from plotly.offline import get_plotlyjs_version

    cdn = f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"
    return (
        f'<script charset="utf-8" src="{shared_plotlyjs().as_uri()}"></script>'
        f"<script>window.Plotly || document.write('<script charset=\"utf-8\" src=\"{cdn}\"><\\/script>')</script>"
    )


def _write_html(fig: Any, path: Path, include_plotlyjs: Union[bool, str]) -> None:
    if include_plotlyjs != "shared":
        fig.write_html(str(path), include_plotlyjs=include_plotlyjs)
        return
    page = fig.to_html(include_plotlyjs=False, full_html=True)
    path.write_text(page.replace("<head>", "<head>" + _shared_loader(), 1), encoding="utf-8")


def save_figure(
    fig: Any,
    path_stem: Union[str, Path],
    formats: Sequence[str] = ("html", "png"),
    *,
    include_plotlyjs: Union[bool, str] = "cdn",
    scale: float = 2.0,
) -> list[Path]:
    """Write ``fig`` to ``path_stem.<fmt>`` for each format; return the paths actually written.

    HTML is always written when asked for (``include_plotlyjs="cdn"`` keeps files small;
    ``"shared"`` loads the one local copy of :func:`shared_plotlyjs`, else the CDN; ``True`` makes a
    self-contained file that opens anywhere without a network). Static formats are written when the
    exporter works; otherwise they are skipped with a single warning per process.
    """
    stem = Path(path_stem)
    if stem.suffix.lower().lstrip(".") in {"html", *_STATIC_FORMATS}:
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    global _static_failure
    written: list[Path] = []
    for fmt in formats:
        fmt = fmt.lower().lstrip(".")
        path = stem.with_name(f"{stem.name}.{fmt}")
        if fmt == "html":
            _write_html(fig, path, include_plotlyjs)
            written.append(path)
        elif fmt in _STATIC_FORMATS:
            if _static_failure is not None:
                _warn_once(f"static figure export unavailable ({_static_failure}); wrote HTML only")
                continue
            try:
                write_static_image(fig, path, fmt=fmt, scale=scale)
            except Exception as err:  # kaleido raises various errors when Chrome is missing
                _static_failure = one_line(err)
                _warn_once(f"static figure export unavailable ({_static_failure}); wrote HTML only")
                continue
            written.append(path)
        else:
            raise ValueError(f"unknown figure format {fmt!r}; use html or one of {sorted(_STATIC_FORMATS)}")
    return written


def one_line(err: BaseException, width: int = 120) -> str:
    """``Type: first line of the message``, cut to ``width`` characters (kaleido's JavaScript errors
    are one 700-character line of JSON)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = text if len(text) <= width else text[: width - 1] + "…"
    return f"{type(err).__name__}: {text}"


def _kaleido_options() -> dict[str, Any]:
    """kaleido options that keep rendering offline: plotly.js from the installed package, no MathJax."""
    import plotly

    opts: dict[str, Any] = {"mathjax": False}
    local = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if local.exists():
        opts["plotlyjs"] = str(local)
    return opts


def write_static_image(fig: Any, path: Union[str, Path], fmt: str = "png", scale: float = 2.0) -> Path:
    """Render ``fig`` to a static image file offline (kaleido >= 1 with the machine's Chromium);
    raise ``RuntimeError`` naming the fix when no browser can be launched."""
    path = Path(path)
    path.write_bytes(static_image(fig, fmt, scale))
    return path


def static_image(fig: Any, fmt: str = "png", scale: float = 2.0) -> bytes:
    """``fig`` (a figure or its dict) rendered to image bytes offline, as :func:`write_static_image`."""
    global _png_server_started
    try:
        import kaleido
        from kaleido.errors import ChromeNotFoundError
    except ImportError as err:
        raise RuntimeError(f"{CHROMIUM_HINT} ({err})") from err
    fig_dict = fig.to_dict() if hasattr(fig, "to_dict") else dict(fig)
    layout = fig_dict.get("layout", {})
    opts = {"format": fmt, "width": layout.get("width") or 700, "height": layout.get("height") or 500, "scale": scale}
    for attempt in (1, 2):  # a freshly installed browser's first page can miss kaleido's scripts: retry once
        try:
            if _png_server_started is None:  # first image: one-shot browser, errors surface
                data = kaleido.calc_fig_sync(fig_dict, opts=opts, kopts=_kaleido_options())
                _png_server_started = False
            else:  # a browser works: keep one open for this and later images
                if not _png_server_started:
                    kaleido.start_sync_server(silence_warnings=True, **_kaleido_options())
                    _png_server_started = True
                data = kaleido.calc_fig_sync(fig_dict, opts=opts)
            return data
        except ChromeNotFoundError as err:
            raise RuntimeError(CHROMIUM_HINT) from err
        except Exception:  # noqa: BLE001 - anything else: once more, then the caller's one-line warning
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover

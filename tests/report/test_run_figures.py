"""A run's figures as files: HTML that opens offline and PNG, written directly and by
``cel-lens report``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from plotly.offline import get_plotlyjs_version

from cel_lens.report.run_figures import write_run_figures


def _assert_png(path: Path, min_bytes: int = 20_000) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_bytes, (path, len(data))


def _run_dir(tmp_path: Path, result: dict) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "result.json").write_text(json.dumps(result))
    return run_dir


def _assert_shared_plotlyjs(html: str, folder: Path, cache: Path) -> None:
    """The page loads the one shared local plotly.js (then the CDN), and none sits in ``folder``."""
    import plotly

    shared = cache / f"plotly-{get_plotlyjs_version()}.min.js"
    assert f'src="{shared.as_uri()}"' in html and f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js" in html
    assert shared.read_bytes() == (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert not list(folder.glob("*.js")) and html.index(shared.as_uri()) < html.index("Plotly.newPlot")


def test_write_run_figures_writes_html_and_png(tmp_path: Path, hand, monkeypatch):
    monkeypatch.setenv("CEL_LENS_CACHE", str(tmp_path / "cache"))
    run_dir = _run_dir(tmp_path, hand.make())
    out = run_dir / "figures"
    written = write_run_figures(run_dir, out)
    assert sorted(p.name for p in written) == sorted(
        f"{stem}.{fmt}" for stem in ("gain_heatmap", "discovery_vs_test") for fmt in ("html", "png")
    )
    for stem in ("gain_heatmap", "discovery_vs_test"):
        html = out / f"{stem}.html"
        assert 5_000 < html.stat().st_size < 100_000 and "Plotly.newPlot" in html.read_text()
        _assert_shared_plotlyjs(html.read_text(), out, tmp_path / "cache")  # opens offline, no 4.8 MB copy
        _assert_png(out / f"{stem}.png")
    second = write_run_figures(run_dir, tmp_path / "again", formats=("html",))
    assert sorted(p.name for p in second) == ["discovery_vs_test.html", "gain_heatmap.html"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"plotly-{get_plotlyjs_version()}.min.js"]


def test_report_command_prints_the_result_and_writes_figures(tmp_path: Path, capsys, hand, monkeypatch):
    from cel_lens.cli import main

    monkeypatch.setenv("CEL_LENS_CACHE", str(tmp_path / "cache"))
    run_dir = _run_dir(tmp_path, hand.make())
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    # the one result formatter: "McNemar exact p  0.02" (the old plots formatter printed "McNemar p=0.02")
    assert "L1H0+L2H1" in out and re.search(r"McNemar exact p\s+0\.02\b", out)
    for stem in ("gain_heatmap", "discovery_vs_test"):
        html = run_dir / "figures" / f"{stem}.html"
        assert html.stat().st_size > 5_000 and "Plotly.newPlot" in html.read_text()
        _assert_shared_plotlyjs(html.read_text(), run_dir / "figures", tmp_path / "cache")
        _assert_png(run_dir / "figures" / f"{stem}.png")

    assert main(["report", str(run_dir), "--no-figures", "--json", "--out", str(tmp_path / "none")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["heads"] == "L2H1+L1H0" and data["figures"] == [] and not (tmp_path / "none").exists()

    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "cel-lens: error:" in capsys.readouterr().err

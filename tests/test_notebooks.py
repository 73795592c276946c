"""The notebooks run top to bottom offline (executed with nbclient, as a reader would), show their
figures, keep them when exported to HTML (``jupyter nbconvert --to html``), and are committed with
outputs cleared."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
# figures each notebook must display (plotly outputs), at least
MIN_FIGURES = {"01_quickstart": 3, "02_theory": 3, "03_attention_patterns": 5, "04_exploring_a_run": 4, "06_run_explorer": 8}
# modules a notebook is written against (the quickstart runs on the built-in model organism)
NEEDS = {"01_quickstart": ("cel_lens.organism",), "04_exploring_a_run": ("cel_lens.organism",),
         "06_run_explorer": ("cel_lens.organism", "cel_lens.analysis.explorer")}


def test_the_notebooks_exist_with_cleared_outputs():
    assert {p.stem for p in NOTEBOOKS} >= set(MIN_FIGURES)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not cleared"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the kernel inherits this environment: offline; the notebooks choose their own plotly renderer
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
    monkeypatch.setenv("CEL_LENS_NB_SMOKE", "1")  # the real-model notebook runs every cell on smaller splits
    for module in NEEDS.get(path.stem, ()):
        pytest.importorskip(module, reason=f"{path.name} needs {module}, which is not in this tree yet")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) >= MIN_FIGURES.get(path.stem, 1), f"{path.name}: {len(figures)} figures shown"
    for fig in figures:
        assert fig["data"]["application/vnd.plotly.v1+json"]["data"], f"{path.name}: an empty figure"
        # a copy an exported page keeps: a PNG (a browser renders it here) or plotly's HTML
        assert {"image/png", "text/html"} & set(fig["data"]), f"{path.name}: a figure only a live front end draws"
    exported = _export_html(nb)
    kept = exported.count('src="data:image/png;base64') + exported.count('class="plotly-graph-div"')
    assert kept >= MIN_FIGURES.get(path.stem, 1), f"{path.name}: {kept} figures in the exported HTML"


def _export_html(nb) -> str:
    """The executed notebook as ``jupyter nbconvert --to html`` writes it."""
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    return body

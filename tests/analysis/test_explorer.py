"""The Jupyter explorer, driven from Python as clicks drive it: a finished organism run with its
model, an unfinished run without one, and a grid directory with a cell selector."""

from __future__ import annotations

import shutil

import pytest

import cel_lens as cl
from cel_lens.analysis.explorer import Explorer, explore, explorer_panels, grid_cells
from cel_lens.heads import HeadSet
from cel_lens.runs import RecordingOracle, RunDir
from cel_lens.runs.export import run_task
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig


@pytest.fixture(scope="module")
def organism():
    return cl.load_model("organism")


@pytest.fixture(scope="module")
def organism_run(organism, tmp_path_factory):
    root = tmp_path_factory.mktemp("explore")
    cl.search(organism, "organism_a", out=root / "run", progress=False, **cl.QUICK)
    return cl.load_run(root / "run")


def test_click_shows_the_heads_panel_and_figures(organism, organism_run):
    ex = explore(organism_run, organism)
    panel = ex.click(0, 1)
    hs = HeadSet.parse("L0H1")
    intact = [e for e in organism_run.evaluations if e.split == "dist" and not e.heads][-1].accuracy
    ablated = [e for e in organism_run.evaluations if e.split == "dist" and e.heads == hs][-1].accuracy
    assert panel["heads"] == "L0H1" and panel["dist"]["gain"] == pytest.approx(ablated - intact, abs=1e-4)
    lo, hi = panel["dist"]["ci"]
    assert lo <= panel["dist"]["gain"] <= hi
    assert panel["test"] is None  # not S-hat: D_test stays sealed
    assert 'data-heads="L0H1"' in ex.panel_view.value
    # the model panels: attention intact | ablated for L0H1, direct logit bars for L0H1
    titles = [a.text for a in ex.attention.layout.annotations]
    assert titles[0] == "L0H1 intact" and titles[1].startswith("L0H1 ablated")
    assert [list(t.x) for t in ex.logit.data][0] == ["L0H1"]
    assert panel["model"]["logit"]["rows"][0]["head"] == "L0H1"


def test_activations_are_computed_once_per_example(organism, organism_run):
    ex = Explorer(organism_run, organism)
    ex.click(0, 2)
    runs = ex.cache.runs
    ex.click(0, 1)
    ex.click(0, 2)  # back to a head already shown on the same example: nothing runs
    after = ex.cache.runs
    ex.select("L0H2")
    assert ex.cache.runs == after and after > runs


def test_s_hat_shows_its_recorded_test_gain(organism, organism_run):
    ex = explore(organism_run)
    s_hat = str(organism_run.result.heads)
    panel = ex.select(s_hat)
    assert panel["test"]["gain"] == pytest.approx(organism_run.result.gain, abs=1e-4)
    assert "no model given" in ex.model_view.value  # without a model: what the run recorded


def test_examples_selector_browses_fixed_and_broken(organism_run):
    ex = explore(organism_run)
    ex.select("L0H1")
    kinds = {k for k, _ in ex.examples.options and [o[1] for o in ex.examples.options]}
    assert kinds <= {"fixed", "broken"} and kinds
    last = ex.examples.options[-1][1]
    ex.examples.value = last
    entry = ex.panel["dist"][last[0]][last[1]]
    assert entry["id"] in ex.example_view.value


def _synthetic_killed(path, budget):
    class KilledAfter(SyntheticOracle):
        budget_left = budget

        def evaluate(self, split, head_sets, *, stage=""):
            self.budget_left -= 1
            if self.budget_left < 0:
                raise KeyboardInterrupt("killed")
            return super().evaluate(split, head_sets, stage=stage)

    oracle = KilledAfter(n_layers=4, n_heads=3, n_dist=60, n_test=60, base_acc=0.6, seed=0, effects={"L1H2": 0.1})
    manifest = {"model": {"id": "synthetic-4x3"}, "task": {"name": "synthetic"}, "options": {"k": 2, "pool_size": 3, "scorer": "exact"}}
    with RunDir.open(path, manifest) as rd:
        try:
            run_search(
                RecordingOracle(oracle, rd),
                config=SearchConfig(k=2, pool_size=3, n_null=5, n_boot=100, chunk=4),
                progress=False,
            )
        except KeyboardInterrupt:
            pass


def test_unfinished_run_shows_what_it_recorded(tmp_path):
    _synthetic_killed(tmp_path / "killed", budget=2)
    ex = explore(tmp_path / "killed")
    assert ex.record.result is None and "stage 1" in ex.summary.value
    z = ex.heatmap.data[0].z
    assert any(v is None for row in z for v in row)  # heads not scored yet
    scored = [(l, h) for l, row in enumerate(z) for h, v in enumerate(row) if v is not None]
    panel = ex.click(*scored[0])
    assert panel["dist"] is not None and panel["test"] is None


def test_grid_directory_picks_a_cell(tmp_path):
    for name, budget in (("synthetic-4x3__a", 2), ("synthetic-4x3__b", 100)):
        _synthetic_killed(tmp_path / name, budget)
    assert list(grid_cells(tmp_path)) == ["synthetic-4x3__a", "synthetic-4x3__b"]
    ex = explore(tmp_path)
    assert ex.record.path.name == "synthetic-4x3__a" and ex.record.result is None
    ex.cell.value = "synthetic-4x3__b"
    assert ex.record.path.name == "synthetic-4x3__b" and ex.record.result is not None
    assert ex.panel["heads"] == str(ex.record.result.heads)


def test_explorer_panels_run_d_dist_only(organism, organism_run):
    panels = explorer_panels(organism, organism_run, ["L0H0"], n_examples=2)
    ids = [b["example"]["id"] for b in panels["L0H0"]]
    task = run_task(organism_run)
    assert len(ids) == 2 and set(ids) <= {e.id for e in task.dist} and not set(ids) & {e.id for e in task.test}


def test_widget_clicks_reach_the_panels(organism, organism_run):
    ex = explore(organism_run, organism)
    box = ex.widget
    assert ex.heatmap is box.children[2].children[0]  # the live heatmap is the one on screen
    trace = ex.heatmap.data[0]
    from plotly.callbacks import InputDeviceState, Points

    points = Points(point_inds=[2], xs=[2], ys=[0], trace_name=trace.name, trace_index=0)
    trace._dispatch_on_click(points, InputDeviceState())  # what the front end sends on a click of L0H2
    assert ex.panel["heads"] == "L0H2"
    assert ex.attention.layout.annotations[0].text == "L0H2 intact"


def test_a_grid_of_models_takes_a_model_per_manifest_id(organism, tmp_path):
    for task in ("organism_a", "organism_b"):
        cl.search(organism, task, out=tmp_path / f"organism__{task}", progress=False, **cl.QUICK)
    ex = explore(tmp_path, {"someone-else": organism})
    assert ex.model is None and "no model given" in ex.model_view.value
    ex = explore(tmp_path, {"organism": organism})
    assert ex.model is organism and ex.panel["model"] is not None
    first = ex.panel
    ex.cell.value = "organism__organism_b"  # same head, another run: a fresh panel from that run's record
    assert ex.panel is not first and ex.record.path.name == "organism__organism_b"
    b_intact = [e for e in ex.record.evaluations if e.split == "dist" and not e.heads][-1].accuracy
    assert ex.panel["dist"]["acc_intact"] == pytest.approx(b_intact, abs=1e-4)
    with pytest.raises(ValueError, match="n_examples"):
        Explorer(tmp_path, n_examples=0)

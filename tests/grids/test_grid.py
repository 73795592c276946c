"""The grid: its plan is checked before anything loads; on the model organism every pair runs (a
pair that cannot run is reported in its row), each model loads once, the side effects equal an
independent computation and the outputs rebuild byte for byte; a 2 models × 2 tasks grid (the
organism and a tiny checkpoint with planted heads) killed with SIGKILL resumes pair by pair and its
table equals its run directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cel_lens.grids import GRID_FILE, PAPER_MODEL_NAMES, PAPER_TASKS, GridState, grid, make_plan, rebuild
from cel_lens.grids.grid_plan import Pair
from cel_lens.grids.summary import selection_stability
from cel_lens.heads import HeadSet
from cel_lens.selection.result_parts import Stability
from cel_lens.runs import RunDir, load_run
from cel_lens.stats import holm_adjust

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import planted_grid  # noqa: E402

SMALL = dict(n_dist=48, n_test=48, k=2, pool_size=4, n_null=5, n_boot=200, progress=False, png=False, verbose=False)
OUTPUTS = ("table.md", "table.json", "report.html")


def _bytes(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


# ---------------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------------
def test_plan_presets_and_per_model_tasks(tmp_path):
    plan = make_plan("paper", "paper", tmp_path)
    assert plan.models == PAPER_MODEL_NAMES and len(plan.models) == 3
    assert all(plan.tasks[m] == PAPER_TASKS for m in plan.models) and len(plan.pairs) == 12
    assert plan.pair_dir(Pair("Qwen/Qwen2.5-3B-Instruct", "boolq")) == tmp_path / "Qwen-Qwen2.5-3B-Instruct__boolq"
    plan = make_plan(["organism", "organism"], {"organism": "organism_a,organism_b"}, tmp_path, options={"k": 2})
    assert plan.models == ("organism",) and plan.tasks["organism"] == ("organism_a", "organism_b")
    assert plan.config.k == 2 and plan.task_options == {"n_dist": None, "n_test": None, "data_dir": None,
                                                      "chat_template": None, "max_new_tokens": None}


def test_tasks_load_with_every_task_option_of_the_grid(tmp_path, monkeypatch):
    """The grid's tasks get what a search would: the split seed, the chat-template choice, and the
    generation budget where the task generates (before: chat_template and split_seed were dropped)."""
    from cel_lens.grids import resources

    calls = {}
    monkeypatch.setattr(resources, "load_task", lambda name, **kw: calls.setdefault(name, kw))
    options = {"k": 2, "seed": 3, "split_seed": 7, "chat_template": True, "max_new_tokens": 64, "n_dist": 10}
    plan = make_plan("organism", "organism_a,mbpp", tmp_path, options=options)
    cache = resources.TaskCache(plan, GridState.open(plan))
    cache.get("organism_a"), cache.get("mbpp")
    assert calls["organism_a"] == {"seed": 7, "chat_template": True, "n_dist": 10}
    assert calls["mbpp"] == {"seed": 7, "chat_template": True, "n_dist": 10, "max_new_tokens": 64}


def test_task_overrides_reach_their_task_alone(tmp_path, monkeypatch):
    """Per-task options (split sizes, generation budget, loader options) load that task alone; the
    grid's options stay for the others."""
    from cel_lens.grids import resources

    calls = {}
    monkeypatch.setattr(resources, "load_task", lambda name, **kw: calls.setdefault(name, kw))
    overrides = {"organism_b": {"n_dist": 20, "n_test": 30, "flavour": "x"}, "mbpp": {"max_new_tokens": 32}}
    plan = make_plan("organism", "organism_a,organism_b,mbpp", tmp_path, options={"n_dist": 10}, task_overrides=overrides)
    cache = resources.TaskCache(plan, GridState.open(plan))
    for name in plan.task_names:
        cache.get(name)
    assert calls["organism_a"] == {"seed": 0, "n_dist": 10}
    assert calls["organism_b"] == {"seed": 0, "n_dist": 20, "n_test": 30, "flavour": "x"}
    assert calls["mbpp"] == {"seed": 0, "n_dist": 10, "max_new_tokens": 32}
    assert json.loads((tmp_path / GRID_FILE).read_text())["plan"]["task_overrides"] == overrides


@pytest.mark.parametrize(
    "overrides, error",
    [
        ({"boolq": {"n_dist": 5}}, "not a task of this grid"),
        ({"organism_a": {"chat_template": True}}, "whole grid"),
        ({"organism_a": {"data_dir": "x"}}, "whole grid"),
        ({"organism_a": {"max_new_tokens": 8}}, "generation tasks"),
        ({"organism_a": {"n_dist": 0}}, "n_dist"),
    ],
)
def test_bad_task_overrides_fail_before_anything_loads(tmp_path, overrides, error):
    with pytest.raises(ValueError, match=error):
        grid("organism", "organism_a,organism_b", out=tmp_path, task_overrides=overrides)
    assert not (tmp_path / GRID_FILE).exists()


def test_a_grid_directory_refuses_other_task_overrides(tmp_path):
    GridState.open(make_plan("organism", "organism_a", tmp_path, task_overrides={"organism_a": {"n_test": 8}}))
    with pytest.raises(ValueError, match="other options.*task_overrides"):
        GridState.open(make_plan("organism", "organism_a", tmp_path, task_overrides={"organism_a": {"n_test": 9}}))


def test_per_task_sizes_reach_the_search_and_the_side_effects(tmp_path):
    """A task with its own n_test: its search and every side effect measured on it use that D_test."""
    run = grid("organism", ["organism_a", "organism_b"], out=tmp_path, task_overrides={"organism_b": {"n_test": 32}}, **SMALL)
    assert {r["task"]: r["status"] for r in run.rows} == {"organism_a": "ok", "organism_b": "ok"}
    for task, n in (("organism_b", 32), ("organism_a", 48)):
        tests = [e for e in RunDir(tmp_path / f"organism__{task}").evaluations() if e.split == "test"]
        assert tests and all(e.correct.numel() == n for e in tests)
    side = list(RunDir(tmp_path / "side_effects" / "organism__organism_b").evaluations())
    assert side and all(e.correct.numel() == 32 for e in side)
    side = list(RunDir(tmp_path / "side_effects" / "organism__organism_a").evaluations())
    assert side and all(e.correct.numel() == 48 for e in side)


def test_a_finished_run_of_other_options_does_not_fill_a_row(tmp_path):
    """A pair directory holding a finished search made with other options (run outside the grid)
    fails its row with the differences instead of reporting that search as the grid's."""
    import cel_lens as cl

    small = {k: v for k, v in SMALL.items() if k not in ("png", "verbose")}
    cl.search("organism", "organism_a", out=tmp_path / "organism__organism_a", **{**small, "k": 1})
    run = grid("organism", ["organism_a"], out=tmp_path, **SMALL)
    (row,) = run.rows
    assert row["status"] != "ok" and "other options" in str(row.get("error")) and "options.k: 1 -> 2" in str(row.get("error"))
    assert not (tmp_path / "side_effects").exists() or not any((tmp_path / "side_effects").iterdir())
    other = tmp_path / "sizes"  # the same search options, another D_test: caught by the splits
    cl.search("organism", "organism_a", out=other / "organism__organism_a", **{**small, "n_test": 40})
    (row,) = grid("organism", ["organism_a"], out=other, **SMALL).rows
    assert row["status"] == "failed" and "splits.test.n: 40 -> 48" in str(row.get("error"))


def test_side_effects_skip_a_pair_of_other_options(tmp_path):
    """The other-options pair's Ŝ is not evaluated on the grid's other tasks."""
    import cel_lens as cl

    small = {k: v for k, v in SMALL.items() if k not in ("png", "verbose")}
    cl.search("organism", "organism_a", out=tmp_path / "organism__organism_a", **{**small, "k": 1})
    run = grid("organism", ["organism_a", "organism_b"], out=tmp_path, **SMALL)
    block = run.table["side_effects"]["organism"]
    assert all(v is None for v in block["gain"][0])  # no Ŝ for organism_a: its row failed
    side = {e.heads for e in RunDir(tmp_path / "side_effects" / "organism__organism_b").evaluations()}
    assert side == set()  # nothing to evaluate on organism_b: the only other Ŝ is not the grid's


def test_models_load_with_the_grid_settings(tmp_path, monkeypatch):
    """The grid loads each model as a search would: device, dtype, loader and the BOS rule."""
    from cel_lens.grids import resources

    calls = []
    monkeypatch.setattr(resources, "load_model", lambda name, **kw: calls.append((name, kw)) or object())
    plan = make_plan("ckpt/", "arithmetic", tmp_path, options={"loader": "hooked", "bos": "never", "dtype": "bfloat16"})
    session = resources.ModelSession("ckpt/", plan, GridState.open(plan))
    session.get(), session.get()
    assert calls == [("ckpt/", {"device": None, "dtype": "bfloat16", "loader": "hooked", "bos": "never"})]


@pytest.mark.parametrize(
    "models, tasks, options, error",
    [
        ("organism", "organism_a,no_such_task", {}, "unknown task"),
        ("organism", {"other": ["organism_a"]}, {}, "name exactly the grid's models"),
        ("organism", "", {}, "at least one task"),
        ("organism", "organism_a", {"k": 0}, "k must be"),
        ("organism", "organism_a", {"backend": "nowhere"}, "unknown backend"),
        (["a/b", "a-b"], "organism_a", {}, "share the run directory"),
    ],
)
def test_plan_errors_before_anything_loads(tmp_path, models, tasks, options, error):
    with pytest.raises(ValueError, match=error):
        grid(models, tasks, out=tmp_path, **options)
    assert not (tmp_path / GRID_FILE).exists()


def test_unknown_option_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="unknown option"):
        grid("organism", "organism_a", out=tmp_path, pool=3)


def test_a_grid_directory_refuses_other_search_options(tmp_path):
    GridState.open(make_plan("organism", "organism_a", tmp_path, options={"k": 2}))
    GridState.open(make_plan("organism", "organism_a,organism_b", tmp_path, options={"k": 2, "batch_size": 3}))
    with pytest.raises(ValueError, match="other options.*config"):
        GridState.open(make_plan("organism", "organism_a", tmp_path, options={"k": 3}))


def test_cel_lens_grid_is_the_function():
    import inspect

    import cel_lens
    import cel_lens.grids  # noqa: F401 - importing the package must not rebind the function

    assert inspect.isfunction(cel_lens.grid) and cel_lens.grid is grid


def test_selection_stability_is_read_from_the_result_or_missing():
    assert selection_stability(Stability()) is None
    assert selection_stability(Stability(selection=0.75)) == 0.75  # a bare number, as older records hold it
    recorded = {"method": "fixed pool", "n_resamples": 1000, "selected": "L0H0", "selected_frequency": 0.8125, "wins": []}
    assert selection_stability(Stability(selection=recorded)) == 0.8125  # as run_search writes it
    half = {**recorded, "selected_frequency": 0.4, "incomplete": 0.5}  # half the winners not known
    assert selection_stability(Stability(selection=half)) == pytest.approx(0.8)
    assert selection_stability(Stability(selection={**recorded, "incomplete": 0.75})) is None  # most not known


# ---------------------------------------------------------------------------------------------
# the organism grid, in this process
# ---------------------------------------------------------------------------------------------
def _but_holm(row: dict) -> dict:
    """A row without its Holm-adjusted p (which depends on the grid's declared family) and its seal
    verdict: the organism's two tasks share D_test rows (same prompt, same target), so whether one
    pair's selection came before the other's read of those rows depends on the order the pairs ran."""
    return {k: v for k, v in row.items() if k not in ("p_holm", "selected_before_test", "seal_reason")}


@pytest.fixture(scope="module")
def organism_grid(tmp_path_factory):
    """The organism on its two tasks and MBPP (which cannot run: code execution is not allowed)."""
    out = tmp_path_factory.mktemp("grid")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CEL_LENS_ALLOW_CODE_EXECUTION", raising=False)
        run = grid("organism", ["organism_a", "organism_b", "mbpp"], out=out, **SMALL)
    return out, run


def test_failed_pair_is_reported_and_the_others_run(organism_grid):
    out, run = organism_grid
    rows = {r["task"]: r for r in run.rows}
    assert rows["mbpp"]["status"] == "failed" and "CodeExecutionNotAllowed" in rows["mbpp"]["error"]
    assert rows["mbpp"]["run_dir"] is None and not (out / "organism__mbpp").exists()
    assert [rows[t]["status"] for t in ("organism_a", "organism_b")] == ["ok", "ok"]
    table = json.loads((out / "table.json").read_text())
    assert table == run.table
    assert "failed: CodeExecutionNotAllowed" in (out / "table.md").read_text()
    assert table["side_effects"]["organism"]["errors"]["mbpp"].startswith("CodeExecutionNotAllowed")


def test_each_model_loads_once_and_rows_equal_the_runs(organism_grid):
    out, run = organism_grid
    assert run.table["timings"]["load model/organism"]["calls"] == 1
    ok = [r for r in run.rows if r["status"] == "ok"]
    for row in ok:
        res = load_run(out / row["run_dir"]).result.to_dict()
        for key in ("heads", "n_dist", "n_test", "test_acc_intact", "test_acc_ablated", "gain", "ci_low", "ci_high", "p_value"):
            assert row[key] == res[key], key
    # one-sided (ablation helps) Holm over the declared family: every planned pair, the failed one with p = 1
    assert all(row["p_enhance"] == load_run(out / row["run_dir"]).result.p_enhance for row in ok)
    expected = holm_adjust([r["p_enhance"] for r in ok] + [1.0])
    assert [r["p_holm"] for r in ok] == pytest.approx(expected.tolist()[: len(ok)])
    assert run.table["holm"]["family"] == 3 and run.table["holm"]["finished"] == 2
    assert all(row["selected_before_test"] == load_run(out / row["run_dir"]).result.selected_before_test for row in ok)
    # the ledger is keyed on content: organism_a's search read D_test rows that organism_b's D_test holds
    # too (same prompt and target), so organism_b, searched after it, was not sealed, and says by whom
    sealed = {row["task"]: row["selected_before_test"] for row in ok}
    assert sealed == {"organism_a": True, "organism_b": False}
    seal_b = load_run(out / next(r["run_dir"] for r in ok if r["task"] == "organism_b")).result.seal
    assert seal_b["prior_test_reads"] > 0 and "organism__organism_a" in seal_b["reason"]


def test_side_effects_equal_an_independent_computation(organism_grid):
    """The recorded side-effect matrix (activation stores, run directories) equals
    :func:`cel_lens.analysis.side_effect_matrix` (plain evaluations) on the same splits."""
    from cel_lens.analysis import side_effect_matrix
    from cel_lens.model.load import load_model
    from cel_lens.tasks.registry import load_task

    out, run = organism_grid
    tasks = {t: load_task(t, n_dist=48, n_test=48, seed=0) for t in ("organism_a", "organism_b")}
    heads = {r["task"]: r["heads"] for r in run.rows if r["status"] == "ok"}
    matrix, labels = side_effect_matrix(load_model("organism"), tasks, heads)
    block = run.table["side_effects"]["organism"]
    assert block["tasks"] == ["organism_a", "organism_b", "mbpp"]
    got = np.array([[np.nan if v is None else v for v in row[:2]] for row in block["gain"][:2]])
    np.testing.assert_allclose(got, matrix, atol=1e-6)  # side_effect_matrix works in float32; 1/48 apart
    assert all(v is None for v in block["gain"][2])  # MBPP has no Ŝ
    intact = {e.heads: e.correct for e in RunDir(out / "organism__organism_b").evaluations() if e.split == "test"}
    side = {e.heads: e.correct for e in RunDir(out / "side_effects" / "organism__organism_b").evaluations()}
    assert side[HeadSet()].equal(intact[HeadSet()])  # the intact pass, twice: the same bits


def test_rerun_is_instant_and_rebuild_is_identical(organism_grid):
    out, run = organism_grid
    before = _bytes(out)
    evaluations = {p: p.read_bytes() for p in out.rglob("evaluations.jsonl")}
    rebuilt = rebuild(out, png=False)
    assert _bytes(out) == before and rebuilt.table == run.table
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CEL_LENS_ALLOW_CODE_EXECUTION", raising=False)
        again = grid("organism", ["organism_a", "organism_b", "mbpp"], out=out, **SMALL)
    assert {p: p.read_bytes() for p in out.rglob("evaluations.jsonl")} == evaluations  # nothing evaluated
    assert "load model/organism" in again.table["timings"]
    assert again.table["timings"]["load model/organism"]["calls"] == 1  # nothing needed the model
    assert again.rows == run.rows


# ---------------------------------------------------------------------------------------------
# 2 models × 2 tasks, killed and resumed
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planted_checkpoint(tmp_path_factory) -> str:
    return str(planted_grid.make_checkpoint(tmp_path_factory.mktemp("planted") / "llama"))


def _eval_keys(path: Path) -> list[tuple[str, str]]:
    return [(e.split, str(e.heads)) for e in RunDir(path).evaluations()]


def _kill_once_first_pair_has_evaluations(cmd: list[str], first: Path) -> None:
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    log = first / "evaluations.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and '"eval"' in log.read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the grid finished (or died) before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_killed_grid_resumes_and_its_table_equals_the_runs(planted_checkpoint, tmp_path):
    out = tmp_path / "grid"
    cmd = [sys.executable, str(HERE / "planted_grid.py"), planted_checkpoint, str(out)]
    first = out / Pair("organism", "organism_a").name
    _kill_once_first_pair_has_evaluations(cmd, first)
    assert not (out / "table.json").exists()
    recorded = set(_eval_keys(first))
    assert recorded

    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    table = json.loads((out / "table.json").read_text())
    for run_dir in [p for p in out.rglob("manifest.json")]:
        keys = _eval_keys(run_dir.parent)
        assert len(keys) == len(set(keys)), [k for k, c in Counter(keys).items() if c > 1]
    assert recorded <= set(_eval_keys(first))

    rows = table["rows"]
    assert [(r["model"], r["task"]) for r in rows] == [
        ("organism", "organism_a"), ("organism", "organism_b"),
        (planted_checkpoint, "planted_a"), (planted_checkpoint, "planted_b"),
    ]
    for row in rows:  # the table is its run directories
        assert row["status"] == "ok", row
        res = load_run(out / row["run_dir"]).result.to_dict()
        for key in ("heads", "n_dist", "n_test", "dist_acc_intact", "dist_acc_ablated", "test_acc_intact",
                    "test_acc_ablated", "gain", "ci_low", "ci_high", "p_value", "null_p"):
            assert row[key] == res[key], (row["task"], key)
    assert [r["p_holm"] for r in rows] == pytest.approx(holm_adjust([r["p_enhance"] for r in rows]).tolist())  # one-sided
    planted = {r["task"]: r for r in rows if r["model"] == planted_checkpoint}
    for task, head in planted_grid.PLANTED.items():  # the known best ablation, found
        assert planted[task]["heads"] == head and planted[task]["test_acc_ablated"] == 1.0
    loads = {k: v["calls"] for k, v in table["timings"].items() if k.startswith("load model/")}
    assert set(loads) == {"load model/organism", f"load model/{planted_checkpoint}"}
    assert all(calls <= 2 for calls in loads.values())  # at most once in each of the two invocations

    block = table["side_effects"][planted_checkpoint]
    cell = next(c for c in block["cells"] if (c["ablated_for"], c["evaluated_on"]) == ("planted_a", "planted_b"))
    side = {e.heads: e.correct for e in RunDir(out / "side_effects" / Pair(planted_checkpoint, "planted_b").name).evaluations()}
    intact, ablated = (side[h].double().mean().item() for h in sorted(side, key=len))
    assert cell["gain"] == pytest.approx(ablated - intact) and cell["heads"] == "L1H2"
    assert block["gain"][0][1] == cell["gain"] and block["gain"][0][0] == planted["planted_a"]["gain"]


# ---------------------------------------------------------------------------------------------
# another backend: its settings reach every search and every side-effect evaluation
# ---------------------------------------------------------------------------------------------
def test_backend_settings_reach_every_search_and_side_effect(organism_grid, tmp_path, monkeypatch):
    import recording_backend

    from cel_lens.backends.base import BACKENDS

    monkeypatch.setitem(BACKENDS, "recording", "recording_backend:RecordingBackend")
    recording_backend.CALLS.clear()
    run = grid("organism", ["organism_a", "organism_b"], out=tmp_path, backend="recording", store_budget=2**20, **SMALL)
    calls = recording_backend.CALLS
    assert [(model, task) for model, task, _ in calls] == [("organism", "organism_a"), ("organism", "organism_b")] * 2
    assert all(s.backend == "recording" and s.store_budget == 2**20 and not s.progress for _, _, s in calls)
    assert "load model/organism" not in run.table["timings"]  # the backend loads the model, not the grid
    local = {(r["model"], r["task"]): r for r in organism_grid[1].rows}
    # the same rows, but Holm's family: that grid declared three pairs (its MBPP pair failed), this one two
    assert all(_but_holm(row) == _but_holm(local[row["model"], row["task"]]) for row in run.rows)


def test_pairs_run_at_once_and_give_the_same_table(organism_grid, tmp_path, monkeypatch):
    """``parallel_pairs=2``: the two searches open their oracles at the same time (a gate lets the
    first two through only together; one after the other, the first would time out and fail its
    row) and the table equals the one-at-a-time grid's."""
    import recording_backend

    from cel_lens.backends.base import BACKENDS

    monkeypatch.setitem(BACKENDS, "recording", "recording_backend:RecordingBackend")
    monkeypatch.setattr(recording_backend, "GATE", recording_backend.Gate(2, timeout=120))
    recording_backend.CALLS.clear()
    run = grid("organism", ["organism_a", "organism_b"], out=tmp_path, backend="recording", parallel_pairs=2, **SMALL)
    assert sorted(task for _, task, _ in recording_backend.CALLS[:2]) == ["organism_a", "organism_b"]
    local = {(r["model"], r["task"]): r for r in organism_grid[1].rows}
    assert all(_but_holm(row) == _but_holm(local[row["model"], row["task"]]) for row in run.rows) and len(run.rows) == 2
    assert GridState.read(tmp_path).errors == {}


@pytest.mark.parametrize("value, message", [(2, "needs a backend whose workers load their own models"),
                                            (0, "parallel_pairs must be an integer >= 1"),
                                            (1.5, "parallel_pairs must be an integer >= 1")])
def test_parallel_pairs_are_checked_before_any_work(tmp_path, value, message):
    with pytest.raises(ValueError, match=message):
        grid("organism", ["organism_a"], out=tmp_path / "grid", parallel_pairs=value, **SMALL)
    assert not (tmp_path / "grid").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_ray_grid_equals_the_local_grid(organism_grid, tmp_path):
    """Two pairs searched at once on Ray actors, one worker each (one Ray start costs minutes on a
    busy 2-core machine; the side effects go through the same ``Backend.open``, checked above with a
    recording backend): the same rows as the local grid's, and Ray still up for its owner."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run = grid("organism", ["organism_a", "organism_b"], out=tmp_path, backend="ray", parallel_pairs=2, **SMALL)
        assert ray.is_initialized()  # the grid did not start Ray, so it did not stop it
    finally:
        ray.shutdown()
    local = {(r["model"], r["task"]): r for r in organism_grid[1].rows}

    # Holm's p depends on the family: 2 planned pairs here, 3 there (MBPP failed)
    assert len(run.rows) == 2 and all(_but_holm(row) == _but_holm(local[row["model"], row["task"]]) for row in run.rows)
    assert (run.table["holm"]["family"], organism_grid[1].table["holm"]["family"]) == (2, 3)
    assert "load model/organism" not in run.table["timings"]  # the actors load their own replicas

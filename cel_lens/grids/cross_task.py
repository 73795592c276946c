"""The grid's side-effect matrix: every selected Ŝ of a model evaluated on the D_test of each of
that model's other tasks (the damage elsewhere the paper's theory predicts).

The evaluations are recorded like a search's, in one run directory per (model, task evaluated)
under ``DIR/side_effects/``: the intact model and every other task's Ŝ on that task's D_test, with
per-example bits, so a killed grid resumes them and the table is rebuilt without a model. The
diagonal (Ŝ on its own task) is the pair's own test result.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from cel_lens.backends.base import get_backend
from cel_lens.grids.grid_plan import SIDE_EFFECTS_DIR, GridPlan, Pair
from cel_lens.grids.resources import ModelSession, TaskCache, describe_error
from cel_lens.grids.state import GridState
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.seal import SealReader
from cel_lens.heads import HeadSet
from cel_lens.model.load import resolve_dtype
from cel_lens.runs.run_dir import RunDir
from cel_lens.runs.manifest import build_manifest
from cel_lens.runs.recording_oracle import RecordingOracle

__all__ = ["STAGE", "selections", "wanted_sets", "recorded", "measure_side_effects"]

STAGE = "side_effect"
"""The stage recorded with each side-effect evaluation."""


def selections(plan: GridPlan, model: str, state: Optional[GridState] = None) -> dict[str, HeadSet]:
    """Task -> Ŝ of every finished pair of ``model`` (read from the run directories); with
    ``state``, not of a pair whose last attempt failed (e.g. its directory holds a run of other
    options, whose Ŝ is not this grid's)."""
    out = {}
    for task in plan.tasks[model]:
        if state is not None and state.error(Pair(model, task).name) is not None:
            continue
        raw = RunDir(plan.pair_dir(Pair(model, task))).read_result()
        if raw is not None:
            out[task] = HeadSet.parse(raw["heads"])
    return out


def wanted_sets(chosen: Mapping[str, HeadSet], target: str) -> list[HeadSet]:
    """What to evaluate on ``target``'s D_test: the intact model and every other task's Ŝ (once
    each); empty when no other task has a selection."""
    others = list(dict.fromkeys(s for task, s in chosen.items() if task != target))
    return [HeadSet(), *[s for s in others if s != HeadSet()]] if others else []


def recorded(path: Path) -> dict[HeadSet, torch.Tensor]:
    """Head set -> D_test correctness recorded in a side-effect run directory (empty if none)."""
    run = RunDir(path)
    if not run.manifest_path.exists():
        return {}
    return {e.heads: e.correct for e in run.evaluations() if e.split == "test"}


def _evaluate(plan: GridPlan, handle: Any, tasks: TaskCache, model: str, target: str, sets: list[HeadSet]) -> None:
    """Open a backend oracle over the model (``handle``: the object, or its name for the backend to
    load) and ``target``, and record ``sets`` on its D_test."""
    task = tasks.get(target)
    settings = plan.settings
    store_dtype = None if plan.config.store_dtype is None else resolve_dtype(plan.config.store_dtype)
    owner = SealReader(f"grid side effects on {target}")  # recorded in the seal's ledger, owned by the grid
    context = EvalContext.from_environment(plan.config.precision, reader=owner)
    oracle = get_backend(settings.backend).open(handle, task, settings, store_dtype=store_dtype, context=context)
    try:
        manifest = build_manifest(oracle.model_manifest, task, {"purpose": SIDE_EFFECTS_DIR, "seed": plan.config.seed})
        run = RunDir.open(plan.side_effect_dir(model, target), manifest, ignore=("versions", "cel_lens"))
        RecordingOracle(oracle, run, guard_test=False).evaluate("test", sets, stage=STAGE)
    finally:
        oracle.close()


def measure_side_effects(
    plan: GridPlan, state: GridState, session: ModelSession, tasks: TaskCache, model: str,
    log: Optional[Callable[[str], None]] = None,
) -> None:
    """Evaluate every selected Ŝ of ``model`` on each of its other tasks' D_test (what is recorded
    already is not evaluated again). A task that cannot be evaluated is reported under its key in
    ``grid.json`` and leaves its column empty; the others still run."""
    chosen = selections(plan, model, state)
    for target in plan.tasks[model]:
        sets = wanted_sets(chosen, target)
        key = f"{SIDE_EFFECTS_DIR}/{Pair(model, target).name}"
        have = recorded(plan.side_effect_dir(model, target))
        if not sets or all(s in have for s in sets):
            continue
        problem = tasks.problem(target)
        if problem is not None:
            state.fail(key, problem)
            continue
        t0 = None
        try:
            handle = session.get()  # loading the model is timed on its own
            t0 = time.perf_counter()
            _evaluate(plan, handle, tasks, model, target, sets)
        except Exception as err:  # one task's column fails, the rest of the matrix still runs
            state.fail(key, describe_error(err))
            _log(log, f"side effects on {Pair(model, target)} failed: {describe_error(err)}")
        else:
            state.succeed(key)
            _log(log, f"side effects on {Pair(model, target)}: {len(sets) - 1} selection(s), {time.perf_counter() - t0:.1f} s")
        finally:
            if t0 is not None:
                state.add_time(f"side effects/{Pair(model, target).name}", time.perf_counter() - t0)


def _log(log: Optional[Callable[[str], None]], message: str) -> None:
    if log is not None:
        log(message)

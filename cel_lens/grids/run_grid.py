"""``cel_lens.grid(models, tasks)``: the paper's Table 1 in one call.

It reads top to bottom: check the plan (:mod:`~cel_lens.grids.grid_plan`) and open ``grid.json``; for
each model, load it once (on first need) and run every task's search in its own run directory
inside the grid's (a finished pair is not searched again, a killed one resumes, a failing one is
reported in its row and the others still run); then evaluate each Ŝ of that model on its other
tasks' D_test (:mod:`~cel_lens.grids.cross_task`); release the model; finally build the table
from the directory alone and write ``table.md``, ``table.json`` and ``report.html``
(:mod:`cel_lens.report.grid`).

Pairs run one after another in this process. With ``backend="ray"`` each search (and each side-
effect evaluation) spreads its evaluations over Ray actors, which load their own model replicas,
and ``parallel_pairs=N`` runs N searches at once, each on its share of the cluster
(:mod:`~cel_lens.grids.parallel`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from cel_lens.config import ExecutionSettings, SearchConfig
from cel_lens.grids.parallel import check_parallel_pairs, run_at_once, shared_cluster
from cel_lens.grids.grid_plan import GridPlan, ModelsLike, Pair, TasksLike, make_plan
from cel_lens.grids.resources import ModelSession, TaskCache, describe_error
from cel_lens.grids.cross_task import measure_side_effects
from cel_lens.grids.state import GridState
from cel_lens.grids.summary import build_table
from cel_lens.pipeline import search
from cel_lens.report.grid import grid_html, grid_markdown, write_grid_outputs
from cel_lens.runs.manifest import build_manifest, upgrade_manifest
from cel_lens.runs.run_dir import MANIFEST, RESULT, describe_manifest_diff
from cel_lens.selection.result import pp

__all__ = ["GridRun", "grid", "rebuild", "run_pair"]

Log = Optional[Callable[[str], None]]


@dataclass
class GridRun:
    """A grid directory's table (``table.json``'s dict), the files written, and the directory."""

    path: Path
    table: dict[str, Any]
    outputs: list[Path] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per pair (model, task, sizes, accuracies, Δ, CI, p, Holm p, Ŝ, status, ...)."""
        return self.table["rows"]

    def __str__(self) -> str:
        return grid_markdown(self.table)

    def _repr_html_(self) -> str:
        return grid_html(self.table, self.results)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_pair(plan: GridPlan, state: GridState, session: ModelSession, tasks: TaskCache, pair: Pair, log: Log = None) -> str:
    """Search ``pair`` in its run directory unless it has finished; returns ``"done"`` (finished
    before), ``"ok"`` or ``"failed"`` (the error is kept in ``grid.json`` and shown in its row)."""
    path = plan.pair_dir(pair)
    if (path / RESULT).exists():
        diffs = _finished_differently(plan, tasks, pair, path)
        if diffs:  # another configuration's result must not fill this grid's row
            message = f"{path} holds a finished run made with other options ({'; '.join(diffs)}); use another --out"
            state.fail(pair.name, message)
            _say(log, f"{pair}: failed: {message}")
            return "failed"
        state.succeed(pair.name)
        return "done"
    problem = tasks.problem(pair.task)
    if problem is not None:
        state.fail(pair.name, problem)
        _say(log, f"{pair}: failed: {problem}")
        return "failed"
    t0 = None
    try:
        model = session.get()  # timed on its own
        t0 = time.perf_counter()
        run = search(model, tasks.get(pair.task), plan.config, out=path, settings=plan.settings)
    except Exception as err:  # one pair fails, the grid goes on
        state.fail(pair.name, describe_error(err))
        _say(log, f"{pair}: failed: {describe_error(err)}")
        return "failed"
    finally:
        if t0 is not None:
            state.add_time(f"search/{pair.name}", time.perf_counter() - t0)
    state.succeed(pair.name)
    r = run.result
    _say(log, f"{pair}: Ŝ = {r.heads}, test {pp(r.test.acc_intact, False)} -> {pp(r.test.acc_ablated, False)} "
              f"({pp(r.test.gain)})")
    return "ok"


def _finished_differently(plan: GridPlan, tasks: TaskCache, pair: Pair, path: Path) -> list[str]:
    """How the finished run in ``path`` differs from what this grid would search for ``pair``: its
    manifest against the one the search would write (search options, task and task options, split
    sizes and contents; the directory names the model), as a run directory compares them. A task
    that cannot load here is compared on the search options alone."""
    if not (path / MANIFEST).exists():
        return [f"no {MANIFEST} beside its result"]
    had = upgrade_manifest(json.loads((path / MANIFEST).read_text(encoding="utf-8")))
    options = plan.config.manifest_options(plan.settings.use_store)
    if tasks.problem(pair.task) is not None:
        return describe_manifest_diff({"options": had.get("options")}, {"options": options})
    want = build_manifest({}, tasks.get(pair.task), options)
    keys = ("options", "task", "splits")
    return describe_manifest_diff({k: had.get(k) for k in keys}, {k: want[k] for k in keys})


def _one_pair_at_a_time(plan: GridPlan, state: GridState, log: Log) -> None:
    """Model by model: load it once, search each of its tasks, measure its side effects, release it."""
    tasks_cache = TaskCache(plan, state)
    for model in plan.models:
        session = ModelSession(model, plan, state)
        try:
            for task in plan.tasks[model]:
                run_pair(plan, state, session, tasks_cache, Pair(model, task), log)
            measure_side_effects(plan, state, session, tasks_cache, model, log)
        finally:
            session.release()


def _pairs_at_once(plan: GridPlan, state: GridState, log: Log, parallel_pairs: int) -> None:
    """Every pair's search, ``parallel_pairs`` at a time, then each model's side effects (its
    workers load the model; this process holds none)."""
    tasks_cache = TaskCache(plan, state)
    sessions = {model: ModelSession(model, plan, state) for model in plan.models}
    run_at_once(plan.pairs, lambda pair: run_pair(plan, state, sessions[pair.model], tasks_cache, pair, log), parallel_pairs)
    for model in plan.models:
        measure_side_effects(plan, state, sessions[model], tasks_cache, model, log)


def _say(log: Log, message: str) -> None:
    if log is not None:
        log(message)


def rebuild(out: Union[str, os.PathLike], *, png: bool = True) -> GridRun:
    """Build a grid directory's table from its run directories (no model) and write its outputs."""
    table, results = build_table(out)
    outputs = write_grid_outputs(table, results, out, png=png)
    return GridRun(Path(out), table, outputs, results)


def grid(
    models: ModelsLike,
    tasks: TasksLike,
    *,
    out: Union[str, os.PathLike] = "runs/table",
    config: Optional[SearchConfig] = None,
    settings: Optional[ExecutionSettings] = None,
    png: bool = True,
    verbose: bool = True,
    parallel_pairs: int = 1,
    task_overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
    **search_options: Any,
) -> GridRun:
    """Run a CEL search for every model × task pair and measure each Ŝ's side effects on the other
    tasks of its model; returns a :class:`GridRun` and writes ``table.md``, ``table.json`` and
    ``report.html`` (plus ``summary.png`` when ``png``) in ``out``.

    ``models``: hub ids, checkpoint directories or ``"organism"`` (a list, ``"a,b"``, or ``"paper"``
    for the paper's three); ``tasks``: task names for every model (``"paper"``: the paper's four),
    or a mapping model -> its task names. ``search_options`` are :func:`cel_lens.search`'s (any
    :class:`~cel_lens.config.SearchConfig` or :class:`~cel_lens.config.ExecutionSettings` field,
    ``n_dist``, ``n_test``, ``data_dir``); every pair gets the same, except what ``task_overrides``
    (task -> options) sets for one task: its split sizes, generation budget or loader options
    (``{"boolq": {"dist_from": "validation", "n_dist": 100}}``). Each pair is a run directory
    ``out/<model>__<task>``; running the same call again resumes pair by pair. A pair that fails
    (e.g. MBPP without ``CEL_LENS_ALLOW_CODE_EXECUTION=1``) is reported in its row; the others run.
    ``parallel_pairs``: searches run at once (above 1 only with ``backend="ray"``, whose actors load
    their own replicas; the cluster's workers are shared among them unless ``workers`` is given).
    """
    plan = make_plan(models, tasks, out, config=config, settings=settings, options=search_options,
                     task_overrides=task_overrides)
    check_parallel_pairs(plan, parallel_pairs)
    state = GridState.open(plan)
    log: Log = _stderr if verbose else None
    if parallel_pairs == 1:
        _one_pair_at_a_time(plan, state, log)
    else:
        with shared_cluster(plan.settings, parallel_pairs) as shared:
            _pairs_at_once(replace(plan, settings=shared), state, log, parallel_pairs)
    state.finish()
    result = rebuild(plan.out, png=png)
    _say(log, f"grid: {len(plan.pairs)} pairs in {plan.out}; wrote {', '.join(p.name for p in result.outputs)}")
    return result

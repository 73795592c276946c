"""The grid's table, read from its directory alone (no model): one row per pair from its run
directory, Holm-adjusted p-values across the grid, the side-effect matrices with a CI and a
McNemar p for every cell, and where the time went. ``table.json`` is this dict."""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import torch

from cel_lens.grids.grid_plan import SIDE_EFFECTS_DIR, Pair
from cel_lens.grids.cross_task import recorded
from cel_lens.grids.state import GridState
from cel_lens.heads import HeadSet
from cel_lens.runs.run_dir import RunDir
from cel_lens.selection.result import Result
from cel_lens.selection.result_parts import Stability, TestOutcome, known_share
from cel_lens.stats import holm_adjust, mcnemar_exact, paired_bootstrap_ci

__all__ = ["selection_stability", "build_table", "pair_row", "result_columns", "side_effect_block", "enhancement_p",
           "holm_family"]

_RESULT_KEYS = (
    "n_dist", "n_test", "dist_acc_intact", "dist_acc_ablated", "dist_gain", "test_acc_intact", "test_acc_ablated",
    "gain", "ci_low", "ci_high", "alpha", "p_value", "heads", "null_p", "k", "pool_size", "scorer",
    "selected_before_test", "p_enhance", "calibration",
)


def selection_stability(stability: Stability) -> Optional[float]:
    """How often Ŝ wins stage 2 when D_dist is resampled, as a result's typed part records it
    (``result.stability.selection``): of the resamples whose winner is known
    (:func:`cel_lens.selection.result_parts.known_share`, as the text and the heatmap state it);
    ``None`` when the run does not record it or most winners are not known. The one place that
    knows what the number is made of (a bare number in records written before the stability record)."""
    value: Any = stability.selection
    if isinstance(value, Mapping):  # cel_lens.selection.stability: {"selected_frequency", ...}
        frequency = value["selected_frequency"]
        if not isinstance(frequency, numbers.Real):
            return None
        incomplete = float(value.get("incomplete") or 0.0)  # NotRequired: written only when some winners are not known
        return known_share(float(frequency), incomplete)
    return float(value) if isinstance(value, numbers.Real) else None


def enhancement_p(test: TestOutcome) -> Optional[float]:
    """The one-sided p of "ablation raises D_test accuracy" of a finished pair's D_test part:
    recorded as ``p_enhance``, or, for results written before it, from the two-sided exact McNemar
    p (half of it when the gain is positive and it is below 1, where the two tails are known to be
    equal; 1 otherwise: a harmful or unchanged Ŝ is never a discovery)."""
    if test.p_enhance is not None:
        return float(test.p_enhance)
    p, gain = test.p_value, test.gain
    if p is None or gain is None:  # always recorded, but a value JSON could not hold may be null
        return None
    return float(p) / 2 if float(gain) > 0 and float(p) < 1 else 1.0


def holm_family(rows: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """Holm across the grid, one-sided for enhancement, over the family declared by the plan:
    every planned pair counts, and a failed or unfinished one enters with p = 1, so a failure cannot
    shrink the family. Sets each row's ``p_holm``; harmful pairs (significant two-sided, Δ < 0) are
    counted apart and never as discoveries."""
    p = [1.0 if r["p_enhance"] is None else float(r["p_enhance"]) for r in rows]
    for row, adjusted in zip(rows, holm_adjust(p) if rows else []):
        row["p_holm"] = float(adjusted) if row["p_enhance"] is not None else None
    harmful = sum(1 for r in rows if r["status"] == "ok" and r["gain"] is not None and r["gain"] < 0
                  and r["p_value"] is not None and r["p_value"] <= alpha)
    ok = [r for r in rows if r["status"] == "ok"]
    out = {"family": len(rows), "finished": len(ok), "alpha": alpha,
           "sided": "one-sided (ablation helps)",
           "rejected": sum(1 for r in rows if r["p_holm"] is not None and r["p_holm"] <= alpha),
           "harmful": harmful,
           "sealed": sum(1 for r in ok if r["selected_before_test"] is True),
           "unsealed": [f"{r['model']} × {r['task']}" for r in ok if r["selected_before_test"] is False]}
    unknown = [f"{r['model']} × {r['task']}" for r in ok if r["selected_before_test"] is None]
    return {**out, "seal_not_recorded": unknown} if unknown else out  # a result written before the seal


def result_columns(result: Result, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A finished pair's columns of its table row, read through the result's typed parts. Only
    ``alpha`` is read from the record ``raw`` itself: records written before it was kept lack it, and
    their rows show it missing (the typed default, 0.05, would state a level the run never recorded)."""
    dist, test = result.discovery, result.test
    return {
        "n_dist": result.n_dist, "n_test": result.n_test, "dist_acc_intact": dist.acc_intact,
        "dist_acc_ablated": dist.acc_ablated, "dist_gain": dist.gain, "test_acc_intact": test.acc_intact,
        "test_acc_ablated": test.acc_ablated, "gain": test.gain, "ci_low": test.ci_low, "ci_high": test.ci_high,
        "alpha": raw.get("alpha"), "p_value": test.p_value, "heads": result.heads, "null_p": result.null.p,
        "k": result.k, "pool_size": result.pool_size, "scorer": result.scorer,
        "selected_before_test": test.selected_before_test, "p_enhance": enhancement_p(test),  # seal None: not recorded
        "calibration": result.calibration, "selection_stability": selection_stability(result.stability),
        "seal_reason": (test.seal or {}).get("reason"),  # reason: NotRequired (a seal without one says nothing)
    }


def pair_row(out: Union[str, os.PathLike], pair: Pair, error: Optional[str]) -> tuple[dict[str, Any], Optional[dict]]:
    """The table row of ``pair`` and its raw ``result.json`` (``None`` unless finished).

    ``status``: ``ok`` (finished), ``failed`` (its last attempt raised ``error``, or found a finished
    run of other options; its result is then not shown), ``unfinished``
    (a run directory without a result: killed, or running) or ``not run``."""
    run = RunDir(Path(out) / pair.name)
    raw = run.read_result()
    row: dict[str, Any] = {"model": pair.model, "task": pair.task, "status": "not run", "error": None}
    row.update({k: None for k in _RESULT_KEYS})
    row.update(selection_stability=None, run_dir=pair.name, seal_reason=None)
    if error is not None:  # its last attempt failed (a result there may be another configuration's)
        row.update(status="failed", error=error)
        raw = None
    elif raw is not None:
        row.update(result_columns(Result.from_dict(raw), raw), status="ok")
    elif run.manifest_path.exists():  # no result: the sizes, where the manifest holds them (no typed record)
        splits = run.manifest.get("splits", {})
        row.update(status="unfinished", n_dist=splits.get("dist", {}).get("n"), n_test=splits.get("test", {}).get("n"))
    if raw is None and not run.manifest_path.exists():
        row["run_dir"] = None
    return row, raw


def _cell(intact: torch.Tensor, ablated: torch.Tensor, n_boot: int, seed: int) -> dict[str, Any]:
    low, high = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, seed=seed)
    n = int(intact.shape[0])
    return {
        "n": n, "intact": float(intact.double().mean()), "ablated": float(ablated.double().mean()),
        "gain": (int(ablated.sum()) - int(intact.sum())) / n, "ci_low": low, "ci_high": high,
        "p_value": mcnemar_exact(intact, ablated),
    }


def side_effect_block(
    out: Path, model: str, tasks: list[str], rows: Mapping[str, dict], config: Mapping[str, Any], errors: Mapping[str, str]
) -> dict[str, Any]:
    """One model's side effects: ``gain[i][j]`` is the test gain on ``tasks[j]`` of the Ŝ selected
    for ``tasks[i]`` (``None``: no selection, or not measured), and one cell record per measured
    entry (its own task's from the pair's result; the others with a paired bootstrap CI and McNemar
    p from the recorded bits). ``config``: the plan's search config (every field of
    :class:`~cel_lens.config.SearchConfig`); ``errors``: task evaluated -> why its column is missing."""
    n = len(tasks)
    gain: list[list[Optional[float]]] = [[None] * n for _ in range(n)]
    cells, column_errors = [], {}
    for j, target in enumerate(tasks):
        have = recorded(out / SIDE_EFFECTS_DIR / Pair(model, target).name)
        err = errors.get(f"{SIDE_EFFECTS_DIR}/{Pair(model, target).name}")
        if err:
            column_errors[target] = err
        for i, source in enumerate(tasks):
            row = rows[source]
            if row["status"] != "ok":
                continue
            heads = HeadSet.parse(row["heads"])
            if i == j:
                cell = {k: row[k] for k in ("ci_low", "ci_high", "p_value", "gain")}
                cell.update(n=row["n_test"], intact=row["test_acc_intact"], ablated=row["test_acc_ablated"])
            elif heads in have and HeadSet() in have:
                cell = _cell(have[HeadSet()], have[heads], int(config["n_boot"]), int(config["seed"]))
            else:
                continue
            gain[i][j] = cell["gain"]
            cells.append({"ablated_for": source, "evaluated_on": target, "heads": str(heads), **cell})
    return {"tasks": list(tasks), "gain": gain, "cells": cells, "errors": column_errors}


def _finite(obj: Any) -> Any:
    """``obj`` with NaN/inf floats as ``None`` (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def build_table(out: Union[str, os.PathLike]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The grid's table (what ``table.json`` holds) and each finished pair's raw ``result.json``
    (pair directory name -> dict, for the heatmaps), read from the grid directory ``out`` alone."""
    out = Path(out)
    state = GridState.read(out)
    plan = state.plan
    rows, results, by_model = [], {}, {}
    for model in plan["models"]:
        for task in plan["tasks"][model]:
            pair = Pair(model, task)
            row, raw = pair_row(out, pair, state.error(pair.name))
            rows.append(row)
            by_model.setdefault(model, {})[task] = row
            if raw is not None:
                results[pair.name] = raw
    alpha = next((float(r["alpha"]) for r in rows if r["alpha"] is not None), 0.05)
    holm = holm_family(rows, alpha)
    side = {
        model: side_effect_block(out, model, list(plan["tasks"][model]), by_model[model], plan["config"], state.errors)
        for model in plan["models"]
    }
    table = {
        "grid": plan,
        "rows": rows,
        "holm": holm,
        "side_effects": side,
        "timings": {k: dict(v) for k, v in sorted(state.timings.items())},
    }
    return _finite(table), results

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
from cel_lens.selection.result_parts import known_share
from cel_lens.stats import holm_adjust, mcnemar_exact, paired_bootstrap_ci

__all__ = ["selection_stability", "build_table", "pair_row", "side_effect_block", "enhancement_p", "holm_family"]

_RESULT_KEYS = (
    "n_dist", "n_test", "dist_acc_intact", "dist_acc_ablated", "dist_gain", "test_acc_intact", "test_acc_ablated",
    "gain", "ci_low", "ci_high", "alpha", "p_value", "heads", "null_p", "k", "pool_size", "scorer",
    "selected_before_test", "p_enhance", "calibration",
)


def selection_stability(result: Mapping[str, Any]) -> Optional[float]:
    """How often Ŝ wins stage 2 when D_dist is resampled, as recorded in ``result.json``: of the
    resamples whose winner is known (:func:`cel_lens.selection.result_parts.known_share`, as the text
    and the heatmap state it); ``None`` when the run does not record it or most winners are not known.
    The one place that knows where the number is kept."""
    value = result.get("selection_stability")
    if isinstance(value, Mapping):  # cel_lens.selection.stability: {"selected_frequency", ...}
        frequency = value.get("selected_frequency")
        if not isinstance(frequency, numbers.Real):
            return None
        return known_share(float(frequency), float(value.get("incomplete") or 0.0))
    return float(value) if isinstance(value, numbers.Real) else None


def enhancement_p(result: Mapping[str, Any]) -> Optional[float]:
    """The one-sided p of "ablation raises D_test accuracy" of a finished pair: recorded as
    ``p_enhance``, or, for results written before it, from the two-sided exact McNemar p (half of it
    when the gain is positive and it is below 1, where the two tails are known to be equal; 1
    otherwise: a harmful or unchanged Ŝ is never a discovery)."""
    if result.get("p_enhance") is not None:
        return float(result["p_enhance"])
    p, gain = result.get("p_value"), result.get("gain")
    if p is None or gain is None:
        return None
    return float(p) / 2 if float(gain) > 0 and float(p) < 1 else 1.0


def holm_family(rows: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """Holm across the grid, one-sided for enhancement, over the family declared by the plan:
    every planned pair counts, and a failed or unfinished one enters with p = 1, so a failure cannot
    shrink the family. Sets each row's ``p_holm``; harmful pairs (significant two-sided, Δ < 0) are
    counted apart and never as discoveries."""
    p = [1.0 if r.get("p_enhance") is None else float(r["p_enhance"]) for r in rows]
    for row, adjusted in zip(rows, holm_adjust(p) if rows else []):
        row["p_holm"] = float(adjusted) if row.get("p_enhance") is not None else None
    harmful = sum(1 for r in rows if r["status"] == "ok" and r["gain"] is not None and r["gain"] < 0
                  and r["p_value"] is not None and r["p_value"] <= alpha)
    return {"family": len(rows), "finished": sum(r["status"] == "ok" for r in rows), "alpha": alpha,
            "sided": "one-sided (ablation helps)",
            "rejected": sum(1 for r in rows if r["p_holm"] is not None and r["p_holm"] <= alpha),
            "harmful": harmful,
            "sealed": sum(1 for r in rows if r["status"] == "ok" and r.get("selected_before_test")),
            "unsealed": [f"{r['model']} × {r['task']}" for r in rows if r["status"] == "ok" and not r.get("selected_before_test")]}


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
        row.update({k: raw.get(k) for k in _RESULT_KEYS}, status="ok", selection_stability=selection_stability(raw))
        row.update(selected_before_test=bool(raw.get("selected_before_test", True)),
                   seal_reason=(raw.get("seal") or {}).get("reason"), p_enhance=enhancement_p(raw))
    elif run.manifest_path.exists():
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
    p from the recorded bits). ``errors``: task evaluated -> why its column is missing."""
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
                cell = _cell(have[HeadSet()], have[heads], int(config.get("n_boot", 10000)), int(config.get("seed", 0)))
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

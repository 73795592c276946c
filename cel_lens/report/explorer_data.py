"""What the run explorer shows about a head or a head set, read from a run's record (no model).

A *panel* is a plain dict (JSON-ready) about one head set of a run: its stage-1 score(s), its
D_dist gain with a paired bootstrap 95% CI from the recorded per-example answers, the D_dist
examples its ablation fixes and breaks, and (for S-hat only, and only once the run has fixed it)
what the run recorded on D_test. Nothing here evaluates anything: a head set the run never
evaluated on D_dist says so. The Jupyter explorer (:mod:`cel_lens.analysis.explorer`) and the
standalone page (:mod:`cel_lens.report.explorer_page`) both read these panels; the model-driven
parts (attention intact vs ablated, direct logit effects) are computed by
:mod:`cel_lens.analysis.explorer_model` and attached as ``panel["model"]``.

The seal: D_test appears for S-hat alone, after the run's ``selected`` event, from the evaluations
the run itself recorded; post-hoc test gains of other subsets are not shown.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from cel_lens.heads import HeadSet
from cel_lens.report.data import result_dict, stage1_scores
from cel_lens.runs.export import run_task
from cel_lens.runs.reader import RunRecord
from cel_lens.selection.calibration_text import calibrated_gain_text
from cel_lens.selection.result_parts import decision_bounds
from cel_lens.stats import paired_bootstrap_ci
from cel_lens.tasks.base import Example, Task

__all__ = [
    "load_examples_task", "head_set_panel", "panel_keys", "top_ranked", "explorer_summary", "example_entry", "rounded",
]

N_BOOT = 1000
"""Bootstrap resamples of a panel's D_dist interval (seed 0: the same page every time)."""
PROMPT_CHARS = 240
"""Characters of an example's prompt kept in a panel (the end of the prompt: where the answer goes)."""


def rounded(value: Any, digits: int = 4, *, decimals: bool = False) -> Any:
    """``value`` with floats rounded to ``digits`` significant digits (``decimals``: decimal places),
    nested lists and dicts too, and NaN as ``None``: smaller JSON, that a browser can parse, and a
    p-value of 1e-7 stays 1e-7."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if decimals else float(f"{value:.{digits}g}")
    if isinstance(value, Mapping):
        return {k: rounded(v, digits, decimals=decimals) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits, decimals=decimals) for v in value]
    return value


def load_examples_task(record: RunRecord, data_dir: Optional[str] = None) -> tuple[Optional[Task], Optional[str]]:
    """The run's task (to show examples' text), or ``(None, why not)`` when it cannot be loaded here
    (data files elsewhere, or not the run's): panels then name examples by index alone."""
    try:
        return run_task(record, data_dir=data_dir), None
    except Exception as err:  # a missing data directory must not stop the figures
        return None, f"{type(err).__name__}: {err}"


def _recorded(record: RunRecord, split: str, heads: HeadSet) -> Optional[torch.Tensor]:
    """The last recorded answers of ``heads`` on ``split`` (``None`` if never evaluated)."""
    found = [e.correct for e in record.evaluations if e.split == split and e.heads == heads]
    return found[-1] if found else None


def example_entry(example: Optional[Example], index: int) -> dict[str, Any]:
    """One example as a panel lists it: index, id, the end of its prompt and its correct answer."""
    if example is None:
        return {"index": index, "id": f"#{index}", "prompt": None, "answer": None}
    answer = example.target if example.target is not None else (
        example.choices[example.label] if example.choices and example.label is not None else None)
    prompt = example.prompt if len(example.prompt) <= PROMPT_CHARS else "…" + example.prompt[-PROMPT_CHARS:]
    return {"index": index, "id": example.id, "prompt": prompt, "answer": answer}


def _comparison(intact: torch.Tensor, ablated: torch.Tensor, examples: Optional[Sequence[Example]], n_examples: int) -> dict[str, Any]:
    """Accuracies, gain, its paired bootstrap 95% CI and the fixed and broken examples of a split."""
    a, b = intact.numpy().astype(float), ablated.numpy().astype(float)
    fixed = np.flatnonzero((a == 0) & (b == 1)).tolist()
    broken = np.flatnonzero((a == 1) & (b == 0)).tolist()
    low, high = paired_bootstrap_ci(a, b, n_boot=N_BOOT, seed=0)

    def pick(idx: list[int]) -> list[dict[str, Any]]:
        return [example_entry(examples[i] if examples is not None else None, i) for i in idx[:n_examples]]

    return {
        "n": int(a.shape[0]), "acc_intact": float(a.mean()), "acc_ablated": float(b.mean()), "gain": float(b.mean() - a.mean()),
        "ci": [low, high], "n_fixed": len(fixed), "n_broken": len(broken), "fixed": pick(fixed), "broken": pick(broken),
    }


def _test_block(record: RunRecord, heads: HeadSet, task: Optional[Task], n_examples: int) -> Optional[dict[str, Any]]:
    """What the run recorded on D_test for S-hat (``None`` for any other head set, or before selection)."""
    selected = record.selection
    if selected is None or HeadSet.parse(selected["heads"]) != heads:
        return None
    intact, ablated = _recorded(record, "test", HeadSet()), _recorded(record, "test", heads)
    if intact is None or ablated is None or intact.shape != ablated.shape:
        return {"recorded": False, "note": "S-hat is fixed; the run has not recorded its D_test evaluation yet"}
    out = _comparison(intact, ablated, task.test if task is not None else None, n_examples)
    out.update(recorded=True, source="recorded D_test answers")
    res = record.result
    if res is not None:  # the run's own statistics: its one decision, and the calibrated gain of a choice task
        out.update(ci=[res.test.ci_low, res.test.ci_high], p_value=res.test.p_value, null_p=res.null.p,
                   selected_before_test=res.test.selected_before_test, source="the run's result")
        if res.test.decision:
            out.update(decision=dict(res.test.decision), bounds=list(decision_bounds(res.test.decision)))
        if res.calibration and res.calibration.get("applies"):
            out["calibrated"] = calibrated_gain_text(res.to_dict())
    return out


def _roles(r: Mapping[str, Any], heads: HeadSet, top: Sequence[str]) -> list[str]:
    selected = HeadSet.parse(r.get("heads") or [])
    pool = {str(h) for h in HeadSet.parse(list(r.get("pool") or []))}
    roles = []
    if selected and heads == selected:
        roles.append("S-hat")
    elif len(heads) == 1 and heads.heads[0] in selected:
        roles.append("in S-hat")
    if len(heads) == 1 and str(heads) in pool:
        roles.append("pool")
    if len(heads) == 1 and str(heads) in top:
        roles.append(f"stage-1 rank {list(top).index(str(heads)) + 1}")
    if len(heads) > 1 and {str(h) for h in heads} <= pool:
        roles.append("pool subset")
    return roles


def head_set_panel(
    record: RunRecord, heads: Any, *, task: Optional[Task] = None, n_examples: int = 6, r: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """The panel of ``heads`` (see the module docstring): ``heads``, ``title``, ``roles``, ``scores``
    (stage-1 score of each head), ``scorer``, ``dist`` (``None`` when the run never evaluated the
    set on D_dist), ``test`` (S-hat after selection only) and ``model`` (``None``: attached later)."""
    hs = HeadSet.parse(heads)
    if not hs:
        raise ValueError("a panel needs at least one head")
    r = r if r is not None else result_dict(record, partial=True)
    scores = stage1_scores(r)
    n_layers, n_heads = scores.shape
    hs.validate(n_layers, n_heads)
    top = top_ranked(r, 10)
    intact, ablated = _recorded(record, "dist", HeadSet()), _recorded(record, "dist", hs)
    dist = None
    if intact is not None and ablated is not None and intact.shape == ablated.shape:
        dist = _comparison(intact, ablated, task.dist if task is not None else None, n_examples)
    panel = {
        "key": str(hs), "heads": str(hs), "size": len(hs), "roles": _roles(r, hs, top), "scorer": str(r.get("scorer")),
        "scores": {str(h): float(scores[h.layer, h.head]) for h in hs}, "dist": dist,
        "test": _test_block(record, hs, task, n_examples), "model": None,
    }
    panel["title"] = f"{hs}" + (f" ({', '.join(panel['roles'])})" if panel["roles"] else "")
    return rounded(panel)


def top_ranked(r: Mapping[str, Any], n: int) -> list[str]:
    """The ``n`` heads of highest finite stage-1 score, best first."""
    scores = stage1_scores(r)
    flat = np.where(np.isfinite(scores), scores, -np.inf).ravel()
    order = [i for i in np.argsort(-flat, kind="stable")[:n] if np.isfinite(flat[i])]
    return [f"L{i // scores.shape[1]}H{i % scores.shape[1]}" for i in order]


def panel_keys(r: Mapping[str, Any], *, n_top: int = 8, n_sets: int = 8) -> list[str]:
    """The head sets a page precomputes: S-hat, its heads, the pool's heads, the ``n_top`` best
    heads of stage 1, and the ``n_sets`` best-ranked evaluated subsets of the pool (by D_dist
    accuracy), each once, in that order."""
    keys: list[str] = []
    selected = HeadSet.parse(r.get("heads") or [])
    if selected:
        keys += [str(selected)] + [str(h) for h in selected]
    keys += [str(h) for h in HeadSet.parse(list(r.get("pool") or []))]
    keys += top_ranked(r, n_top)
    subsets = sorted(r.get("subsets") or [], key=lambda s: (-float(s.get("dist_acc") or 0.0), int(s.get("size") or 0)))
    keys += [str(HeadSet.parse(s["heads"])) for s in subsets if int(s.get("size") or 0) > 1][:n_sets]
    return list(dict.fromkeys(keys))


def explorer_summary(record: RunRecord, r: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """What the page and the widget show above the panels: model, task, state, scorer, layout, S-hat,
    pool, and the status line of an unfinished run; ``"progress"`` is the state with the status
    beside it when it says more (``"stopped (stage 1: 6 of 12 heads scored)"``; a finished run:
    ``"finished"``, not ``"finished (finished)"``)."""
    r = r if r is not None else result_dict(record, partial=True)
    model = (record.manifest.get("model") or {}).get("id") or "?"
    task = (record.manifest.get("task") or {}).get("name") or "?"
    status = (r.get("progress") or {}).get("status") or ("finished" if record.result is not None else record.state)
    return {
        "model": str(model), "task": str(task), "state": record.state, "status": status, "scorer": str(r.get("scorer")),
        "n_layers": int(r.get("n_layers") or stage1_scores(r).shape[0]), "n_heads": int(r.get("n_heads") or stage1_scores(r).shape[1]),
        "selected": r.get("heads"), "pool": list(r.get("pool") or []), "path": str(record.path),
        "progress": record.state if str(status) == record.state else f"{record.state} ({status})",
    }


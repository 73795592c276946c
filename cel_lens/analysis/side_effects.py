"""Side effects of a selection: the gain of each task's selected subset on every task (the paper's
"damage elsewhere"), measured on the model; :func:`cel_lens.report.plot_side_effects` draws it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from cel_lens.evaluation.evaluator import evaluate
from cel_lens.heads import HeadSet, HeadsLike

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["side_effect_matrix"]


def side_effect_matrix(
    model: Model,
    tasks: Mapping[str, Any],
    selections: Mapping[str, HeadsLike],
    split: str = "test",
    *,
    batch_size: int = 8,
    progress: bool = False,
) -> tuple[np.ndarray, list[str]]:
    """Gain of every task's selected subset on every task: ``matrix[i, j]`` is the accuracy on task
    ``labels[j]`` with ``selections[labels[i]]`` ablated minus its intact accuracy (``split`` of each
    task). ``labels`` are the task names in ``tasks`` order; rows of tasks without a selection are NaN.
    One evaluation per task runs the intact model and every selection as variants."""
    labels = list(tasks)
    unknown = [name for name in selections if name not in tasks]
    if unknown:
        raise ValueError(f"selections for unknown task(s) {', '.join(unknown)}; tasks: {', '.join(labels)}")
    rows = [name for name in labels if name in selections]
    sets = [HeadSet.parse(selections[name]) for name in rows]
    matrix = np.full((len(labels), len(labels)), np.nan)
    for j, name in enumerate(labels):
        task = tasks[name]
        data = task.split(split) if hasattr(task, "split") else task
        res = evaluate(model, data, head_sets=[HeadSet(), *sets], batch_size=batch_size, progress=progress)
        acc = [float(a) for a in res.accuracy]
        for r, row_name in enumerate(rows):
            matrix[labels.index(row_name), j] = acc[r + 1] - acc[0]
    return matrix, labels

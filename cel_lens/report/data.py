"""What figures read: a search result as a plain dict, whatever form it comes in.

Every figure function takes a :class:`~cel_lens.selection.Result`, its ``to_dict()``, a run record
(:func:`cel_lens.runs.load_run`) or a run directory path; :func:`result_dict` turns each into the
same dict, and the helpers here read the parts figures need from it.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Union

import numpy as np

from cel_lens.heads import HeadSet
from cel_lens.report.style import as_float
from cel_lens.runs import load_run
from cel_lens.config import SCORERS
from cel_lens.scoring.base import scorer_class

__all__ = [
    "ResultLike", "result_dict", "ranked_subsets", "stage1_scores", "null_gains", "is_accuracy_scorer", "is_unfinished",
]

#: A ``Result``, its dict, a run (anything with ``.result``) or a run directory path.
ResultLike = Union[Mapping[str, Any], Any, str, os.PathLike]



def result_dict(obj: ResultLike, *, partial: bool = False) -> dict[str, Any]:
    """The result of a search as a plain dict, from a ``Result``, its ``to_dict()``, a run record
    (anything with ``.result``) or a run directory path (or a file in it, ``RUN/result.json``).

    An unfinished run has no result: ``ValueError``, unless ``partial``, which gives what its record
    knows so far (:meth:`cel_lens.runs.RunRecord.partial`: stage-1 scores, pool, subsets, selection;
    ``finished`` is ``False`` and ``progress`` says how far it got)."""
    if isinstance(obj, (str, os.PathLike)):
        obj = load_run(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "result"):  # a run (pipeline.Run or runs.RunRecord)
        if obj.result is None and partial and hasattr(obj, "partial"):
            return dict(obj.partial(), state=getattr(obj, "state", "unfinished"), path=str(getattr(obj, "path", "")))
        if obj.result is None:
            raise ValueError(f"the run at {getattr(obj, 'path', '?')} has no result yet (unfinished search)")
        return result_dict(obj.result)
    if hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    raise TypeError(f"expected a Result, a result dict, a run or a run directory, got {type(obj).__name__}")


def stage1_scores(r: Mapping[str, Any]) -> np.ndarray:
    """The stage-1 scores of a result dict as a ``[layers, heads]`` array (an unfinished run's
    heads not scored yet are NaN); ``ValueError`` when the result has none or they are not a matrix."""
    scores = r.get("scores")
    if scores is None and r.get("finished") is False and r.get("n_layers"):
        return np.full((int(r["n_layers"]), int(r["n_heads"])), np.nan)
    if scores is None:
        raise ValueError("the result has no stage-1 scores to plot")
    arr = np.asarray([[np.nan if v is None else v for v in row] for row in scores], dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"stage-1 scores must be [layers][heads], got shape {arr.shape}")
    return arr


def null_gains(r: Mapping[str, Any]) -> list[float]:
    """The random-subset null's test gains of a result dict (empty when not computed)."""
    return [float(g) for g in (r.get("null_gains") or [])]


def ranked_subsets(obj: ResultLike) -> list[dict[str, Any]]:
    """The evaluated subsets, best first by the search's selection rule (highest discovery accuracy;
    ties: fewer heads, then higher summed stage-1 score, then head order), each with ``heads`` in
    canonical text. The first is the selected subset."""
    r = result_dict(obj)
    subsets = [dict(s, heads=str(HeadSet.parse(s["heads"]))) for s in (r.get("subsets") or [])]

    def key(s: dict[str, Any]) -> tuple:
        hs = HeadSet.parse(s["heads"])
        return (-round(as_float(s.get("dist_acc")), 12), len(hs), -round(as_float(s.get("score_sum") or 0.0), 12), hs.heads)

    return sorted(subsets, key=key)


def is_accuracy_scorer(scorer: Any) -> bool:
    """Whether a stage-1 scorer's scores are accuracy differences (shown as percentages) rather
    than a score in its own units: the scorer's ``units`` (:mod:`~cel_lens.scoring.base`);
    ``False`` for a name no longer registered."""
    if str(scorer) not in SCORERS:
        return False
    return scorer_class(str(scorer)).units == "accuracy"


def is_unfinished(r: Mapping[str, Any]) -> bool:
    """Whether a result dict is an unfinished run's partial record (:func:`result_dict` with ``partial``)."""
    return r.get("finished") is False

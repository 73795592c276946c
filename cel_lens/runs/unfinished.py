"""What an unfinished run already knows: its stage-1 scores, pool, subsets and selection so far.

A run directory records every evaluation as it is computed, so a search that is still running, or
was killed, can be read at any time (:func:`cel_lens.runs.load_run` needs neither the lock nor write
access). :func:`partial_result` turns the record into the dict figures read, with what is known:

* ``scores``: the recorded ``stage1_scores`` event, or, for a scorer whose scores are not recorded
  but recomputed from the single-head evaluations (``Scorer.recorded`` false: exact) while stage 1
  runs, the discovery gain of every single head evaluated so far (the others NaN: not scored yet);
* ``pool``, ``subsets`` (every stage-2 subset evaluated so far) and ``heads`` (the ``selected`` event);
* ``progress``: counts and a one-line ``status`` ("stage 1: 300 of 672 heads scored").

The head layout comes from the ``search_started`` event (runs recorded before it carried one: from
the largest head index recorded, which may undercount).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from cel_lens.config import SCORERS
from cel_lens.heads import HeadSet
from cel_lens.runs.evaluation_record import Evaluation
from cel_lens.scoring.base import score_unit

__all__ = ["partial_result", "run_layout", "format_partial"]


def _first(events: Sequence[Mapping[str, Any]], name: str) -> Optional[Mapping[str, Any]]:
    found = [e for e in events if e.get("event") == name]
    return found[0] if found else None


def run_layout(events: Sequence[Mapping[str, Any]], evaluations: Sequence[Evaluation]) -> Optional[tuple[int, int]]:
    """``(n_layers, n_heads)`` of the run's model, or ``None`` when nothing says (no search started)."""
    started = _first(events, "search_started")
    if started is not None and started.get("n_layers"):
        return int(started["n_layers"]), int(started["n_heads"])
    scored = _first(events, "stage1_scores")
    if scored is not None:
        return len(scored["scores"]), len(scored["scores"][0])
    heads = [h for e in evaluations for h in e.heads]
    if not heads:
        return None
    return max(h.layer for h in heads) + 1, max(h.head for h in heads) + 1


def _scores(
    layout: tuple[int, int], scorer: str, events: Sequence[Mapping[str, Any]], dist: Mapping[HeadSet, Evaluation]
) -> Optional[list[list[float]]]:
    recorded = [e for e in events if e.get("event") == "stage1_scores" and e.get("scorer", scorer) == scorer]
    if recorded:
        return [[float(v) for v in row] for row in recorded[0]["scores"]]
    intact = dist.get(HeadSet())
    scorer_cls = SCORERS.get_resolved(scorer)
    if scorer_cls is None or scorer_cls.recorded or intact is None:  # only unrecorded scores are rebuilt
        return None
    grid = [[math.nan] * layout[1] for _ in range(layout[0])]
    for hs, ev in dist.items():
        if len(hs) == 1 and hs.heads[0].layer < layout[0] and hs.heads[0].head < layout[1]:
            grid[hs.heads[0].layer][hs.heads[0].head] = ev.accuracy - intact.accuracy
    return grid


def _subsets(pool: Sequence[str], dist: Mapping[HeadSet, Evaluation], scores: Optional[list[list[float]]]) -> list[dict]:
    """Every evaluated D_dist subset of the pool, as ``Result.subsets`` holds them."""
    heads = {str(h) for h in HeadSet.parse(list(pool))}
    intact = dist.get(HeadSet())
    out = []
    for hs, ev in dist.items():
        if not hs or not {str(h) for h in hs} <= heads or intact is None:
            continue
        score_sum = sum(scores[h.layer][h.head] for h in hs) if scores is not None else 0.0
        out.append(dict(heads=str(hs), size=len(hs), dist_acc=ev.accuracy, dist_gain=ev.accuracy - intact.accuracy,
                        score_sum=0.0 if math.isnan(score_sum) else score_sum, test_gain_posthoc=None))
    return out


def _status(layout: tuple[int, int], scores: Optional[list[list[float]]], pool: Optional[Sequence[str]],
            subsets: list[dict], selected: Optional[str], n_test: int) -> str:
    n_total = layout[0] * layout[1]
    if selected is not None:
        return f"S-hat {selected} fixed on D_dist; test split: {n_test} evaluation(s) recorded"
    if pool is not None:
        return f"stage 2: {len(subsets)} subset(s) of the pool of {len(pool)} evaluated"
    done = sum(1 for row in scores or [] for v in row if not math.isnan(v))
    return f"stage 1: {done} of {n_total} heads scored"


def partial_result(
    manifest: Mapping[str, Any], evaluations: Sequence[Evaluation], events: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What the record of an unfinished run says, as a result-like dict (see the module docstring):
    the fields a finished result would have, those not known yet absent or ``None``."""
    options = dict(manifest.get("options") or {})
    started = _first(events, "search_started")
    options.update((started or {}).get("options") or {})
    layout = run_layout(events, evaluations) or (0, 0)
    scorer = str(options.get("scorer", "exact"))
    dist = {e.heads: e for e in evaluations if e.split == "dist"}
    scores = _scores(layout, scorer, events, dist) if layout[0] else None
    pool_event = [e for e in events if e.get("event") == "pool"]
    pool = pool_event[0]["pool"] if pool_event else None
    subsets = _subsets(pool, dist, scores) if pool else []
    selected = _first(events, "selected")
    intact = dist.get(HeadSet())
    n_test = sum(1 for e in evaluations if e.split == "test")
    return dict(
        heads=selected.get("heads") if selected else None, scores=scores, scorer=scorer, pool=pool or [],
        subsets=subsets, k=options.get("k"), pool_size=options.get("pool_size"), seed=options.get("seed"),
        n_layers=layout[0], n_heads=layout[1], n_dist=intact.n if intact is not None else None,
        dist_acc_intact=intact.accuracy if intact is not None else None, finished=False,
        dist_gain=selected.get("dist_gain") if selected else None,
        progress=dict(evaluations=len(evaluations), test_evaluations=n_test,
                      status=_status(layout, scores, pool, subsets, selected.get("heads") if selected else None, n_test)),
    )


def format_partial(partial: Mapping[str, Any], top: int = 5) -> list[str]:
    """Lines for an unfinished run beyond its one-line status: intact D_dist accuracy, the best
    stage-1 heads so far, the pool, the best subsets evaluated and the selection, whichever the
    record already holds (a killed run keeps all of them)."""
    lines = []
    if partial.get("dist_acc_intact") is not None:
        lines.append(f"intact D_dist accuracy  {100 * float(partial['dist_acc_intact']):.2f}% (n = {partial.get('n_dist')})")
    scores, scorer = partial.get("scores"), str(partial.get("scorer", "exact"))
    if scores:
        scored = [(v, f"L{l}H{h}") for l, row in enumerate(scores) for h, v in enumerate(row) if not math.isnan(v)]
        best = sorted(scored, key=lambda t: -t[0])[:top]
        lines.append(f"stage-1 best ({scorer}, {len(scored)} scored)  "
                     + ", ".join(f"{name} {score_unit(scorer).text(v)}" for v, name in best))
    if partial.get("pool"):
        lines.append(f"pool ({len(partial['pool'])} heads, each a candidate)  {', '.join(partial['pool'])}")
    subsets = sorted(partial.get("subsets") or [], key=lambda s: -float(s.get("dist_acc") or 0))[:top]
    if subsets:
        lines.append("best subsets on D_dist so far  " + ", ".join(
            f"{s['heads']} {100 * float(s['dist_acc']):.2f}%" for s in subsets))
    if partial.get("heads"):
        lines.append(f"S-hat (fixed before D_test)  {partial['heads']}")
    return lines

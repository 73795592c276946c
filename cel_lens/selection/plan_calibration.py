"""A plan's calibration: the intact model and a few single heads timed on D_dist's first examples,
within a CPU budget, turned into the rates :class:`~cel_lens.selection.plan.SearchPlan` estimates with.

Three rates, because a search's passes cost differently per head set per example: exact stage 1
scans a layer's heads together (they share the layer's batches); stage 2, the test and the controls
evaluate head sets at scattered layers, each its own pass; and an intact pass runs every layer and
stores the split's residual stream. Measured on SmolLM2-135M Arithmetic (48 examples, a profile of
a whole search): a stage-1 unit cost 0.016 CPU s, a stage-2 pair's 0.034, a null set's on D_test
0.044, and the intact pass about 9 average single heads. Timed at stage 1's rate alone, a
``--quick`` plan was 0.81 of the search's CPU time.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Optional, Sequence

from cel_lens.evaluation.encode import encode_prompt
from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import DIST_SPLIT, LOCAL_MODEL, capabilities
from cel_lens.progress import info_stream
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.plan import BatchTimer, SearchPlan, cpu_and_wall

__all__ = ["CALIBRATION_BUDGET_S", "calibration_layers", "calibration_sets", "apart_sets", "calibrate",
           "mean_prompt_tokens"]


CALIBRATION_BUDGET_S = 45.0
"""CPU seconds a plan's calibration may spend (:func:`calibrate`): under one CPU minute on
SmolLM2-135M's BoolQ, whose prompts are among the longest a choice task has."""


def calibration_layers(n_layers: int, n_heads: int, heads: int = 32) -> list[int]:
    """Whole layers the plan times, about ``heads`` heads in all: a head's cost falls with its layer
    (an ablation resumes there), and a scan evaluates a layer's heads together (they share its
    forwards), so the layers are whole and placed symmetrically over depth, their mean layer the
    mean of all (``(L-1)/2``, up to rounding)."""
    m = min(n_layers, max(2, round(heads / max(1, n_heads))))
    return sorted({round((n_layers - 1) * (2 * j + 1) / (2 * m)) for j in range(m)})


def mean_prompt_tokens(model: Any, examples: Sequence[Any]) -> Optional[float]:
    """Mean prompt length in tokens (``None`` without a tokenizer to ask)."""
    if model is None or getattr(model, "tokenizer", None) is None or not examples:
        return None
    return sum(len(encode_prompt(model, ex.prompt)) for ex in examples) / len(examples)


def apart_sets(L: int, H: int, n: int = 3) -> list[HeadSet]:
    """``n`` single heads at layers spread over depth (their mean layer about ``(L-1)/2``), each a
    different head, the last heads of their layers: timed together, they are sets evaluated apart
    (one per layer), as stage 2, the test and the controls evaluate theirs."""
    layers = calibration_layers(L, H, n * H)
    return [HeadSet([Head(l, H - 1 - j % H)]) for j, l in enumerate(layers)]


def calibration_sets(L: int, H: int, layers: list[int], intact_cpu: float, budget_s: float,
                     reserved: float = 0.0) -> list[HeadSet]:
    """The single heads a calibration times as stage 1 scans them: every head of ``layers``, fewer
    whole layers (still spread over depth; one: the middle one) and then fewer heads of that one while
    the intact pass's CPU time ``intact_cpu`` says they would pass ``budget_s`` (a head at layer ``l``
    costs about ``(L - l) / L`` of the intact pass: it resumes there; ``reserved`` intact passes'
    worth is spent elsewhere)."""
    while len(layers) > 1 and intact_cpu * (1 + reserved + sum(H * (L - l) / L for l in layers)) > budget_s:
        fewer = len(layers) - 1
        layers = calibration_layers(L, H, fewer * H) if fewer >= 2 else [(L - 1) // 2]
    heads = H
    if len(layers) == 1 and intact_cpu > 0:
        per_head = intact_cpu * (L - layers[0]) / L
        heads = max(1, min(H, math.floor((budget_s - intact_cpu * (1 + reserved)) / per_head)))
    return [HeadSet([Head(l, h)]) for l in layers for h in range(heads)]


def calibrate(
    plan: SearchPlan, oracle: Any, dist: Sequence[Any], sample: Sequence[Any], *, heads: int = 18,
    budget_s: float = CALIBRATION_BUDGET_S, show: bool = True,
) -> SearchPlan:
    """``plan`` timed on ``oracle`` (opened on a sample of D_dist: its first examples): the intact
    model, every head of a few whole layers (:func:`calibration_layers`) as stage 1 scans them, and
    a few heads at scattered layers evaluated apart (:func:`apart_sets`), fewer stage-1 heads when
    the intact pass's CPU time says they would pass ``budget_s`` (:func:`calibration_sets`). What it
    will run is printed before it runs (with ``show``), and the plan records the three rates (module
    docstring), the CPU seconds the calibration took and the CPU share measured over the stage-1
    heads: the work a search repeats, without the intact pass's one-off setup.
    The rates are scaled by D_dist's mean prompt length over the sample's (cost grows with tokens;
    a few BoolQ passages are no average), when the oracle's model has a tokenizer. ``dist``: the
    whole D_dist's examples, ``sample``: the ones the oracle evaluates."""
    L, H = oracle.n_layers, oracle.n_heads
    clock0 = cpu_and_wall()
    memo, timer, apart_timer = MemoOracle(oracle), BatchTimer(n_layers=L), BatchTimer(n_layers=L)
    memo.timer = timer
    layers, apart = calibration_layers(L, H, heads), apart_sets(L, H)
    if show:
        print(f"plan: calibrating on the first {len(sample)} D_dist examples: the intact model, then at most "
              f"{len(layers) * H} single heads (layers {layers}) and {len(apart)} apart, capped at {budget_s:.0f} CPU s",
              file=info_stream(), flush=True)
    memo.evaluate(DIST_SPLIT, [HeadSet()], stage="intact")
    intact_cpu = cpu_and_wall()[0] - clock0[0]
    sets = calibration_sets(L, H, layers, intact_cpu, budget_s, sum(hs.layers_run(L) / L for hs in apart))
    apart = [hs for hs in apart if hs not in sets]
    if show and len(sets) != len(layers) * H:
        timed = sorted({hs.first_layer for hs in sets})
        print(f"plan: the intact pass took {intact_cpu:.1f} CPU s; timing {len(sets)} heads (layers {timed}) "
              f"to stay within {budget_s:.0f} CPU s", file=info_stream(), flush=True)
    clock_heads = cpu_and_wall()
    memo.evaluate(DIST_SPLIT, sets, stage="stage1")
    clock1 = cpu_and_wall()
    memo.timer = apart_timer
    for hs in apart:  # one call each: sets apart share no batch
        memo.evaluate(DIST_SPLIT, [hs], stage="stage2")
    model = oracle.local_model() if LOCAL_MODEL in capabilities(oracle) else None
    full, part = mean_prompt_tokens(model, list(dist)), mean_prompt_tokens(model, list(sample))
    scale = full / part if full and part else 1.0
    heads_cpu, heads_wall = clock1[0] - clock_heads[0], clock1[1] - clock_heads[1]
    share = heads_cpu / heads_wall if heads_wall > 0 else None  # the heads' window: what a scan's batches get
    apart_rate = None if apart_timer.seconds_per_unit is None else apart_timer.seconds_per_unit * scale
    timed = plan.timed(float(timer.seconds_per_unit) * scale, share, intact_cpu / max(len(sample), 1) * scale, apart_rate)
    return replace(timed, calibration_cpu_s=cpu_and_wall()[0] - clock0[0])

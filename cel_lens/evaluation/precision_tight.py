"""The tight exact-match bound of a pass on the bfloat16 weight copy, checked on its own recomputes.

On the weight copy (:mod:`~cel_lens.model.stack_bf16`) an exact-match decision's tokens near the
top are unembedded in float32 (:func:`~cel_lens.model.stack_bf16.refine_logits`), so what moves its
margin is the layers' rounding alone. :func:`~cel_lens.evaluate` then recomputes first only the
decisions within :data:`TIGHT_LOGIT_BOUND` (and the closest beyond it, up to the check's minimum:
:func:`tight_first`), and keeps that bound for the rest only where those
recomputes confirm it (:func:`tight_check`, the rule :func:`~cel_lens.evaluation.precision.pair_check`
applies to one-token choices); else every decision within
:data:`~cel_lens.evaluation.precision.LOGIT_BOUND` is recomputed, as before.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.evaluation.precision import LOGIT_BOUND, PAIR_CHECK_SHARE

__all__ = ["TIGHT_LOGIT_BOUND", "TIGHT_CHECK_MIN", "tight_check", "tight_first"]

TIGHT_LOGIT_BOUND = 0.5
"""The exact-match bound a pass on the bfloat16 weight copy tries first (:func:`tight_check`):
there the tokens near the top are unembedded in float32 (:func:`~cel_lens.model.stack_bf16.refine_logits`),
so only the layers' rounding is left. Trusted in an evaluation only while its own recomputes confirm it."""

TIGHT_CHECK_MIN = 64
"""Recomputed decisions an evaluation must observe before :data:`TIGHT_LOGIT_BOUND` is trusted for the rest."""


def tight_check(
    bf16_margin: Float[Tensor, "variant example"], float32_margin: Float[Tensor, "variant example"],
    redo: Bool[Tensor, "variant example"], bound: float = LOGIT_BOUND, tight: float = TIGHT_LOGIT_BOUND,
) -> tuple[Bool[Tensor, "variant example"], dict]:
    """Check :data:`TIGHT_LOGIT_BOUND` on an evaluation's own recomputes, and say what else to recompute.

    ``redo`` marked the decisions within ``tight`` of flipping and they were recomputed;
    ``float32_margin`` holds the float32 margin of every decision the recompute computed (NaN
    elsewhere: the recompute groups' examples are a superset of what they mark; a bf16 margin of
    exactly 0 marks a position whose near-top tokens were not all refined, recomputed but not
    counted). The tight bound
    holds for the rest when at least :data:`TIGHT_CHECK_MIN` of them were observed and none moved
    by more than :data:`PAIR_CHECK_SHARE` of it; otherwise every decision within ``bound`` not yet
    recomputed is returned to be recomputed. The record says what was seen."""
    seen = torch.isfinite(float32_margin) & torch.isfinite(bf16_margin) & (bf16_margin != 0)  # 0: not refined
    n = int(seen.sum())
    change = float((bf16_margin - float32_margin)[seen].abs().max()) if n else 0.0
    confirmed = n >= TIGHT_CHECK_MIN and change <= PAIR_CHECK_SHARE * tight
    widen = torch.zeros_like(redo) if confirmed else (bf16_margin.abs() <= bound) & ~redo
    return widen, {"observed": n, "largest_change": change, "bound": tight, "widened": int(widen.sum())}


def tight_first(
    bf16_margin: Float[Tensor, "variant example"], bound: float = LOGIT_BOUND, tight: float = TIGHT_LOGIT_BOUND,
) -> Bool[Tensor, "variant example"]:
    """What to recompute first: every decision within ``tight``, and where those are fewer than
    :data:`TIGHT_CHECK_MIN`, the closest decisions beyond it up to ``bound`` until there are that
    many (each would be recomputed anyway if the check failed, and each is one more observation)."""
    redo = bf16_margin.abs() <= tight
    need = TIGHT_CHECK_MIN - int(redo.sum())
    band = (bf16_margin.abs() <= bound) & ~redo
    if need > 0 and bool(band.any()):
        closest = bf16_margin.abs().masked_fill(~band, float("inf")).flatten()
        take = closest.topk(min(need, int(band.sum())), largest=False).indices
        redo = redo.flatten().clone()
        redo[take] = True
        redo = redo.view(bf16_margin.shape)
    return redo

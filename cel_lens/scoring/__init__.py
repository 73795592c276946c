"""Stage 1 of Algorithm 1: one score per head, ``Float[Tensor, "layer head"]``, estimating the
discovery-set gain of ablating that head alone (positive = ablation helps).

Three scorers, from exact to cheap, one module each:

* ``exact`` (:mod:`~cel_lens.scoring.exact`): ablate each head alone and measure the discovery
  accuracy gain (the paper's scorer); ``L*H`` evaluations, batched and resumed by the evaluator.
* ``attribution`` (:mod:`~cel_lens.scoring.attribution`): attribution patching, one forward and
  backward pass per batch for all heads; a ranking in nats, not an accuracy estimate.
* ``compressed`` (:mod:`~cel_lens.scoring.compressed`): random multi-head knockouts and a Lasso.

``exact`` and ``compressed`` run over any evaluation oracle; ``attribution`` needs gradients
through the model: the oracle's own ``attribution_scores`` (the local and Ray backends have one),
or ``model`` and the discovery ``split``.
"""

from __future__ import annotations

from typing import Literal, Optional

from jaxtyping import Float
from torch import Tensor

from cel_lens.config import SCORERS
from cel_lens.oracle import Oracle
from cel_lens.scoring.agreement import rank_agreement
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.scoring.compressed import compressed_scores, lasso, random_masks
from cel_lens.scoring.exact import exact_scores
from cel_lens.tasks.base import Split

__all__ = [
    "SCORERS",
    "ScorerName",
    "score_heads",
    "exact_scores",
    "attribution_scores",
    "compressed_scores",
    "random_masks",
    "lasso",
    "rank_agreement",
]

ScorerName = Literal["exact", "attribution", "compressed"]


def score_heads(
    scorer: ScorerName,
    oracle: Optional[Oracle] = None,
    *,
    model: object = None,
    split: Optional[Split] = None,
    batch_size: int = 8,
    n_masks: Optional[int] = None,
    sparsity: float = 0.05,
    seed: int = 0,
    progress: bool = True,
) -> Float[Tensor, "layer head"]:
    """Stage-1 scores by name. ``exact``/``compressed`` need an ``oracle``; ``attribution`` an oracle
    with ``attribution_scores(batch_size)``, or ``model`` and the discovery ``split``."""
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")
    if scorer == "attribution":
        if model is None and hasattr(oracle, "attribution_scores"):
            return oracle.attribution_scores(batch_size)  # type: ignore[union-attr]
        if model is None or split is None:
            raise ValueError("the 'attribution' scorer needs model= and split= (or an oracle that computes it)")
        return attribution_scores(model, split, batch_size=batch_size, progress=progress)
    if oracle is None:
        raise ValueError(f"the {scorer!r} scorer needs oracle=...")
    if scorer == "exact":
        return exact_scores(oracle, progress=progress)
    return compressed_scores(oracle, n_masks=n_masks, sparsity=sparsity, seed=seed, progress=progress)

"""Stage 1 of Algorithm 1: one score per head, ``Float[Tensor, "layer head"]``, estimating the
discovery-set gain of ablating that head alone (positive = ablation helps).

Three scorers, from exact to cheap, one module each:

* ``exact`` (:mod:`~cel_lens.scoring.exact`): ablate each head alone and measure the discovery
  accuracy gain (the paper's scorer); ``L*H`` evaluations, batched and resumed by the evaluator.
* ``attribution`` (:mod:`~cel_lens.scoring.attribution`): attribution patching, one forward and
  backward pass per batch for all heads; a ranking in nats, not an accuracy estimate.
* ``compressed`` (:mod:`~cel_lens.scoring.compressed`): random multi-head knockouts and a Lasso.
* ``racing`` (:mod:`~cel_lens.scoring.racing`): exact scoring on growing batches of D_dist that
  stops evaluating a head once confidence bounds show it cannot change the pool (needs the pool
  size; its pool equals exact's with probability ``1 - delta``).

``exact`` and ``compressed`` run over any evaluation oracle; ``attribution`` needs gradients
through the model: the oracle's own ``attribution_scores`` (the local and Ray backends have one),
or ``model`` and the discovery ``split``. :func:`score_heads` returns the scores as
:class:`~cel_lens.oracle.Stage1Scores`, with the split they were computed on, which is what a
search takes (it refuses scores from any split but D_dist).
"""

from __future__ import annotations

from typing import Literal, Optional

from cel_lens.config import SCORERS
from cel_lens.oracle import DIST_SPLIT, Oracle, Stage1Scores
from cel_lens.scoring.agreement import rank_agreement
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.scoring.compressed import compressed_scores, lasso, random_masks
from cel_lens.scoring.exact import exact_scores
from cel_lens.scoring.racing import RacingOptions, RacingOutcome, racing_cost, racing_scores
from cel_lens.tasks.base import Split

__all__ = [
    "SCORERS",
    "ScorerName",
    "Stage1Scores",
    "score_heads",
    "exact_scores",
    "attribution_scores",
    "compressed_scores",
    "random_masks",
    "lasso",
    "rank_agreement",
    "RacingOptions",
    "RacingOutcome",
    "racing_scores",
    "racing_cost",
]

ScorerName = Literal["exact", "attribution", "compressed", "racing"]


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
    pool_size: Optional[int] = None,
    racing: Optional[RacingOptions] = None,
) -> Stage1Scores:
    """Stage-1 scores by name, with the split they were computed on. ``exact``/``compressed`` need an
    ``oracle`` (they read its D_dist); ``attribution`` an oracle with ``attribution_scores(batch_size)``
    (on D_dist), or ``model`` and a ``split`` (recorded by its name: a search refuses any but ``"dist"``).
    ``racing`` needs the ``pool_size`` it races for; ``racing`` holds its options (default delta 0.05)."""
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")
    if scorer == "attribution":
        if model is None and hasattr(oracle, "attribution_scores"):
            return Stage1Scores(oracle.attribution_scores(batch_size), DIST_SPLIT, scorer)  # type: ignore[union-attr]
        if model is None or split is None:
            raise ValueError("the 'attribution' scorer needs model= and split= (or an oracle that computes it)")
        values = attribution_scores(model, split, batch_size=batch_size, progress=progress)
        return Stage1Scores(values, getattr(split, "name", "unknown"), scorer)
    if oracle is None:
        raise ValueError(f"the {scorer!r} scorer needs oracle=...")
    if scorer == "exact":
        return Stage1Scores(exact_scores(oracle, progress=progress), DIST_SPLIT, scorer)
    if scorer == "racing":
        if pool_size is None:
            raise ValueError("the 'racing' scorer needs pool_size= (the pool it races for)")
        outcome = racing_scores(oracle, pool_size, racing or RacingOptions(seed=seed), progress=progress)
        return Stage1Scores(outcome.scores, DIST_SPLIT, scorer)
    values = compressed_scores(oracle, n_masks=n_masks, sparsity=sparsity, seed=seed, progress=progress)
    return Stage1Scores(values, DIST_SPLIT, scorer)

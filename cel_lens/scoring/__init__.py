"""Stage 1 of Algorithm 1: one score per head, ``Float[Tensor, "layer head"]``, estimating the
discovery-set gain of ablating that head alone (positive = ablation helps).

Scorers are a registry (:mod:`~cel_lens.scoring.base`: adding one is one file and one line in
:data:`cel_lens.config.SCORERS`). Three built in, from exact to cheap, one module each:

* ``exact`` (:mod:`~cel_lens.scoring.exact`): ablate each head alone and measure the discovery
  accuracy gain (the paper's scorer); ``L*H`` evaluations, batched and resumed by the evaluator.
* ``attribution`` (:mod:`~cel_lens.scoring.attribution`): attribution patching, one forward and
  backward pass per batch for all heads; a ranking in nats, not an accuracy estimate.
* ``compressed`` (:mod:`~cel_lens.scoring.compressed`): random multi-head knockouts and a Lasso.
* ``racing`` (:mod:`~cel_lens.scoring.racing`): exact scoring on growing batches of D_dist that
  stops evaluating a head once confidence bounds show it cannot change the pool (needs the pool
  size; its pool equals exact's with probability ``1 - delta``).
* ``prescreen`` (:mod:`~cel_lens.scoring.prescreen`): a first pass (attribution, or every head on a
  D_dist subsample) ranks every head, exact scoring runs on the top ``prescreen_keep`` fraction; its
  recall of exact's pool is measured (``benchmarks/RESULTS.md``), not guaranteed.

``exact`` and ``compressed`` run over any evaluation oracle; ``attribution`` needs gradients
through the model: the oracle's own ``attribution_scores`` (the local and Ray backends have one),
or ``model`` and the discovery ``split``. :func:`score_heads` returns the scores as
:class:`~cel_lens.oracle.Stage1Scores`, with the split they were computed on, which is what a
search takes (it refuses scores from any split but D_dist).
"""

from __future__ import annotations

from typing import Optional

from cel_lens.config import SCORERS
from cel_lens.oracle import Oracle, Stage1Scores
from cel_lens.scoring.agreement import rank_agreement
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.scoring.compressed import compressed_scores, lasso, random_masks
from cel_lens.scoring.exact import exact_scores
from cel_lens.scoring.racing import RacingOptions, RacingOutcome, RacingScorer, racing_cost, racing_scores
from cel_lens.scoring.base import Cost, Scorer, get_scorer, scorer_class, scorer_from_config
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
    "RacingScorer",
    "racing_scores",
    "racing_cost",
    "Scorer",
    "Cost",
    "get_scorer",
    "scorer_class",
    "scorer_from_config",
]

ScorerName = str
"""A name in :data:`cel_lens.config.SCORERS`."""


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
    """Stage-1 scores by name (:mod:`~cel_lens.scoring.base`), with the split they were computed
    on. ``exact``/``compressed`` need an ``oracle`` (they read its D_dist); ``attribution`` an oracle
    with ``attribution_scores(batch_size)`` (on D_dist), or ``model`` and a ``split`` (recorded by its
    name: a search refuses any but ``"dist"``). Options a scorer does not take are ignored;
    ``racing`` needs the ``pool_size`` it races for and takes its options from ``racing``."""
    options = {"n_masks": n_masks, "sparsity": sparsity, "seed": seed, "pool_size": pool_size}
    if racing is not None:
        options.update(delta=racing.delta, margin=racing.margin, seed=racing.seed)
    chosen = get_scorer(scorer, **{key: value for key, value in options.items() if value is not None})
    return chosen.score(oracle, batch_size=batch_size, progress=progress, model=model, split=split)

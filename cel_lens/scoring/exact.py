"""The paper's stage-1 scorer: ablate each head alone and measure the discovery accuracy gain."""

from __future__ import annotations

from typing import Any, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import DIST_SPLIT, Oracle, Stage1Scores, call_oracle, evaluate_chunked
from cel_lens.scoring.base import Cost, Scorer
from cel_lens.tasks.base import Split

__all__ = ["exact_scores", "ExactScorer"]


def exact_scores(oracle: Oracle, *, chunk: int = 64, progress: bool = False) -> Float[Tensor, "layer head"]:
    """Stage-1 exact scores: ``acc_dist(ablate h) - acc_dist(intact)`` for every head ``h``.

    The paper's scorer: ``n_layers * n_heads`` single-head ablations plus the intact model, all on
    D_dist, ``chunk`` head sets per oracle call. Float64, in accuracy units.
    """
    L, H = oracle.n_layers, oracle.n_heads
    intact = call_oracle(oracle, "dist", [HeadSet()], "intact")[0]
    singles = [HeadSet([Head(layer, head)]) for layer in range(L) for head in range(H)]
    correct = evaluate_chunked(oracle, "dist", singles, "stage1", chunk, progress)
    acc = correct.to(torch.float64).mean(1)
    return (acc - intact.to(torch.float64).mean()).reshape(L, H)


class ExactScorer(Scorer):
    """The paper's scorer: every head ablated alone on D_dist (the search computes these itself,
    from the evaluations it records, so stage 2 answers the pool's singles from memory)."""

    name = "exact"
    in_search = True
    recorded = False

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        return Cost(n_layers * n_heads, "every head alone", singles=True)

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        if oracle is None:
            raise ValueError("the 'exact' scorer needs oracle=...")
        return Stage1Scores(exact_scores(oracle, progress=progress), DIST_SPLIT, self.name)

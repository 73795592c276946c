"""The paper's stage-1 scorer: ablate each head alone and measure the discovery accuracy gain."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import Oracle, call_oracle, evaluate_chunked

__all__ = ["exact_scores"]


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

"""cel_lens's stage-1 exact scan as the benchmark runs it, and the settings every case shares.

Kept apart from :mod:`benchmarks.run` (the command) so that the scaling and report modules can use
it without importing the command back: the benchmark modules import one way.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from cel_lens.backends import LocalOracle
from cel_lens.heads import Head, HeadSet
from cel_lens.scoring import exact_scores
from benchmarks.workload import REPO

__all__ = ["GPU_JSON", "STORE_BUDGET", "BATCH", "cel_scan"]

GPU_JSON = REPO / "benchmarks" / "gpu_scan.json"
STORE_BUDGET = 256 * 2**20
BATCH = 8


class _Recording:
    """An oracle wrapper that keeps every per-example result it returns (the scan's decisions,
    for comparison with the loops, without evaluating again)."""

    def __init__(self, oracle) -> None:
        self.oracle, self.n_layers, self.n_heads = oracle, oracle.n_layers, oracle.n_heads
        self.seen: dict[str, torch.Tensor] = {}

    def evaluate(self, split: str, head_sets, *, stage: str = "") -> torch.Tensor:
        out = self.oracle.evaluate(split, head_sets, stage=stage)
        for s, row in zip(head_sets, out):
            self.seen[str(s)] = row
        return out

    def store(self, split: str):
        return self.oracle.store(split)


def cel_scan(model, task, heads: Optional[Sequence[tuple[int, int]]] = None, budget: Optional[int] = STORE_BUDGET):
    """cel_lens's stage-1 exact scan on ``task``'s D_dist: ``(gains in heads order, oracle)``; the
    oracle records every per-example result (``oracle.seen``, by head set).

    All heads: :func:`cel_lens.scoring.exact_scores` over a :class:`cel_lens.backends.LocalOracle`
    (the public path). A subset: the same two oracle calls exact_scores makes, on those heads."""
    oracle = _Recording(LocalOracle(model, task, batch_size=BATCH, store_budget=budget, progress=False))
    if heads is None:
        return exact_scores(oracle).flatten(), oracle
    intact = oracle.evaluate("dist", [HeadSet()])[0]
    sets = [HeadSet([Head(l, h)]) for l, h in heads]
    correct = torch.cat([oracle.evaluate("dist", sets[i : i + 64]) for i in range(0, len(sets), 64)])
    return correct.to(torch.float64).mean(1) - intact.to(torch.float64).mean(), oracle



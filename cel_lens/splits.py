"""Subsplits of D_dist: seeded, disjoint random batches of the discovery split, named so that any
oracle, task and run directory can evaluate and record them like a split (what an adaptive stage-1
scorer reads batch by batch)."""

from __future__ import annotations

import re
from typing import Optional

import numpy as np
import torch
from jaxtyping import Int64
from torch import Tensor

__all__ = ["subsplit", "parse_subsplit", "subsplit_indices"]

_SUBSPLIT = re.compile(r"^dist@(\d+)\[(\d+):(\d+)\]$")


def subsplit(seed: int, start: int, stop: int) -> str:
    """The name of a *subsplit* of D_dist: positions ``start:stop`` of D_dist in the order of a
    seeded random permutation (``"dist@SEED[START:STOP]"``). Consecutive ranges of one seed are
    disjoint, uniformly random samples without replacement: what an adaptive scorer evaluates a head
    on, batch by batch, through any oracle (a :class:`~cel_lens.tasks.Task` resolves the name, and
    a run directory records such evaluations under it like any other). Only D_dist has subsplits."""
    if seed < 0 or not 0 <= start < stop:
        raise ValueError(f"a subsplit needs seed >= 0 and 0 <= start < stop, got {seed}, {start}:{stop}")
    return f"dist@{seed}[{start}:{stop}]"


def parse_subsplit(name: str) -> Optional[tuple[int, int, int]]:
    """``(seed, start, stop)`` of a :func:`subsplit` name, or ``None`` for any other split name."""
    m = _SUBSPLIT.match(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def subsplit_indices(name: str, n: int) -> Int64[Tensor, " example"]:
    """Positions in D_dist (of ``n`` examples) of the subsplit ``name``, in its order (numpy's
    ``default_rng(seed).permutation(n)``, stable across machines)."""
    parsed = parse_subsplit(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a subsplit name (dist@SEED[START:STOP])")
    seed, start, stop = parsed
    if stop > n:
        raise ValueError(f"subsplit {name!r} reaches example {stop}, D_dist has {n}")
    order = np.random.default_rng(seed).permutation(n)
    return torch.from_numpy(order[start:stop].astype(np.int64))

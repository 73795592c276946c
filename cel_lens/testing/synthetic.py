"""A model-free oracle with planted head effects, for tests, benchmarks and demos."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.splits import parse_subsplit, subsplit_indices

__all__ = ["SyntheticOracle", "realistic_oracle"]


def _stream_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SyntheticOracle:
    """A model-free oracle with planted head effects, for tests and demos. Deterministic by ``seed``.

    Each example ``i`` of a split has a fixed difficulty ``u_i ~ U(0, 1)``. Ablating a head set S
    moves the success probability to ``p(S) = clip(base_acc + sum of effects[h] for h in S +
    sum of interactions[T] for T ⊆ S, 0, 1)``; example ``i`` is correct iff ``u_i < p(S)``, then
    flipped with probability ``noise`` by a per-(split, S, example) coin. So accuracy differences
    are paired, as in a real model: ablating a beneficial head fixes the examples just above the
    threshold and breaks none. ``effects`` maps heads (``"L1H2"``, ``(1, 2)`` or :class:`Head`) to
    their change of ``p``; unlisted heads get ``N(0, background_sd)`` effects (0 by default).
    ``interactions`` maps head sets of two or more heads to an extra change applied only when all of
    them are ablated. ``delay`` seconds are slept per ``evaluate`` call (to simulate a slow model).
    ``calls`` logs every evaluated ``(split, HeadSet)``.
    """

    def __init__(
        self,
        n_layers: int = 4,
        n_heads: int = 4,
        *,
        n_dist: int = 400,
        n_test: int = 400,
        base_acc: float = 0.5,
        effects: Optional[Mapping[Any, float]] = None,
        interactions: Optional[Mapping[Any, float]] = None,
        background_sd: float = 0.0,
        noise: float = 0.0,
        seed: int = 0,
        delay: float = 0.0,
    ) -> None:
        if not 0.0 <= noise <= 0.5:
            raise ValueError(f"noise must lie in [0, 0.5], got {noise}")
        self.n_layers, self.n_heads = int(n_layers), int(n_heads)
        self.n = {"dist": int(n_dist), "test": int(n_test)}
        self.base_acc = float(base_acc)
        self.noise = float(noise)
        self.seed = int(seed)
        self.delay = float(delay)
        gen = torch.Generator().manual_seed(_stream_seed(seed, "background"))
        self.effect_matrix: Float[Tensor, "layer head"] = (
            torch.randn(self.n_layers, self.n_heads, generator=gen, dtype=torch.float64) * background_sd
        )
        for h, e in (effects or {}).items():
            head = Head.parse(h)
            HeadSet([head]).validate(self.n_layers, self.n_heads)
            self.effect_matrix[head.layer, head.head] = float(e)
        self.interactions: dict[HeadSet, float] = {}
        for s, e in (interactions or {}).items():
            hs = HeadSet.parse(s).validate(self.n_layers, self.n_heads)
            if len(hs) < 2:
                raise ValueError(f"an interaction needs two or more heads, got {hs}")
            self.interactions[hs] = float(e)
        self.calls: list[tuple[str, HeadSet]] = []
        self._u: dict[str, Tensor] = {}

    def _difficulty(self, split: str) -> Float[Tensor, " example"]:
        if split not in self.n:
            raise ValueError(f"unknown split {split!r}; expected 'dist' or 'test'")
        if split not in self._u:
            gen = torch.Generator().manual_seed(_stream_seed(self.seed, "u", split))
            self._u[split] = torch.rand(self.n[split], generator=gen, dtype=torch.float64)
        return self._u[split]

    def probability(self, head_set: HeadsLike) -> float:
        """``p(S)``: the success probability with ``head_set`` ablated, before noise."""
        hs = HeadSet.parse(head_set).validate(self.n_layers, self.n_heads)
        p = self.base_acc
        for h in hs:  # sorted order: a deterministic float sum
            p += float(self.effect_matrix[h.layer, h.head])
        for t, e in sorted(self.interactions.items(), key=lambda kv: kv[0].heads):
            if all(h in hs for h in t):
                p += e
        return min(1.0, max(0.0, p))

    def expected_accuracy(self, head_set: HeadsLike) -> float:
        """Population accuracy with ``head_set`` ablated: ``p(1 - noise) + (1 - p) noise``."""
        p = self.probability(head_set)
        return p * (1 - self.noise) + (1 - p) * self.noise

    def true_gain(self, head_set: HeadsLike) -> float:
        """Population gain ``expected_accuracy(S) - expected_accuracy(intact)``."""
        return self.expected_accuracy(head_set) - self.expected_accuracy(HeadSet())

    def evaluate(
        self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]`` (see the class docstring). A subsplit of
        D_dist (:func:`cel_lens.oracle.subsplit`) answers the same bits as D_dist at its positions."""
        if parse_subsplit(split) is not None:
            idx = subsplit_indices(split, self.n["dist"])
            return self.evaluate("dist", head_sets, stage=stage)[:, idx]
        u = self._difficulty(split)
        rows = []
        for s in head_sets:
            hs = HeadSet.parse(s)
            correct = u < self.probability(hs)
            if self.noise > 0:
                gen = torch.Generator().manual_seed(_stream_seed(self.seed, "flip", split, hs))
                correct ^= torch.rand(u.shape[0], generator=gen, dtype=torch.float64) < self.noise
            rows.append(correct)
            self.calls.append((split, hs))
        if self.delay:
            time.sleep(self.delay)
        if not rows:
            return torch.zeros(0, u.shape[0], dtype=torch.bool)
        return torch.stack(rows)


def realistic_oracle(n_layers: int, n_heads: int, seed: int) -> tuple[SyntheticOracle, set[Head]]:
    """A planted model with effect sizes like real ones, and its beneficial heads: three beneficial
    heads (+3, +2, +1.5 pp), ten harmful (-2..-15 pp), every other head a small N(0, 0.3 pp) effect,
    2% per-evaluation label noise, 2,000 discovery examples (the scorers' pool-recall check)."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(n_layers * n_heads, size=13, replace=False)
    heads = [Head(int(i) // n_heads, int(i) % n_heads) for i in idx]
    effects = dict(zip(heads[:3], (0.03, 0.02, 0.015)))
    effects.update(zip(heads[3:], -np.linspace(0.02, 0.15, 10)))
    oracle = SyntheticOracle(n_layers, n_heads, n_dist=2000, n_test=100, base_acc=0.6, effects=effects,
                             background_sd=0.003, noise=0.02, seed=seed)
    return oracle, set(heads[:3])

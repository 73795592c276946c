"""A model-free two-choice oracle with a planted *prior* head and a planted *capability* head.

What the answer-prior calibration (:mod:`cel_lens.selection.calibration`) must tell apart: removing
the prior head shifts every example towards one answer (raw accuracy rises on a task whose labels
lean to that answer, with no capability gained); removing the capability head fixes specific
examples. Used by the tests and by ``python -m benchmarks.evidence``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.oracle import ANSWER_KEY, CHOICES, AnswerKey, OracleBase
from cel_lens.testing.synthetic import _stream_seed

__all__ = ["PlantedChoiceOracle", "CHOICE_NAMES"]

CHOICE_NAMES = (" no", " yes")
"""The two answers (BoolQ's choices)."""


class PlantedChoiceOracle(OracleBase):
    """Two-choice examples (``yes`` with probability ``p_yes``) and choice scores ``[0, d_i]``
    (``no``, ``yes``): ``d_i = signal * (±1) + N(0, 1) - bias``, so the intact model leans to
    ``no``. Ablating a head set S adds, per head, ``N(0, jitter)`` per example (every ablation
    changes something), ``prior_shift`` to every ``d_i`` for the ``prior`` head (a pure move of the
    answer prior), and for the ``capability`` head makes a fixed random ``fix_rate`` share of the
    examples confidently right (``d_i = ±3``). Deterministic by ``seed``; the oracle reports its
    choice scores (``evaluate_choices``) and labels (``answer_key``) as a model's oracle does.
    """

    capabilities = frozenset({CHOICES, ANSWER_KEY})

    def __init__(
        self,
        n_layers: int = 4,
        n_heads: int = 4,
        *,
        n_dist: int = 1000,
        n_test: int = 1000,
        prior: HeadsLike = "L1H1",
        capability: HeadsLike = "L2H2",
        p_yes: float = 0.63,
        signal: float = 0.5,
        bias: float = 1.0,
        prior_shift: float = 1.2,
        fix_rate: float = 0.25,
        jitter: float = 0.2,
        seed: int = 0,
    ) -> None:
        self.n_layers, self.n_heads = int(n_layers), int(n_heads)
        self.n = {"dist": int(n_dist), "test": int(n_test)}
        self.prior, self.capability = Head.parse(prior), Head.parse(capability)
        HeadSet([self.prior, self.capability]).validate(self.n_layers, self.n_heads)
        self.p_yes, self.signal, self.bias = float(p_yes), float(signal), float(bias)
        self.prior_shift, self.fix_rate, self.jitter = float(prior_shift), float(fix_rate), float(jitter)
        self.seed = int(seed)

    def _gen(self, *parts: object) -> torch.Generator:
        return torch.Generator().manual_seed(_stream_seed(self.seed, *parts))

    def labels(self, split: str) -> Tensor:
        """Each example's gold answer (1 = ``yes``)."""
        return (torch.rand(self.n[split], generator=self._gen(split, "labels")) < self.p_yes).long()

    def _margins(self, split: str, heads: HeadSet) -> Float[Tensor, " example"]:
        n, y = self.n[split], self.labels(split)
        sign = 2.0 * y.double() - 1.0
        d = self.signal * sign + torch.randn(n, generator=self._gen(split, "noise"), dtype=torch.float64) - self.bias
        for h in heads:
            d = d + self.jitter * torch.randn(n, generator=self._gen(split, "jitter", h), dtype=torch.float64)
            if h == self.prior:
                d = d + self.prior_shift
        if self.capability in heads:
            fixed = torch.rand(n, generator=self._gen(split, "fixed")) < self.fix_rate
            d = torch.where(fixed, 3.0 * sign, d)
        return d

    def evaluate_choices(
        self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""
    ) -> tuple[Bool[Tensor, "variant example"], Float[Tensor, "variant example choice"]]:
        """Per-example correctness and choice scores (``[0, d]``) of each head set."""
        y = self.labels(split)
        d = torch.stack([self._margins(split, HeadSet.parse(s)) for s in head_sets]) if head_sets else torch.zeros(0, self.n[split])
        scores = torch.stack([torch.zeros_like(d), d], dim=-1).float()
        return (d > 0).long() == y, scores

    def evaluate(self, split: str, head_sets: Sequence[HeadSet], *, stage: str = "") -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]``."""
        return self.evaluate_choices(split, head_sets, stage=stage)[0]

    def answer_key(self, split: str) -> Optional[AnswerKey]:
        """The labels, as a multiple-choice task's :class:`~cel_lens.oracle.AnswerKey`."""
        return AnswerKey("multiple_choice", self.labels(split), CHOICE_NAMES)

"""Shared checks of the scorer tests."""

from __future__ import annotations

from typing import Callable, Sequence

import pytest
import torch

from cel_lens.evaluation import encode_split, logprob_metric
from cel_lens.model import hook_z_name


def _scaled_metric(model, batches, layer: int, head: int, scale: float, metric: str) -> float:
    """The summed metric with head ``(layer, head)``'s ``z`` multiplied by ``scale``."""

    def hook(z, hook=None):
        z = z.clone()
        z[:, :, head] *= scale
        return z

    with torch.no_grad():
        return sum(
            float(logprob_metric(model, b, [(hook_z_name(layer), hook)], metric=metric).double().sum()) for b in batches
        )


@pytest.fixture
def assert_finite_differences() -> Callable[..., None]:
    """``check(model, split, scores, heads, batch_size=, metric=)``: each head's attribution score
    equals the central finite difference of the real metric along the ablation path,
    ``-(m(z_h (1 + eps)) - m(z_h (1 - eps))) / (2 eps)`` per example, and the scores are not all ~0."""

    def check(model, split, scores, heads: Sequence[tuple[int, int]], *, batch_size: int, metric: str = "acc") -> None:
        batches = encode_split(model, split, batch_size)
        eps = 1e-2
        for layer, head in heads:
            fd = (
                _scaled_metric(model, batches, layer, head, 1 - eps, metric)
                - _scaled_metric(model, batches, layer, head, 1 + eps, metric)
            ) / (2 * eps) / len(split)
            assert scores[layer, head].item() == pytest.approx(fd, rel=0.05, abs=2e-3), (layer, head)
        assert scores.abs().max() > 1e-2  # the check is not vacuous

    return check

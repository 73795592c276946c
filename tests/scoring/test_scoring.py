"""Stage-1 scorers: the Lasso against hand-computed solutions, compressed sensing against planted
effects and the exact scorer, attribution patching against finite differences of the real metric."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.scoring import (
    attribution_scores,
    compressed_scores,
    lasso,
    random_masks,
    rank_agreement,
    score_heads,
)
from cel_lens.scoring import exact_scores
from cel_lens.testing import SyntheticOracle
from cel_lens.tasks import Example, Split
from cel_lens.testing import planted_task


def test_lasso_soft_thresholds_an_orthogonal_design():
    # X columns orthogonal with mean zero and (1/n) x_j.x_j = 1: the Lasso solution is the
    # soft-thresholded least-squares coefficient, sign(b) * max(|b| - alpha, 0).
    X = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=float)
    true = np.array([0.8, -0.05])
    y = X @ true + 0.3
    b, c = lasso(X, y, alpha=0.1)
    np.testing.assert_allclose(b, [0.7, 0.0], atol=1e-9)
    assert c == pytest.approx(0.3)


def test_lasso_recovers_a_sparse_vector():
    rng = np.random.default_rng(0)
    X = (rng.random((200, 40)) < 0.1).astype(float)
    true = np.zeros(40)
    true[[3, 17, 29]] = [0.05, -0.08, 0.04]
    b, _ = lasso(X, X @ true, alpha=1e-4)
    assert set(np.flatnonzero(np.abs(b) > 0.01)) == {3, 17, 29}
    np.testing.assert_allclose(b[[3, 17, 29]], true[[3, 17, 29]], atol=5e-3)


def test_random_masks_are_seeded_nonempty_and_sparse():
    m1, m2 = random_masks(50, 4, 8, 0.1, seed=1), random_masks(50, 4, 8, 0.1, seed=1)
    assert torch.equal(m1, m2)
    assert m1.flatten(1).any(1).all()
    assert 0.05 < m1.float().mean() < 0.2
    with pytest.raises(ValueError, match="sparsity"):
        random_masks(3, 2, 2, 1.5)


def _planted(seed: int = 0, n_layers: int = 8, n_heads: int = 16) -> SyntheticOracle:
    effects = {"L1H3": 0.08, "L5H10": 0.06, "L0H5": -0.10, "L7H2": -0.07}
    return SyntheticOracle(n_layers, n_heads, n_dist=2000, n_test=200, base_acc=0.5, effects=effects, seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compressed_sensing_finds_the_planted_heads_with_fewer_evaluations(seed):
    oracle = _planted(seed)
    approx = compressed_scores(oracle, n_masks=96, sparsity=0.1, seed=seed, progress=False)  # 96 < 128 heads
    flat = approx.flatten()
    assert set(flat.topk(2).indices.tolist()) == {1 * 16 + 3, 5 * 16 + 10}  # the beneficial heads
    assert set((-flat).topk(2).indices.tolist()) == {0 * 16 + 5, 7 * 16 + 2}  # the harmful ones
    agree = rank_agreement(approx, exact_scores(oracle), top=(2, 4))
    assert agree["recall@2"] == 1.0 and agree["recall@4"] == 1.0


def test_score_heads_dispatches_and_validates():
    oracle = _planted()
    assert torch.equal(score_heads("exact", oracle), exact_scores(oracle))
    with pytest.raises(ValueError, match="unknown scorer"):
        score_heads("magic", oracle)
    with pytest.raises(ValueError, match="needs model"):
        score_heads("attribution", oracle)


def test_attribution_equals_the_derivative_of_the_metric_along_the_ablation_path(tiny_model):
    """attribution[h] = -(z_h . dm/dz_h), the derivative of m(z_h * (1 - eps)) at eps = 0: check it
    against central finite differences of the real metric, head by head."""
    from cel_lens.model import hook_z_name
    from cel_lens.evaluation import encode_split, logprob_metric

    model = tiny_model
    split = planted_task(model, n=6).dist  # targets: the model's own next tokens
    scores = attribution_scores(model, split, batch_size=3, progress=False)
    batches = encode_split(model, split, 3)

    def metric(layer: int, head: int, scale: float) -> float:
        def hook(z, hook=None):
            z = z.clone()
            z[:, :, head] *= scale
            return z

        with torch.no_grad():
            return sum(float(logprob_metric(model, b, [(hook_z_name(layer), hook)]).double().sum()) for b in batches)

    eps = 1e-2
    for layer, head in [(0, 0), (1, 3), (2, 1)]:
        fd = (metric(layer, head, 1 - eps) - metric(layer, head, 1 + eps)) / (2 * eps) / len(split)
        assert scores[layer, head].item() == pytest.approx(fd, rel=0.05, abs=2e-3), (layer, head)
    assert scores.abs().max() > 1e-2  # the check is not vacuous


def test_attribution_refuses_generation_splits(tiny_model):
    split = Split("dist", (Example("g/0", "def f():"),), "toy", kind="generation")
    with pytest.raises(ValueError, match="scorable"):
        attribution_scores(tiny_model, split)

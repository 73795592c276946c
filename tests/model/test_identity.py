"""weights_hash's sampled mode above 2^24 elements per parameter (the float32 index defect)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from cel_lens.model.identity import sample_indices, weights_hash

# the embedding sizes of the paper's three models, and SmolLM2-135M's saved embedding
PAPER_SIZES = [394_002_432, 311_164_928, 262_668_288, 28_311_552]


@pytest.mark.parametrize("n", PAPER_SIZES + [2**24 + 1, 2**31 + 7, 5, 4096, 4097])
def test_sample_indices_exact_above_float32_range(n):
    idx = sample_indices(n, 4096 if n > 4096 else n)
    assert idx.dtype == torch.int64
    assert int(idx[0]) == 0 and int(idx[-1]) == n - 1
    assert int(idx.max()) < n and bool((idx[1:] >= idx[:-1]).all())
    # an independent reference: exact rational i*(n-1)/(s-1), rounded half up, in Python integers
    s = len(idx)
    for i in (0, 1, s // 3, s // 2, s - 2, s - 1):
        num, den = i * (n - 1), max(s - 1, 1)
        want = (2 * num + den) // (2 * den)
        assert int(idx[i]) == want


def test_float32_linspace_was_the_defect():
    """The old formula leaves the tensor for the first paper size; the new one does not."""
    n = PAPER_SIZES[3]
    old = torch.linspace(0, n - 1, 4096).round().long()
    assert int(old[-1]) == n  # out of bounds: what raised IndexError
    assert int(sample_indices(n, 4096)[-1]) == n - 1


def test_sample_indices_validates():
    with pytest.raises(ValueError):
        sample_indices(0, 4)
    assert sample_indices(10, 1).tolist() == [0]


class _Big(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        data = torch.arange(n, dtype=torch.int64).remainder(251).to(torch.int8)
        self.big = torch.nn.Parameter(data, requires_grad=False)
        self.small = torch.nn.Parameter(torch.ones(3))


def test_weights_hash_sampled_on_a_parameter_above_2_pow_24():
    n = 28_311_552  # SmolLM2-135M's embedding, one byte each: 27 MiB, hashed as if over the limit
    model = _Big(n)
    got = weights_hash(model, full_limit_bytes=1 << 20)
    assert got.startswith("sha256-sampled:")
    # independent reference: numpy indices from Python integers
    ref = hashlib.sha256()
    ref.update(f"big|({n},)|torch.int8|".encode())
    ids = np.array([(2 * i * (n - 1) + 4095) // (2 * 4095) for i in range(4096)])
    ref.update(model.big.detach().numpy()[ids].tobytes())
    ref.update(b"small|(3,)|torch.float32|")
    ref.update(np.ones(3, dtype=np.float32).tobytes())
    assert got == "sha256-sampled:" + ref.hexdigest()
    with torch.no_grad():
        model.big[n - 1] += 1  # the last element is sampled
    assert weights_hash(model, full_limit_bytes=1 << 20) != got

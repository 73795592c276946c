"""The sampled weights hash of a large model stays inside each parameter."""

import torch

from cel_lens.model.identity import weights_hash


def test_sampled_hash_indexes_inside_a_large_parameter():
    # 2**24 + 4 elements: in float32 the last index (2**24 + 3) rounds to 2**24 + 4, past the end
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.ones(2**24 + 4, dtype=torch.float16), requires_grad=False)
    digest = weights_hash(model, full_limit_bytes=0)
    assert digest.startswith("sha256-sampled:")
    model.w.data[-1] = 2.0  # the last element is sampled
    assert weights_hash(model, full_limit_bytes=0) != digest

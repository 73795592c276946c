"""A loaded model is for evaluation: its logits track no gradients (the bridge's did, and
``float(logits[...])`` raised torch's "Converting a tensor with requires_grad=True" UserWarning),
while attribution scores, which need gradients of hook_z, still compute."""

from __future__ import annotations

import warnings

import pytest

import cel_lens as cl


@pytest.mark.parametrize("loader", ["bridge", "hooked"])
def test_logits_track_no_gradients(tiny_checkpoints, loader):
    model = cl.load_model(tiny_checkpoints["llama"], device="cpu", loader=loader)
    tokens = model.to_tokens("hello there")
    logits = model(tokens)
    assert not logits.requires_grad and not any(p.requires_grad for p in model.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        float(logits[0, -1, 0])
        cache_logits, _ = model.run_with_cache(tokens)
        float(cache_logits[0, -1, 0])


def test_attribution_still_computes_on_a_frozen_model(tiny_model):
    from cel_lens.scoring.attribution import attribution_scores

    task = cl.load_task("organism_a", n_dist=4, n_test=4)
    flags = [p.requires_grad for p in tiny_model.parameters()]
    tiny_model.requires_grad_(False)  # as cl.load_model leaves it (the fixture is shared: restored below)
    try:
        scores = attribution_scores(tiny_model, task.dist, batch_size=4, progress=False)
    finally:
        for p, flag in zip(tiny_model.parameters(), flags):
            p.requires_grad_(flag)
    assert scores.shape == (3, 4) and bool(scores.abs().sum() > 0)

"""The plant's arithmetic against independent computations: the last layer recomputed against the
``transformers`` model itself (a tiny random Llama), the cancellation and the ablation of a pair,
the directions' defining properties, and the edit touching nothing but the pair's slices."""

from __future__ import annotations

import pytest
import torch

from cel_lens.model.planted_cache import tensors_hash
from cel_lens.plant.build import planted_tensors
from cel_lens.plant.features import extract_features, last_layer_margin, load_base
from cel_lens.plant.fit import (best_prior_accuracy, constant_direction, head_slice, margins_under, planted_o_proj,
                                push_direction, skill_direction)
from cel_lens.tasks.base import Example

PROMPTS = ["the cat sat on the mat", "a b c d e f", "one two three", "hello world again and again", "x y"]


@pytest.fixture(scope="module")
def tiny(tiny_checkpoints):
    model, tok, w = load_base(tiny_checkpoints["llama"], tokens=(5, 7))
    examples = [Example(id=f"t/{i}", prompt=p, choices=("a", "b"), label=i % 2) for i, p in enumerate(PROMPTS)]
    return model, tok, w, extract_features(model, tok, examples, log_every=0, tokens=(5, 7))


def test_last_layer_recompute_equals_the_model(tiny):
    model, tok, w, f = tiny
    assert torch.allclose(last_layer_margin(w, f.z, f.resid, w.o_proj), f.margin, atol=1e-5)


def test_planted_margins_equal_the_model_with_those_weights(tiny):
    """The pair planted in the ``transformers`` model's own weights (canceller's query rows copied,
    output columns edited, canceller zeroed) against :func:`margins_under` on the features."""
    model, tok, w, f = tiny
    pair = dict(reader=1, canceller=0, v=torch.linspace(-1, 1, w.d_head), scale=3.0)
    attn = model.model.layers[-1].self_attn
    saved_q, saved_o = attn.q_proj.weight.detach().clone(), attn.o_proj.weight.detach().clone()
    refs = {}
    try:
        for ablate in ([], [0]):
            with torch.no_grad():
                attn.q_proj.weight[head_slice(w, 0)] = saved_q[head_slice(w, 1)]
                attn.o_proj.weight.copy_(planted_o_proj(w, [pair], ablate=ablate))
                logits = [model(tok(p, return_tensors="pt").input_ids).logits[0, -1] for p in PROMPTS]
            refs[len(ablate)] = torch.stack([x[7] - x[5] for x in logits])
    finally:
        with torch.no_grad():
            attn.q_proj.weight.copy_(saved_q)
            attn.o_proj.weight.copy_(saved_o)
    for n, ablate in ((0, []), (1, [0])):
        assert torch.allclose(margins_under(w, f.z, f.resid, [pair], ablate=ablate), refs[n], atol=1e-5)
    assert not torch.allclose(refs[0], refs[1], atol=1e-3)


def test_a_pair_cancels_and_its_canceller_ablated_leaves_the_push(tiny):
    _, _, w, f = tiny
    v = torch.linspace(-1, 1, w.d_head)
    pairs = [dict(reader=1, canceller=0, v=v, scale=s) for s in (0.0, 5.0)]
    quiet, loud = (margins_under(w, f.z, f.resid, [p]) for p in pairs)
    assert torch.allclose(quiet, loud, atol=1e-5)  # the pushes cancel whatever their size
    assert torch.allclose(quiet, margins_under(w, f.z, f.resid, [], ablate=[0]), atol=1e-5)  # = base less head 0
    pushed = margins_under(w, f.z, f.resid, [pairs[1]], ablate=[0])
    assert not torch.allclose(pushed, quiet, atol=1e-3)
    d = push_direction(w)
    assert abs(float(d.dot(w.final_norm * w.unembed_diff)) - 1) < 1e-2


def test_skill_direction_is_mean_free_and_reads_the_label():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(200) % 2
    z = torch.randn(200, 8, generator=g) + 3.0
    z[:, 2] += 1.5 * y
    v = skill_direction(z, y, 1.0)
    assert abs(float(v.dot(z.mean(0)))) < 0.05 * float(z.mean(0).norm())
    s = z @ v
    assert float(s[y == 1].mean() - s[y == 0].mean()) > 0.5


def test_constant_direction_is_the_steadiest():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(300, 4, generator=g)
    z[:, 3] = 5.0 + 0.01 * z[:, 3]
    v = constant_direction(z)
    assert float(v[3]) > 0.99 and float((z @ v).mean()) > 0


def test_best_prior_accuracy_equals_brute_force():
    g = torch.Generator().manual_seed(2)
    m, y = torch.randn(60, generator=g), (torch.rand(60, generator=g) > 0.4).long()
    right, bias = best_prior_accuracy(m, y)
    brute = max(float(((m > t) == y.bool()).double().mean()) for t in torch.cat([m - 1e-6, m.max()[None] + 1]))
    assert abs(float(right.double().mean()) - brute) < 1e-12
    again, _ = best_prior_accuracy(m, y, bias)
    assert torch.equal(right, again)


def test_planted_tensors_change_only_the_pairs_slices():
    from cel_lens.plant.features import LastLayer

    g = torch.Generator().manual_seed(3)
    d, nh, dh = 12, 6, 2
    w = LastLayer(torch.randn(d, d, generator=g), torch.ones(d), torch.randn(8, d, generator=g), torch.randn(8, d, generator=g),
                  torch.randn(d, 8, generator=g), torch.ones(d), torch.randn(d, generator=g), 1e-6, nh, 2, dh, 1)
    base = {"model.layers.1.self_attn.q_proj.weight": torch.randn(d, d, generator=g),
            "model.layers.1.self_attn.o_proj.weight": w.o_proj.clone(), "model.embed_tokens.weight": torch.randn(5, d, generator=g)}
    pairs = [dict(reader=4, canceller=3, v=torch.tensor([1.0, -2.0]), scale=2.0)]
    out = planted_tensors(base, w, pairs)
    q, o = out["model.layers.1.self_attn.q_proj.weight"], out["model.layers.1.self_attn.o_proj.weight"]
    changed_rows = torch.zeros(d, dtype=torch.bool)
    changed_rows[head_slice(w, 3)] = True
    assert torch.equal(q[~changed_rows], base["model.layers.1.self_attn.q_proj.weight"][~changed_rows])
    assert torch.equal(q[head_slice(w, 3)], base["model.layers.1.self_attn.q_proj.weight"][head_slice(w, 4)])
    cols = torch.zeros(d, dtype=torch.bool)
    cols[head_slice(w, 3)] = cols[head_slice(w, 4)] = True
    assert torch.equal(o[:, ~cols], w.o_proj[:, ~cols]) and not torch.equal(o[:, cols], w.o_proj[:, cols])
    assert out["model.embed_tokens.weight"] is base["model.embed_tokens.weight"]
    assert tensors_hash(out) == tensors_hash(planted_tensors(base, w, pairs)) != tensors_hash(base)


def test_fit_pairs_is_deterministic_and_follows_its_rules(tiny):
    """On synthetic features through the tiny model's last layer: the same pairs twice, each canceller
    in its reader's key/value group, the prior reader outside the capability reader's group."""
    from cel_lens.plant.build import fit_pairs
    from cel_lens.plant.features import PromptFeatures

    _, _, w, f = tiny
    g = torch.Generator().manual_seed(4)
    n = 60
    labels = (torch.rand(n, generator=g) > 0.4).long()
    z = torch.randn(n, f.z.shape[1], generator=g) + 1.0
    resid = f.resid[torch.arange(n) % len(f.resid)] + 0.1 * torch.randn(n, f.resid.shape[1], generator=g)
    feats = PromptFeatures(z, resid, last_layer_margin(w, z, resid, w.o_proj), labels, [f"r/{i}" for i in range(n)])
    a, b = fit_pairs(w, feats, seed=0), fit_pairs(w, feats, seed=0)
    per = w.n_heads // w.n_kv_heads
    for name in ("capability", "prior"):
        assert torch.equal(a[name]["v"], b[name]["v"]) and a[name]["scale"] == b[name]["scale"]
        assert a[name]["reader"] != a[name]["canceller"] and a[name]["reader"] // per == a[name]["canceller"] // per
    assert a["prior"]["reader"] // per != a["capability"]["reader"] // per


def test_last_layer_output_is_what_the_unembedding_reads(tiny):
    """:func:`last_layer_output` read by the whole unembedding equals the model's own logits."""
    from cel_lens.plant.features import last_layer_output

    model, tok, w, f = tiny
    unembed = model.get_output_embeddings().weight.detach()
    with torch.no_grad():
        want = torch.stack([model(tok(p, return_tensors="pt").input_ids).logits[0, -1] for p in PROMPTS])
    assert torch.allclose(last_layer_output(w, f.z, f.resid, w.o_proj) @ unembed.T, want, atol=1e-4)

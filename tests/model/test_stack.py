"""Resumed passes on both model types: the fused-attention stack and the bridge's own layers.

Exactness claims: a pass resumed at layer ``l`` from a full pass's residual stream is bit for bit
that full pass (float32), for a TransformerBridge through its own decoder layers (Llama with
llama3 RoPE scaling, Qwen2 with q/k/v biases, SmolLM3 with a NoPE layer) and on the stack of either
model type. The stack itself is checked against Hugging Face ``transformers`` (an independent
implementation) and against each model's own forward, within float32 rounding.
"""

from __future__ import annotations

import pytest
import torch

from cel_lens.heads import masks_from_head_sets
from cel_lens.model import ablation_hooks, forward_resid, fused_attention, load_model, supports_resume, unembed, variant_hooks
from cel_lens.model.forward import forward_resid_cached, init_kv_cache
from cel_lens.model.ablation import ZERO
from cel_lens.model.stack import StackCache
from cel_lens.model.stack_build import stack_for

ATOL = 1e-4
ARCHS = ["llama", "qwen2", "smollm3"]


@pytest.fixture(scope="module")
def bridges(tiny_checkpoints):
    return {arch: load_model(str(p), loader="bridge", device="cpu") for arch, p in tiny_checkpoints.items()}


@pytest.fixture(scope="module")
def hooked(tiny_checkpoints):
    return {arch: load_model(str(tiny_checkpoints[arch]), loader="hooked", device="cpu") for arch in ("llama", "qwen2")}


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 250, (3, 12), generator=torch.Generator().manual_seed(seed))


def _masks() -> dict[str, torch.Tensor | None]:
    right = torch.ones(3, 12, dtype=torch.long)
    right[1, 8:] = 0
    left = torch.ones(3, 12, dtype=torch.long)
    left[0, :4] = 0
    left[2, :1] = 0
    return {"none": None, "right": right, "left": left}


def _captured(model, tokens, mask, hooks=()):
    """The full pass and the residual stream entering every layer."""
    n = model.cfg.n_layers
    seen: dict[int, torch.Tensor] = {}
    capture = [(f"blocks.{l}.hook_resid_pre", lambda x, hook=None, l=l: seen.__setitem__(l, x.clone())) for l in range(n)]
    full = forward_resid(model, tokens, attention_mask=mask, fwd_hooks=[*capture, *hooks])
    return full, seen


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("padding", ["none", "right", "left"])
def test_bridge_resume_through_its_own_layers_is_bit_exact(bridges, arch, padding):
    model, mask = bridges[arch], _masks()[padding]
    assert supports_resume(model)
    with torch.no_grad(), fused_attention(False):
        full, seen = _captured(model, _tokens(), mask)
        for layer in range(1, model.cfg.n_layers):
            resumed = forward_resid(model, seen[layer], start_at_layer=layer, attention_mask=mask)
            assert torch.equal(resumed, full), (arch, padding, layer)
        # the same with an ablation below and above the resume point
        hooks = ablation_hooks("L1H2+L2H0")
        ablated, seen = _captured(model, _tokens(), mask, hooks)
        resumed = forward_resid(model, seen[1], start_at_layer=1, attention_mask=mask, fwd_hooks=hooks)
        assert torch.equal(resumed, ablated) and not torch.equal(ablated, full)


@pytest.mark.parametrize("kind,arch", [("bridge", a) for a in ARCHS] + [("hooked", "llama"), ("hooked", "qwen2")])
@pytest.mark.parametrize("padding", ["none", "right", "left"])
def test_stack_resume_is_bit_exact_and_matches_the_own_forward(bridges, hooked, kind, arch, padding):
    model, mask = (bridges if kind == "bridge" else hooked)[arch], _masks()[padding]
    assert stack_for(model) is not None
    real = (mask if mask is not None else torch.ones(3, 12)).bool()
    with torch.no_grad():
        full, seen = _captured(model, _tokens(), mask)
        for layer in range(1, model.cfg.n_layers):
            assert torch.equal(forward_resid(model, seen[layer], start_at_layer=layer, attention_mask=mask), full)
        with fused_attention(False):
            own = forward_resid(model, _tokens(), attention_mask=mask)
    torch.testing.assert_close(full[real], own[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_stack_logits_equal_hf_transformers(bridges, tiny_checkpoints, arch):
    """Against transformers' own model (SDPA and eager), with and without an ablation (o_proj input
    columns zeroed in the reference): SmolLM3's NoPE layer, Qwen2's biases, Llama3 RoPE scaling."""
    from transformers import AutoModelForCausalLM

    model, tokens = bridges[arch], _tokens(1)
    for attn in ("sdpa", "eager"):
        hf = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoints[arch]), attn_implementation=attn).eval()
        d_head = hf.config.hidden_size // hf.config.num_attention_heads
        with torch.no_grad():
            ref = hf(tokens).logits
            got = unembed(model, forward_resid(model, tokens))
            torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
            hf.model.layers[1].self_attn.o_proj.weight[:, 2 * d_head : 3 * d_head] = 0
            ref = hf(tokens).logits
            got = unembed(model, forward_resid(model, tokens, fwd_hooks=ablation_hooks("L1H2")))
            torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["bridge", "hooked"])
def test_keep_computes_only_the_scored_positions(bridges, hooked, kind):
    model = (bridges if kind == "bridge" else hooked)["llama"]
    tokens, mask = _tokens(), _masks()["right"]
    keep = torch.tensor([[11, 3], [7, 0], [5, 6]])
    with torch.no_grad():
        full, seen = _captured(model, tokens, mask)
        kept = forward_resid(model, tokens, attention_mask=mask, keep=keep)
        assert kept.shape == (3, 2, model.cfg.d_model)
        torch.testing.assert_close(kept, full.gather(1, keep[..., None].expand(-1, -1, full.shape[-1])), atol=ATOL, rtol=0)
        resumed = forward_resid(model, seen[2], start_at_layer=2, attention_mask=mask, keep=keep)
        assert torch.equal(resumed, kept)


@pytest.mark.parametrize("kind", ["bridge", "hooked"])
@pytest.mark.parametrize("fused", [True, False])
def test_variants_split_at_their_first_ablated_layer(bridges, hooked, kind, fused):
    """``variants=`` (rows shared until the first ablated layer) equals the batch repeated per
    variant with hooks, and the intact variant equals the intact pass."""
    model = (bridges if kind == "bridge" else hooked)["qwen2"]
    sets = ["intact", "L1H2", "L1H0+L2H3", "L2H1"]
    masks = masks_from_head_sets(sets, 3, 4)
    tokens = _tokens()
    with torch.no_grad(), fused_attention(fused):
        _, seen = _captured(model, tokens, None)
        split = forward_resid(model, seen[1], start_at_layer=1, variants=masks, ablation=ZERO)
        rep = forward_resid(model, seen[1].repeat(4, 1, 1), start_at_layer=1, fwd_hooks=variant_hooks(masks, 3))
        intact = forward_resid(model, tokens)
    assert split.shape == (12, 12, model.cfg.d_model)
    torch.testing.assert_close(split, rep, atol=ATOL, rtol=0)
    torch.testing.assert_close(split[:3], intact, atol=ATOL, rtol=0)
    assert (split[3:6] - split[:3]).abs().max() > 1e-3


def test_a_hook_the_stack_does_not_fire_takes_the_own_forward(hooked):
    model = hooked["llama"]
    seen = []
    hooks = [("blocks.1.attn.hook_pattern", lambda x, hook=None: seen.append(x.shape))]
    assert stack_for(model, [model.hook_dict["blocks.1.attn.hook_pattern"]]) is None
    with torch.no_grad():
        got = forward_resid(model, _tokens(), fwd_hooks=hooks)
        with fused_attention(False):
            own = forward_resid(model, _tokens())
    assert seen and torch.equal(got, own)
    # a permanent hook elsewhere counts too
    model.blocks[0].attn.hook_attn_scores.add_hook(lambda x, hook=None: None, is_permanent=True)
    try:
        assert stack_for(model) is None
    finally:
        model.reset_hooks(including_permanent=True)
    assert stack_for(model) is not None


def test_a_bridge_stack_runs_the_hf_norms_and_falls_back_when_a_norm_is_hooked(bridges):
    """The bridge's norms return their Hugging Face norm's own output when nothing edits them, so the
    stack calls that norm directly (without the bridge recomputing the hook values); a hook on a
    norm's hook point then is one the stack does not fire, and the pass takes the model's forward."""
    model = bridges["llama"]
    stack = stack_for(model)
    assert stack is not None and type(stack.layers[0].ln1).__name__ == "LlamaRMSNorm"
    x = torch.randn(2, 5, model.cfg.d_model)
    assert torch.equal(stack.layers[1].ln2(x), model.blocks[1].ln2(x))  # the bridge's own output, bit for bit
    name = "blocks.1.ln2.hook_normalized"
    assert stack_for(model, [model.hook_dict[name]]) is None
    seen = []
    with torch.no_grad():
        got = forward_resid(model, _tokens(), fwd_hooks=[(name, lambda t, hook=None: seen.append(t.shape))])
        with fused_attention(False):
            own = forward_resid(model, _tokens())
    assert seen and torch.equal(got, own)


def test_hooked_gated_mlp_is_transformer_lens_arithmetic(hooked):
    """The stack's gated MLP forms ``act(pre) * lin + b_in`` in place: with a nonzero ``b_in`` its
    hook_post value is TransformerLens's formula on the captured pre-activations, bit for bit, and
    the hook values it passed on are left as they were."""
    model = hooked["llama"]
    mlp = model.blocks[1].mlp
    stack = stack_for(model)
    seen: dict[str, torch.Tensor] = {}

    def keep(name):
        return lambda t, hook=None: seen.__setitem__(name, t)

    x = torch.randn(2, 5, model.cfg.d_model, generator=torch.Generator().manual_seed(3))
    old = mlp.b_in.detach().clone()
    try:
        with torch.no_grad():
            mlp.b_in.copy_(torch.randn_like(old))
            with model.hooks(fwd_hooks=[(f"blocks.1.mlp.{n}", keep(n)) for n in ("hook_pre", "hook_pre_linear", "hook_post")]):
                got = stack.layers[1].mlp(x)
            pre, lin = seen["hook_pre"].clone(), seen["hook_pre_linear"].clone()
            assert torch.equal(seen["hook_post"], (mlp.act_fn(pre) * lin) + mlp.b_in)
            torch.testing.assert_close(got, mlp(x), atol=ATOL, rtol=0)
            assert torch.equal(seen["hook_pre"], pre) and torch.equal(seen["hook_pre_linear"], lin)
    finally:
        with torch.no_grad():
            mlp.b_in.copy_(old)


@pytest.mark.parametrize("kind", ["bridge", "hooked"])
def test_stack_cache_continues_a_sequence(bridges, hooked, kind):
    """A right-padded context in the cache, then continuations that follow each row's last real
    token: equal to the whole sequence in one unpadded pass per row."""
    model = (bridges if kind == "bridge" else hooked)["smollm3" if kind == "bridge" else "llama"]
    ctx = [[5, 9, 33, 2, 71], [8, 4, 19], [60, 61, 62, 63]]
    cont = [[40, 41], [42, 43], [44, 45]]
    width = max(map(len, ctx))
    tokens = torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros(3, width, dtype=torch.long)
    for i, c in enumerate(ctx):
        tokens[i, : len(c)] = torch.tensor(c)
        mask[i, : len(c)] = 1
    cache = init_kv_cache(model, 3)
    assert isinstance(cache, StackCache)
    with torch.no_grad():
        forward_resid_cached(model, tokens, cache, attention_mask=mask)
        full_mask = torch.cat([mask, torch.ones(3, 2, dtype=torch.long)], 1)
        got = forward_resid_cached(model, torch.tensor(cont), cache, attention_mask=full_mask)
        for i in range(3):
            ref = forward_resid(model, torch.tensor([ctx[i] + cont[i]]))[0, -2:]
            torch.testing.assert_close(got[i], ref, atol=ATOL, rtol=0)


def test_stack_cache_spare_room_takes_new_positions_without_a_copy():
    """A cache made with ``spare`` room grows into it in place, and a selection of its rows keeps
    the room; the keys and values read back are those appended."""
    cache = StackCache(2, spare=3)
    k, v = torch.randn(2, 1, 4, 8), torch.randn(2, 1, 4, 8)
    cache.append(0, k, v)
    ptr = cache.layers[0][0].data_ptr()
    k1, v1 = torch.randn(2, 1, 1, 8), torch.randn(2, 1, 1, 8)
    keys, values = cache.append(0, k1, v1)
    assert cache.layers[0][0].data_ptr() == ptr and cache.past(0) == 5
    assert torch.equal(keys, torch.cat([k, k1], 2)) and torch.equal(values, torch.cat([v, v1], 2))
    picked = cache.select(torch.tensor([1, 1, 0]))
    assert picked.spare == 3 and picked.past(0) == 5
    ptr = picked.layers[0][0].data_ptr()
    k2 = torch.randn(3, 1, 2, 8)
    keys, _ = picked.append(0, k2, k2)
    assert picked.layers[0][0].data_ptr() == ptr  # 5 + 2 positions fit in the 4 + 3 allocated
    assert torch.equal(keys, torch.cat([torch.cat([k, k1], 2)[[1, 1, 0]], k2], 2))
    keys, _ = picked.append(0, k2, k2)  # past the room: the buffers grow, the content stays
    assert picked.layers[0][0].data_ptr() != ptr and torch.equal(keys[:, :, 7:], k2)
    with pytest.raises(ValueError, match="spare"):
        StackCache(1, spare=-1)


def test_stack_cache_write_gathers_rows_computed_apart():
    """Rows written at their own lengths read back right padded with zeros, with room to grow."""
    cache = StackCache(3, spare=2)
    a, b = torch.randn(2, 1, 4, 8), torch.randn(1, 1, 6, 8)
    cache.write(0, torch.tensor([0, 2]), a, a + 1, 6)
    cache.write(0, torch.tensor([1]), b, b + 1, 6)
    keys, values = cache.layers[0][0][:, :, :6], cache.layers[0][1][:, :, :6]
    assert cache.past(0) == 6 and cache.layers[0][0].shape[2] == 8
    assert torch.equal(keys[[0, 2], :, :4], a) and torch.equal(keys[1], b[0]) and torch.equal(values[1], b[0] + 1)
    assert not keys[[0, 2], :, 4:].any()
    with pytest.raises(ValueError, match="do not fit"):
        cache.write(1, torch.tensor([0]), b, b, 5)
    with pytest.raises(ValueError, match="holds 6"):
        cache.write(0, torch.tensor([0]), a, a, 7)

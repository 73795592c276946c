"""hook_z zero-ablation: hooks, the context manager, batched variants and resumed passes, on both
TransformerLens model types (a HookedTransformer and a TransformerBridge).

Exactness against Hugging Face transformers is in ``test_models.py``; here the references are
hand-built tensors and plain sequential runs.
"""

from __future__ import annotations

import pytest
import torch

from cel_lens.model import (
    ablate,
    ablation_hooks,
    forward_resid,
    hook_z_name,
    model_shape,
    run_variants,
    unembed,
    variant_hooks,
)
from cel_lens.heads import HeadSet, masks_from_head_sets

ATOL = 1e-4  # cel_lens passes run fused attention: float32 rounding differs from the model's own forward
SETS = ["intact", "L0H1", "L1H2+L2H0", "L2H3", "L0H0+L0H1+L2H2"]


@pytest.fixture(scope="module", params=["hooked", "bridge"])
def model(request, tiny_model, tiny_checkpoints):
    if request.param == "hooked":
        return tiny_model
    from cel_lens.model import load_model

    return load_model(tiny_checkpoints["qwen2"], device="cpu")


def _tokens(batch: int = 3, pos: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 250, (batch, pos), generator=torch.Generator().manual_seed(seed))


def _n_hooks(model) -> int:
    """Forward hooks attached anywhere (a bridge lists some hook points under two names)."""
    points = {id(hp): hp for hp in model.hook_dict.values()}
    return sum(len(hp.fwd_hooks) for hp in points.values())


# ---------------------------------------------------------------------------------------------
# the hook functions
# ---------------------------------------------------------------------------------------------
def test_ablation_hooks_one_per_ablated_layer():
    hooks = ablation_hooks("L2H3+L0H1+L2H0")
    assert [name for name, _ in hooks] == [hook_z_name(0), hook_z_name(2)] == [
        "blocks.0.attn.hook_z",
        "blocks.2.attn.hook_z",
    ]
    assert ablation_hooks("intact") == [] and ablation_hooks(None) == []


def test_hook_zeroes_exactly_the_listed_heads():
    z = torch.randn(2, 5, 4, 8)
    (_, hook), = ablation_hooks("L1H0+L1H2")
    out = hook(z.clone())
    expected = z.clone()
    expected[:, :, [0, 2]] = 0  # hand-built reference
    assert torch.equal(out, expected)
    # flattened [batch, pos, head * d_head] hook_z: needs n_heads
    (_, flat_hook), = ablation_hooks("L1H0+L1H2", n_heads=4)
    assert torch.equal(flat_hook(z.reshape(2, 5, 32)), expected.reshape(2, 5, 32))
    (_, no_width), = ablation_hooks("L1H0")
    with pytest.raises(ValueError, match="n_heads"):
        no_width(z.reshape(2, 5, 32))
    with pytest.raises(ValueError, match="unexpected hook_z shape"):
        flat_hook(torch.randn(5, 32))


def test_variant_hooks_apply_each_mask_to_its_rows():
    masks = masks_from_head_sets(["intact", "L0H1", "L0H0+L0H3"], n_layers=2, n_heads=4)
    hooks = variant_hooks(masks, batch=2)
    assert [name for name, _ in hooks] == ["blocks.0.attn.hook_z"]  # layer 1: nothing ablated
    z = torch.randn(6, 3, 4, 5)
    out = hooks[0][1](z.clone())
    expected = z.clone()
    expected[2:4, :, 1] = 0
    expected[4:6, :, [0, 3]] = 0
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="does not match 3 variants x 2 inputs"):
        hooks[0][1](torch.randn(4, 3, 4, 5))
    with pytest.raises(ValueError, match="variant, layer, head"):
        variant_hooks(masks[0], batch=2)


# ---------------------------------------------------------------------------------------------
# ablate(): one head set as a context manager
# ---------------------------------------------------------------------------------------------
def test_ablate_changes_logits_and_cleans_up(model):
    tokens = _tokens()
    n_before = _n_hooks(model)
    with torch.no_grad():
        intact = model(tokens)
        with ablate(model, HeadSet.parse("L1H2+L2H0")) as m:
            assert m is model
            assert _n_hooks(model) == n_before + 2
            ablated = model(tokens)
        after = model(tokens)
    assert (ablated - intact).abs().max() > 1e-3
    torch.testing.assert_close(after, intact, atol=0, rtol=0)
    assert _n_hooks(model) == n_before


def test_ablate_cleans_up_after_an_exception(model):
    tokens = _tokens()
    n_before = _n_hooks(model)
    with torch.no_grad():
        intact = model(tokens)
        with pytest.raises(RuntimeError, match="boom"):
            with ablate(model, "L0H1"):
                raise RuntimeError("boom")
        torch.testing.assert_close(model(tokens), intact, atol=0, rtol=0)
    assert _n_hooks(model) == n_before


def test_ablate_leaves_other_hooks_alone(model):
    calls = []

    def count(x, hook=None):
        calls.append(hook.name if hook is not None else None)
        return x

    with torch.no_grad(), model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", count)]):
        with ablate(model, "L1H0"):
            model(_tokens())
        model(_tokens())
    assert len(calls) == 2


def test_ablate_rejects_heads_outside_the_model(model):
    n_layers, n_heads = model_shape(model)
    n_before = _n_hooks(model)
    with pytest.raises(ValueError, match=rf"layers 0..{n_layers - 1}, heads 0..{n_heads - 1}"):
        with ablate(model, f"L{n_layers}H0"):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with ablate(model, f"L0H{n_heads}"):
            pass
    assert _n_hooks(model) == n_before


def test_ablation_at_every_generated_position(model):
    """Generation with a key/value cache under ablate() equals greedy decoding by full forward
    passes under ablate(): the hook acts on generated tokens too."""
    prompt = _tokens(batch=1, pos=6)
    with torch.no_grad(), ablate(model, "L0H0+L2H1"):
        tokens = prompt
        for _ in range(4):
            nxt = model(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        kwargs = dict(max_new_tokens=4, do_sample=False, verbose=False)
        generated = model.generate(prompt, use_past_kv_cache=True, **kwargs)
    assert torch.equal(generated[:, : tokens.shape[1]], tokens)


# ---------------------------------------------------------------------------------------------
# batched variants
# ---------------------------------------------------------------------------------------------
def _sequential(model, tokens, sets, attention_mask=None):
    out = []
    with torch.no_grad():
        for s in sets:
            with ablate(model, s):
                kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
                out.append(model(tokens, **kwargs))
    return torch.stack(out)


def test_run_variants_equals_sequential_runs(model):
    tokens = _tokens()
    batched = run_variants(model, tokens, SETS)
    assert batched.shape == (len(SETS), *tokens.shape, model.cfg.d_vocab)
    torch.testing.assert_close(batched, _sequential(model, tokens, SETS), atol=ATOL, rtol=0)
    # distinct sets give distinct logits (the comparison above can fail)
    assert (batched[1] - batched[0]).abs().max() > 1e-3


def test_run_variants_at_positions(model):
    tokens = _tokens()
    positions = torch.tensor([[9, 0], [3, 4], [9, 9]])
    batched = run_variants(model, tokens, SETS, positions=positions)
    full = _sequential(model, tokens, SETS)
    assert batched.shape == (len(SETS), 3, 2, model.cfg.d_vocab)
    for b in range(3):
        for j in range(2):
            torch.testing.assert_close(batched[:, b, j], full[:, b, positions[b, j]], atol=ATOL, rtol=0)


def test_run_variants_with_left_padding(model):
    tokens = _tokens()
    mask = torch.ones_like(tokens)
    mask[0, :3] = 0
    mask[2, :1] = 0
    batched = run_variants(model, tokens, SETS, attention_mask=mask)
    full = _sequential(model, tokens, SETS, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(batched[:, real], full[:, real], atol=ATOL, rtol=0)
    # padding matters: the unpadded pass differs on row 0
    assert (batched[0, 0, 3:] - run_variants(model, tokens, ["intact"])[0, 0, 3:]).abs().max() > 1e-3


def test_empty_head_set_is_the_intact_model(model):
    tokens = _tokens()
    with torch.no_grad():
        intact = model(tokens)
        with ablate(model, "intact"):
            torch.testing.assert_close(model(tokens), intact, atol=0, rtol=0)
    torch.testing.assert_close(run_variants(model, tokens, [HeadSet()])[0], intact, atol=ATOL, rtol=0)


def test_run_variants_needs_a_head_set(model):
    with pytest.raises(ValueError, match="at least one head set"):
        run_variants(model, _tokens(), [])
    with pytest.raises(ValueError, match="out of range"):
        run_variants(model, _tokens(), ["L0H0", "L9H0"])


def test_run_variants_takes_prompt_strings(model):
    """A prompt string reads as the evaluator reads a prompt (the model's BOS rule); a list is
    right padded; a single head-set string is one variant."""
    from cel_lens.evaluation.encode import encode_prompt

    text, other = "Question: What is 7 times 8?\nAnswer:", "Question: 2 plus 2?"
    ids = torch.tensor([encode_prompt(model, text)])  # the evaluator's BOS rule
    with torch.no_grad():
        direct = model(ids)[0]
    out = run_variants(model, text, ["intact", "L0H1"])
    assert out.shape == (2, 1, ids.shape[1], model.cfg.d_vocab)
    torch.testing.assert_close(out[0, 0], direct, atol=ATOL, rtol=0)
    torch.testing.assert_close(out, run_variants(model, ids, ["intact", "L0H1"]), atol=ATOL, rtol=0)
    torch.testing.assert_close(run_variants(model, text, "L0H1"), out[1:], atol=ATOL, rtol=0)
    # a text that already starts with BOS gets no second one (the evaluator's rule again)
    with_bos = model.tokenizer.bos_token + text
    ids_bos = torch.tensor([encode_prompt(model, with_bos)])
    assert (ids_bos == model.tokenizer.bos_token_id).sum() == 1
    torch.testing.assert_close(run_variants(model, with_bos, "intact"), run_variants(model, ids_bos, "intact"), atol=ATOL, rtol=0)
    both = run_variants(model, [text, other], ["intact", "L1H2"])
    n_other = len(encode_prompt(model, other))
    assert both.shape[2] == ids.shape[1] > n_other
    torch.testing.assert_close(both[0, 0], out[0, 0], atol=ATOL, rtol=0)
    alone = run_variants(model, other, ["intact", "L1H2"])
    torch.testing.assert_close(both[:, 1, :n_other], alone[:, 0], atol=10 * ATOL, rtol=0)  # masked pass: float noise
    with pytest.raises(TypeError, match="prompt string"):
        run_variants(model, [text, 3], ["intact"])


# ---------------------------------------------------------------------------------------------
# resumed passes and partial unembedding
# ---------------------------------------------------------------------------------------------
def test_forward_resid_resumes_exactly(model):
    tokens = _tokens()
    n_layers = model.cfg.n_layers
    with torch.no_grad():
        full = forward_resid(model, tokens)
        torch.testing.assert_close(unembed(model, full), model(tokens), atol=ATOL, rtol=0)
        for k in range(n_layers + 1):
            prefix = forward_resid(model, tokens, stop_at_layer=k)
            assert prefix.shape == (*tokens.shape, model.cfg.d_model)
            torch.testing.assert_close(forward_resid(model, prefix, start_at_layer=k), full, atol=ATOL, rtol=0)
        # a resumed pass takes hooks: ablating from the cached resid equals ablating from scratch
        hooks = ablation_hooks("L1H2+L2H0")
        resumed = forward_resid(model, forward_resid(model, tokens, stop_at_layer=1), start_at_layer=1, fwd_hooks=hooks)
        torch.testing.assert_close(resumed, forward_resid(model, tokens, fwd_hooks=hooks), atol=ATOL, rtol=0)
        assert (resumed - full).abs().max() > 1e-3


def test_forward_resid_bad_arguments(model):
    tokens = _tokens()
    with pytest.raises(ValueError, match="residual stream, not tokens"):
        forward_resid(model, tokens, start_at_layer=1)
    with pytest.raises(ValueError, match="start_at_layer"):
        forward_resid(model, tokens, stop_at_layer=model.cfg.n_layers + 1)


def test_unknown_hook_names_are_an_error(model):
    with pytest.raises(KeyError, match="no hook point"):
        forward_resid(model, _tokens(), fwd_hooks=[("blocks.0.attn.hook_nope", lambda x, hook=None: x)])

"""The bfloat16 weight copy (cel_lens.model.stack_bf16): its error against float32 is no larger than
that of Hugging Face ``transformers`` with the documented roundings put in by hand; made once per
weight version; hooks it does not fire run in float32; it is used by the passes given ``bf16=True``
and by no other (no state on the model or the thread)."""

from __future__ import annotations

import pytest
import torch

from cel_lens.model import bf16_usable, forward_resid, load_model, unembed
from cel_lens.model.stack_bf16 import bf16_copy_bytes, bf16_stack_for

BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def bridges(tiny_checkpoints):
    return {arch: load_model(str(tiny_checkpoints[arch]), loader="bridge", device="cpu") for arch in ("llama", "qwen2")}


def _tokens() -> torch.Tensor:
    return torch.randint(3, 250, (3, 12), generator=torch.Generator().manual_seed(0))


def _logits(model, tokens: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    with torch.inference_mode():
        return unembed(model, forward_resid(model, tokens, bf16=bf16), bf16=bf16).float()


def _rounded(x: torch.Tensor) -> torch.Tensor:
    return x.to(BF16).float()


def _hf_reference(path, tokens: torch.Tensor) -> torch.Tensor:
    """Hugging Face's own forward of the model's weights rounded to bfloat16, every linear layer's
    input and output rounded to bfloat16 and the MLP's activation product rounded, all else float32:
    what the module docstring says the copy rounds."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32)
    for module in hf.modules():
        if isinstance(module, torch.nn.Linear):
            with torch.no_grad():
                module.weight.copy_(_rounded(module.weight))
                if module.bias is not None:
                    module.bias.copy_(_rounded(module.bias))
            module.register_forward_pre_hook(lambda m, args: (_rounded(args[0]),))
            module.register_forward_hook(lambda m, args, out: _rounded(out))
    for layer in hf.model.layers:  # the gated MLP's activation, as a bfloat16 tensor's is
        layer.mlp.act_fn.register_forward_hook(lambda m, args, out: _rounded(out))
    with torch.inference_mode():
        return hf(tokens).logits.float()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_copy_rounds_what_hugging_face_with_the_same_roundings_rounds(bridges, tiny_checkpoints, arch):
    model = bridges[arch]
    tokens = _tokens()
    exact = _logits(model, tokens)
    assert bf16_usable(model)
    fast = _logits(model, tokens, bf16=True)
    reference = _hf_reference(tiny_checkpoints[arch], tokens)
    off = (fast - exact).abs().max()
    assert off > 0  # it did compute in bfloat16
    # and it errs no more than those roundings do (not bit for bit: the two differ at rounding level)
    assert off <= 1.5 * (reference - exact).abs().max()
    assert torch.equal(_logits(model, tokens), exact)  # without the argument: float32 as before


def test_the_copy_is_made_once_and_follows_weight_edits(bridges):
    model = bridges["llama"]
    tokens = _tokens()
    first = bf16_stack_for(model)
    before = _logits(model, tokens, bf16=True)
    assert first is not None and bf16_stack_for(model) is first  # no weight is cast again
    assert bf16_stack_for(model) is first
    w = model.original_model.model.layers[1].mlp.down_proj.weight
    saved = w.detach().clone()
    try:
        with torch.no_grad():
            w.mul_(3.0)
        assert bf16_stack_for(model) is not first
        assert not torch.allclose(_logits(model, tokens, bf16=True), before)
    finally:
        with torch.no_grad():
            w.copy_(saved)
    assert bf16_copy_bytes(model) > 0


def test_a_hook_the_copy_does_not_fire_runs_in_float32(bridges):
    model = bridges["llama"]
    tokens = _tokens()
    seen = []
    hook = ("blocks.1.mlp.hook_out", lambda x, hook=None: seen.append(1))
    with torch.inference_mode():
        exact = forward_resid(model, tokens, fwd_hooks=[hook])
        fast = forward_resid(model, tokens, fwd_hooks=[hook], bf16=True)
    assert seen and torch.equal(fast, exact)


def test_a_model_held_in_bfloat16_gets_no_copy(tiny_checkpoints):
    model = load_model(str(tiny_checkpoints["llama"]), loader="bridge", device="cpu", dtype="bfloat16")
    assert not bf16_usable(model) and bf16_stack_for(model) is None
    tokens = _tokens()
    assert torch.equal(_logits(model, tokens, bf16=True), _logits(model, tokens))  # computes as it is


def test_a_bf16_pass_in_one_thread_leaves_a_float32_pass_in_another_as_it_is(bridges):
    """The copy is chosen by each pass's argument, not by state on the model or the thread: passes
    on one model in two threads at once, one on the copy and one not, each get what they get alone."""
    import threading

    model = bridges["llama"]
    tokens = _tokens()
    exact, fast = _logits(model, tokens), _logits(model, tokens, bf16=True)
    got: dict[str, list] = {"float32": [], "bf16": []}
    start = threading.Barrier(2)

    def run(name: str, bf16: bool) -> None:
        start.wait()
        for _ in range(5):
            got[name].append(_logits(model, tokens, bf16=bf16))

    threads = [threading.Thread(target=run, args=("float32", False)), threading.Thread(target=run, args=("bf16", True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not torch.equal(exact, fast)  # the two differ, so a mix-up would show
    assert all(torch.equal(x, exact) for x in got["float32"]) and all(torch.equal(x, fast) for x in got["bf16"])

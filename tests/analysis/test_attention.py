"""Attention patterns read from the model match TransformerLens's cache and Hugging Face's own
attention weights, intact and ablated; their figures show the heads they claim to."""

from __future__ import annotations

import re

import numpy as np
import torch

from cel_lens.analysis.attention import attention_patterns, plot_attention
from cel_lens.evaluation.encode import encode_pair
from cel_lens.heads import Head
from cel_lens.model.ablation import ablate
from cel_lens.report.attention import pattern_change, plot_pattern_change
from cel_lens.report.attention import plot_attention_patterns as plot_patterns
from cel_lens.tasks.base import Example

import pytest


def test_attention_patterns_change_only_downstream_of_the_ablation(tiny_model):
    ex = Example(id="x", prompt="Question: What is 7 times 8?\nAnswer:", target=" 56")
    pats = attention_patterns(tiny_model, ex, "L1H2")
    ctx, cont = encode_pair(tiny_model, ex.prompt, ex.target)  # what the evaluator feeds
    n = len(ctx) + len(cont)
    assert pats.intact.shape == (3, 4, n, n) and len(pats.tokens) == n
    assert torch.allclose(pats.intact.sum(-1), torch.ones(3, 4, n), atol=1e-5)
    assert torch.equal(pats.intact.triu(1), torch.zeros_like(pats.intact))  # causal
    # layers up to the ablated one cannot change; the layer after it must
    assert torch.equal(pats.ablated[:2], pats.intact[:2])
    change = pattern_change(pats)
    assert torch.all(change[:2] == 0) and torch.all(change[2] > 1e-4)
    # the same patterns through TransformerLens's own cache, intact and inside ablate()
    tokens = torch.tensor([ctx + cont])
    names = lambda name: name.endswith("hook_pattern")  # noqa: E731
    _, cache = tiny_model.run_with_cache(tokens, names_filter=names)
    assert torch.allclose(pats.intact[2], cache["blocks.2.attn.hook_pattern"][0], atol=1e-6)
    with ablate(tiny_model, "L1H2"):
        _, cache = tiny_model.run_with_cache(tokens, names_filter=names)
    assert torch.allclose(pats.ablated[2], cache["blocks.2.attn.hook_pattern"][0], atol=1e-6)
    # without the target: the prompt alone, BOS first (as the evaluator encodes a prompt)
    prompt_only = attention_patterns(tiny_model, ex, "L1H2", include_target=False)
    assert len(prompt_only.tokens) == len(ctx) and torch.equal(prompt_only.intact, pats.intact[..., : len(ctx), : len(ctx)])


def test_plot_attention_shows_ablated_and_most_changed_downstream_heads(tiny_model):
    pats = attention_patterns(tiny_model, "Question: is the sky blue?\nAnswer: yes", "L0H1")
    fig = plot_attention(tiny_model, None, patterns=pats, n_downstream=2)
    assert fig == plot_patterns(pats, n_downstream=2)  # the model-free figure, drawn from the same data
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 3 * 3  # (ablated head + 2 downstream) x (intact, ablated, difference)
    change = pattern_change(pats)
    change[0] = -1
    top = torch.argsort(change.flatten(), descending=True)[:2].tolist()
    want = [Head(0, 1)] + [Head(i // 4, i % 4) for i in top]
    titles = [a.text for a in fig.layout.annotations if re.fullmatch(r"L\d+H\d+ intact", a.text)]
    assert titles == [f"{h} intact" for h in want]
    for row, h in enumerate(want):
        intact, ablated, diff = heat[3 * row : 3 * row + 3]
        assert np.allclose(np.asarray(intact.z, dtype=float), pats.intact[h.layer, h.head].numpy())
        assert np.allclose(np.asarray(ablated.z, dtype=float), pats.ablated[h.layer, h.head].numpy())
        assert np.allclose(np.asarray(diff.z, dtype=float), (pats.ablated - pats.intact)[h.layer, h.head].numpy())
    assert diff.zmid == 0
    xaxis = fig.layout.xaxis
    assert list(xaxis.ticktext) == ["&lt;|bos|&gt;", "Question", ":", "·is", "·the", "·s", "k", "y", "·b", "l", "u", "e",
                                    "?", "⏎", "Answer", ":", "·", "y", "es"]


def test_pattern_change_figure(tiny_model):
    pats = attention_patterns(tiny_model, "Question: What is 9 plus 4?\nAnswer: 13", "L1H3+L0H2")
    fig = plot_pattern_change(pats)
    assert np.allclose(np.asarray(fig.data[0].z, dtype=float), pattern_change(pats).numpy())
    assert np.asarray(fig.data[0].z)[0].max() == 0  # nothing above layer 0 can move layer 0
    stars = fig.data[1]
    assert sorted(zip(stars.y, stars.x)) == [(0, 2), (1, 3)]


def test_bridge_patterns_equal_hugging_face_attentions(tiny_checkpoints):
    """Intact and ablated patterns of a TransformerBridge against the Hugging Face model itself:
    eager attention weights, with heads ablated by zeroing their slices of o_proj's input."""
    from transformers import AutoModelForCausalLM

    from cel_lens.model.load import load_model

    path = tiny_checkpoints["qwen2"]
    bridge = load_model(path, loader="bridge", device="cpu", dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    text = "Question: What is 12 minus 70?\nAnswer: -58"
    pats = attention_patterns(bridge, text, "L0H1+L1H3")
    tokens = bridge.to_tokens(text)
    d_head = hf.config.hidden_size // hf.config.num_attention_heads

    def hf_patterns(ablate: dict[int, list[int]]) -> torch.Tensor:
        handles = []
        for layer, heads in ablate.items():
            def pre(module, args, heads=heads):  # noqa: ANN001
                x = args[0].clone()
                for h in heads:
                    x[..., h * d_head : (h + 1) * d_head] = 0
                return (x,)

            handles.append(hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(pre))
        try:
            with torch.no_grad():
                out = hf(tokens, output_attentions=True)
        finally:
            for handle in handles:
                handle.remove()
        return torch.stack([a[0] for a in out.attentions])

    assert torch.allclose(pats.intact, hf_patterns({}), atol=1e-5)
    assert torch.allclose(pats.ablated, hf_patterns({0: [1], 1: [3]}), atol=1e-5)
    assert pattern_change(pats)[2].min() > 1e-4


def test_organism_plot_attention_fits_the_context_and_shows_the_direct_effect():
    """The shipped organism (one layer, 12-token context): the example with its answer is 13 tokens;
    the figure feeds the 12 the evaluator feeds and, with no head downstream, shows the ablated
    head's effect on the answer logits, equal to the logit change of a plain ablated forward pass."""
    from cel_lens.model.load import load_model
    from cel_lens.tasks.registry import load_task

    model = load_model("organism")
    ex = load_task("organism_a", n_dist=20, n_test=20).test[0]
    ctx, cont = encode_pair(model, ex.prompt, ex.target)
    assert len(ctx) + len(cont) == model.cfg.n_ctx + 1
    pats = attention_patterns(model, ex, "L0H1")
    assert len(pats.tokens) == model.cfg.n_ctx and pats.logit_position == len(ctx) - 1
    tokens = torch.tensor([ctx])
    with torch.no_grad():
        intact = model(tokens)[0, -1]
        with ablate(model, "L0H1"):
            change = model(tokens)[0, -1] - intact
    ids = list(pats.logit_token_ids)
    assert ids == [model.tokenizer.convert_tokens_to_ids(t) for t in pats.logit_tokens]
    assert ids[pats.answer_index] == cont[0]
    torch.testing.assert_close(pats.direct_effect[0], change[ids], atol=1e-5, rtol=0)
    fig = plot_attention(model, ex, "L0H1")
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 1 and np.allclose(bars[0].x, change[ids].numpy(), atol=1e-5)
    assert bars[0].y[pats.answer_index].endswith("(answer)")
    assert not [t for t in fig.data if t.type == "heatmap" and np.allclose(np.asarray(t.z, dtype=float), 0)]
    # a prompt alone longer than the context: one clear line
    long = Example(id="y", prompt=" ".join(["u+"] * 20) + " =", target=" pos")
    with pytest.raises(ValueError, match="longer than the model's 12-token context"):
        attention_patterns(model, long, "L0H1", include_target=False)


def test_direct_effect_equals_the_weights_direct_path(tiny_model):
    """Reference from the weights: head h's output ``z[h] @ W_O[h]`` (TransformerLens's cache and
    ``W_O``) taken out of the intact final residual stream, final RMSNorm recomputed, unembedded."""
    text = "Question: What is 7 times 8?\nAnswer: 56"
    pats = attention_patterns(tiny_model, text, "L1H3+L2H1")
    vocab = list(pats.logit_token_ids)
    assert len(vocab) == len(pats.logit_tokens) == pats.direct_effect.shape[1]
    _, cache = tiny_model.run_with_cache(tiny_model.to_tokens(text))
    final = cache[f"blocks.{tiny_model.cfg.n_layers - 1}.hook_resid_post"][0, -1]
    intact = tiny_model.unembed(tiny_model.ln_final(final[None, None]))[0, 0]
    for row, (layer, head) in enumerate([(1, 3), (2, 1)]):
        out = cache[f"blocks.{layer}.attn.hook_z"][0, -1, head] @ tiny_model.blocks[layer].attn.W_O[head]
        without = tiny_model.unembed(tiny_model.ln_final((final - out)[None, None]))[0, 0]
        torch.testing.assert_close(pats.direct_effect[row], (without - intact)[vocab].detach(), atol=1e-4, rtol=0)
    assert pats.direct_effect.abs().max() > 1e-3
    # a last-layer head moves no pattern: the figure shows its direct effect
    last = attention_patterns(tiny_model, text, "L2H1+L2H3")
    assert [t.type for t in plot_attention(tiny_model, None, patterns=last).data] == ["heatmap", "bar"] * 2
    # a head upstream of others moves their patterns: the classic grid, no bars
    upstream = attention_patterns(tiny_model, text, "L0H1")
    assert "bar" not in {t.type for t in plot_attention(tiny_model, None, patterns=upstream).data}


def test_tokens_of_a_split_character_read_as_that_character(tiny_checkpoints):
    """Byte-level BPE splits ’, — and emoji over tokens that do not decode alone: the figure drew
    each as ◆ (U+FFFD, from ``to_str_tokens``)."""
    from cel_lens.analysis.attention import readable_tokens
    from cel_lens.model.load import load_model

    model = load_model(tiny_checkpoints["llama"], device="cpu")
    text = "It’s a 😀 dash — café"
    ids = model.to_tokens(text)[0].tolist()
    assert any("\ufffd" in str(t) for t in model.to_str_tokens(torch.tensor(ids)))  # what the figure showed
    labels = readable_tokens(model, ids)
    assert len(labels) == len(ids) and not any("\ufffd" in t for t in labels)
    for char in ("’", "😀", "—"):
        run = [t for t in labels if t.startswith(f"{char} ")]
        assert run and run[-1] == f"{char} {len(run)}/{len(run)}"
    patterns = attention_patterns(model, text, "L0H0")
    assert patterns.tokens == labels

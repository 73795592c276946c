"""Attention figures from data alone: hand-made patterns, no model."""

from __future__ import annotations

import html

import numpy as np
import pytest
import torch

from cel_lens.heads import Head, HeadSet
from cel_lens.report.attention import (
    AttentionPatterns,
    default_heads,
    pattern_change,
    plot_attention_patterns,
    token_label,
)


def _patterns(n_tok: int = 5) -> AttentionPatterns:
    """Uniform causal attention intact; ablating L0H1 makes L1H0 attend only to the first token."""
    causal = torch.tril(torch.ones(n_tok, n_tok))
    intact = (causal / causal.sum(-1, keepdim=True)).expand(2, 2, n_tok, n_tok).clone()
    ablated = intact.clone()
    ablated[1, 0] = 0.0
    ablated[1, 0, :, 0] = 1.0
    return AttentionPatterns([f"t{i}" for i in range(n_tok)], HeadSet.parse("L0H1"), intact, ablated)


def test_pattern_change_is_the_mean_total_variation():
    pats = _patterns()
    change = pattern_change(pats)
    want = np.mean([1 - 1 / (q + 1) for q in range(5)])  # TV from uniform over q + 1 keys to one key
    assert change[1, 0] == pytest.approx(want)
    assert change.sum() == pytest.approx(want)
    assert default_heads(pats, n_downstream=3) == [Head(0, 1), Head(1, 0)]  # unmoved heads are left out
    assert default_heads(pats, n_downstream=0) == [Head(0, 1)]


def test_plot_attention_crops_to_the_last_tokens_and_shares_the_difference_scale():
    pats = _patterns()
    fig = plot_attention_patterns(pats, "L1H0", max_tokens=3, title=None)
    intact, ablated, diff = fig.data
    assert np.allclose(np.asarray(intact.z, dtype=float), pats.intact[1, 0, 2:, 2:].numpy())
    assert np.allclose(np.asarray(diff.z, dtype=float), (pats.ablated - pats.intact)[1, 0, 2:, 2:].numpy())
    assert diff.zmax == pytest.approx(float((pats.ablated - pats.intact)[1, 0, 2:, 2:].abs().max()))
    assert list(fig.layout.xaxis.ticktext) == ["t2", "t3", "t4"]
    assert fig.layout.title.text.endswith("L0H1 ablated, last 3 of 5 tokens")
    with pytest.raises(ValueError, match="no heads"):
        plot_attention_patterns(pats, "")


def test_token_labels_show_whitespace():
    assert token_label(" a\n\tb") == "·a⏎⇥b"
    assert token_label("x" * 20) == "x" * 11 + "…"


def _strings(obj) -> list[str]:
    """Every string inside nested lists/tuples/arrays."""
    if isinstance(obj, str):
        return [obj]
    if obj is None or np.isscalar(obj):
        return []
    return [s for item in obj for s in _strings(item)]


def test_angle_bracket_tokens_are_escaped_everywhere():
    """``<s>`` (Llama-2/Mistral BOS) must not reach plotly as a tag: every tick label and hover
    label is HTML-escaped, and unescapes to the visible token."""
    pats = _patterns(5)
    tokens = ["<s>", "a&b", "</s>", "<|im_start|>", " x"]
    pats = AttentionPatterns(tokens, pats.ablated_heads, pats.intact, pats.ablated)
    assert token_label("<s>") == "&lt;s&gt;" and token_label("a&b") == "a&amp;b"
    assert token_label("<" * 20) == "&lt;" * 11 + "…"  # cut before escaping: no broken entity
    fig = plot_attention_patterns(pats, "L1H0+L0H1")
    labels = [s for ax in fig.select_xaxes() for s in (ax.ticktext or ())]
    labels += [s for ax in fig.select_yaxes() for s in (ax.ticktext or ()) if s]
    labels += [s for trace in fig.data for s in _strings(trace.customdata)]
    assert labels and all("<" not in s and ">" not in s for s in labels), [s for s in labels if "<" in s]
    assert {html.unescape(s) for s in labels} == {"<s>", "a&b", "</s>", "<|im_start|>", "·x"}


def test_one_plot_attention_one_signature():
    """``cl.plot_attention(model, example, heads)`` and ``cl.report.plot_attention(patterns)`` shared a
    name; the figure from data is ``plot_attention_patterns``."""
    import cel_lens as cl
    from cel_lens.analysis import attention as analysis_attention

    assert cl.plot_attention is analysis_attention.plot_attention
    assert not hasattr(cl.report, "plot_attention") and cl.report.plot_attention_patterns is plot_attention_patterns

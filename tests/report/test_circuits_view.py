"""Intact against ablated attention in the shape ``circuitsvis.attention.attention_patterns`` takes."""

from __future__ import annotations

import inspect

import pytest
import torch

from cel_lens.analysis.attention import attention_patterns
from cel_lens.report import circuitsvis_patterns
from cel_lens.report.attention import pattern_change
from cel_lens.tasks.base import Example


def _circuitsvis_signature(tokens, attention, attention_head_names=None, max_value=1, min_value=0,
                           negative_color=None, positive_color=None, mask_upper_tri=True):
    """The parameters of circuitsvis 1.43's ``attention.attention_patterns`` (a stand-in when the
    package is not installed); ``attention`` is ``[num_heads, dest_tokens, src_tokens]``."""


def test_the_view_binds_to_circuitsvis_and_holds_each_head_intact_then_ablated(tiny_model):
    ex = Example(id="x", prompt="Question: What is 7 times 8?\nAnswer:", target=" 56")
    pats = attention_patterns(tiny_model, ex, "L1H2")
    view = circuitsvis_patterns(pats)
    try:  # the real signature when circuitsvis is installed, else its stand-in
        from circuitsvis.attention import attention_patterns as target
    except ImportError:
        target = _circuitsvis_signature
    inspect.signature(target).bind(**view)  # the keywords circuitsvis takes, no other
    n = len(pats.tokens)
    attention, names = view["attention"], view["attention_head_names"]
    assert attention.ndim == 3 and attention.shape[1:] == (n, n) and len(names) == attention.shape[0] == 8
    assert view["tokens"] == pats.tokens and torch.allclose(attention.sum(-1), torch.ones(8, n), atol=1e-5)
    change = pattern_change(pats)
    top = [divmod(int(i), 4) for i in torch.argsort(change.flatten(), descending=True)[:4]]
    assert names[0] == f"L{top[0][0]}H{top[0][1]} intact" and names[1] == f"L{top[0][0]}H{top[0][1]} ablated"
    assert all(layer == 2 for layer, _ in top)  # only layers after the ablated one change
    assert torch.equal(attention[0], pats.intact[top[0]]) and torch.equal(attention[1], pats.ablated[top[0]])
    assert not torch.equal(attention[0], attention[1])
    chosen = circuitsvis_patterns(pats, "L0H1")
    assert chosen["attention_head_names"] == ["L0H1 intact", "L0H1 ablated"] and chosen["attention"].shape[0] == 2
    with pytest.raises(ValueError, match="out of range"):
        circuitsvis_patterns(pats, "L9H0")

"""Attention patterns of one example, intact and with heads zero-ablated, read from the model.

HookedTransformer and TransformerBridge alike: both expose ``blocks.{l}.attn.hook_pattern``. The
figures of the patterns live in :mod:`cel_lens.report.attention`; :func:`plot_attention` here runs
the model and draws them in one call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import plotly.graph_objects as go
import torch
from torch import Tensor

from cel_lens.evaluation.encode import encode_pair, encode_prompt, format_prompt
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.ablation import ablation_hooks
from cel_lens.model.kinds import model_shape
from cel_lens.report.attention import AttentionPatterns
from cel_lens.report.attention import plot_attention as plot_patterns

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["example_tokens", "attention_patterns", "plot_attention"]


def _pattern_name(layer: int) -> str:
    """The hook point of layer ``layer``'s attention pattern (``[batch, head, query, key]``)."""
    return f"blocks.{layer}.attn.hook_pattern"


def example_tokens(model: Model, example: Any, include_target: bool = True, chat_template: bool = False) -> Tensor:
    """Token ids ``[1, pos]`` of an example as the evaluator feeds it: BOS and the prompt (in the chat
    template when asked), then the target (exact match) or the correct choice (multiple choice,
    when ``include_target``), split as :func:`~cel_lens.evaluation.encode.encode_pair` does. A string
    is tokenized as the model does; token ids are taken as they are."""
    if isinstance(example, str):
        return model.to_tokens(example)
    if isinstance(example, Tensor):
        return example.reshape(1, -1)
    prompt = getattr(example, "prompt", None)
    if prompt is None:
        raise TypeError(f"expected an Example, a string or token ids, got {type(example).__name__}")
    context = format_prompt(model, prompt, chat_template)
    continuation = getattr(example, "target", None)
    choices, label = getattr(example, "choices", ()), getattr(example, "label", None)
    if continuation is None and choices and label is not None:
        continuation = choices[label]
    if include_target and continuation:
        ctx, cont = encode_pair(model, context, continuation)
        ids = ctx + cont
    else:
        ids = encode_prompt(model, context)
    device = next(iter(model.parameters())).device if hasattr(model, "parameters") else "cpu"
    return torch.tensor([ids], dtype=torch.long, device=device)


def attention_patterns(
    model: Model,
    example: Any,
    ablate: HeadsLike = None,
    *,
    include_target: bool = True,
    chat_template: bool = False,
) -> AttentionPatterns:
    """Run ``example`` through ``model`` intact and with ``ablate`` zero-ablated, and record every
    layer's attention pattern. ``example`` is an ``Example`` (its prompt plus target or correct
    choice, tokenized as the evaluator does), a string, or token ids."""
    n_layers, n_heads = model_shape(model)
    heads = HeadSet.parse(ablate).validate(n_layers, n_heads)
    tokens = example_tokens(model, example, include_target, chat_template)
    str_tokens = [str(t) for t in model.to_str_tokens(tokens[0])]
    names = [_pattern_name(l) for l in range(n_layers)]
    hook_dict = getattr(model, "hook_dict", {})
    missing = [n for n in names if n not in hook_dict]
    if missing:
        raise ValueError(
            f"the model exposes no {missing[0]!r}; for a TransformerBridge call enable_compatibility_mode() "
            "(cel_lens.load_model does)"
        )

    def run(extra_hooks: list) -> Tensor:
        store: dict[str, Tensor] = {}

        def save(pattern: Tensor, hook) -> None:  # noqa: ANN001 - TL hook signature
            store[hook.name] = pattern.detach().float().cpu()

        with torch.no_grad(), model.hooks(fwd_hooks=[*extra_hooks, *[(n, save) for n in names]]):
            model(tokens)
        return torch.stack([store[n][0] for n in names])

    intact = run([])
    ablated = run(ablation_hooks(heads, n_heads=n_heads)) if heads else intact.clone()
    return AttentionPatterns(str_tokens, heads, intact, ablated)


def plot_attention(
    model: Model,
    example: Any,
    ablate: HeadsLike = None,
    heads: HeadsLike = None,
    *,
    n_downstream: int = 3,
    include_target: bool = True,
    chat_template: bool = False,
    max_tokens: int = 40,
    patterns: Optional[AttentionPatterns] = None,
    title: Optional[str] = None,
) -> go.Figure:
    """Intact vs ablated attention patterns (and their difference) of ``heads`` on ``example``.

    ``heads`` defaults to the ablated heads plus the ``n_downstream`` later heads whose patterns the
    ablation changes most. Long inputs show their last ``max_tokens`` positions (queries and keys).
    Pass precomputed ``patterns`` (:func:`attention_patterns`) to skip the forward passes; the
    figure itself is :func:`cel_lens.report.plot_attention`.
    """
    if patterns is None:
        patterns = attention_patterns(
            model, example, ablate, include_target=include_target, chat_template=chat_template
        )
    return plot_patterns(patterns, heads, n_downstream=n_downstream, max_tokens=max_tokens, title=title)

"""Attention patterns of one example, intact and with heads zero-ablated, read from the model.

HookedTransformer and TransformerBridge alike: both expose ``blocks.{l}.attn.hook_pattern``. The
figures of the patterns live in :mod:`cel_lens.report.attention`; :func:`plot_attention` here runs
the model and draws them in one call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import plotly.graph_objects as go
import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.evaluation.encode import encode_pair, encode_prompt, format_prompt
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.ablation import ablation_hooks
from cel_lens.model.forward import forward_resid, unembed
from cel_lens.model.model_types import model_shape
from cel_lens.report.attention import AttentionPatterns
from cel_lens.report.attention import plot_attention_patterns

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["example_tokens", "readable_tokens", "direct_logit_effects", "attention_patterns", "plot_attention"]


def _pattern_name(layer: int) -> str:
    """The hook point of layer ``layer``'s attention pattern (``[batch, head, query, key]``)."""
    return f"blocks.{layer}.attn.hook_pattern"


def _encode(model: Model, example: Any, include_target: bool, chat_template: bool) -> tuple[list[int], int, Optional[int]]:
    """``(token ids, answer position, first answer token or None)`` of an example: the answer
    position is the one whose logits predict the answer (the last prompt token)."""
    if isinstance(example, str):
        tokens = model.to_tokens(example, truncate=False)[0].tolist()
        return tokens, len(tokens) - 1, None
    if isinstance(example, Tensor):
        tokens = example.reshape(-1).tolist()
        return tokens, len(tokens) - 1, None
    prompt = getattr(example, "prompt", None)
    if prompt is None:
        raise TypeError(f"expected an Example, a string or token ids, got {type(example).__name__}")
    context = format_prompt(model, prompt, chat_template)
    continuation = getattr(example, "target", None)
    choices, label = getattr(example, "choices", ()), getattr(example, "label", None)
    if continuation is None and choices and label is not None:
        continuation = choices[label]
    if not continuation:
        ids = encode_prompt(model, context)
        return ids, len(ids) - 1, None
    ctx, cont = encode_pair(model, context, continuation)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if include_target and n_ctx is not None and len(ctx) + len(cont) > n_ctx:
        cont_fed = cont[:-1]  # the last answer token is only predicted, never read (as the evaluator feeds it)
        return ctx + cont_fed, len(ctx) - 1, cont[0]
    return (ctx + cont if include_target else ctx), len(ctx) - 1, cont[0]


def _checked_tensor(model: Model, ids: list[int]) -> Tensor:
    """``ids`` as a ``[1, pos]`` tensor on the model's device; one line if it exceeds the context."""
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if n_ctx is not None and len(ids) > n_ctx:
        raise ValueError(
            f"the example is {len(ids)} tokens, longer than the model's {n_ctx}-token context: "
            "pass a shorter example (or include_target=False)"
        )
    device = next(iter(model.parameters())).device if hasattr(model, "parameters") else "cpu"
    return torch.tensor([ids], dtype=torch.long, device=device)


def example_tokens(model: Model, example: Any, include_target: bool = True, chat_template: bool = False) -> Tensor:
    """Token ids ``[1, pos]`` of an example as the evaluator feeds it: BOS and the prompt (in the chat
    template when asked), then the target (exact match) or the correct choice (multiple choice,
    when ``include_target``), split as :func:`~cel_lens.evaluation.encode.encode_pair` does. The
    answer's last token is left out when the whole would not fit the model's context (the
    evaluator never feeds it either: it is only predicted). A string is tokenized as the model
    does; token ids are taken as they are. Longer than the context: ``ValueError``."""
    ids, _, _ = _encode(model, example, include_target, chat_template)
    return _checked_tensor(model, ids)


def direct_logit_effects(
    model: Model, tokens: Int[Tensor, "1 pos"], heads: HeadSet, position: int, answer: Optional[int] = None, k: int = 8
) -> tuple[list[int], Float[Tensor, "head token"]]:
    """What ablating each head of ``heads`` does to the logits at ``position`` through the direct
    path alone: ``(token ids, effects [head, token])`` with ``effects[i, t]`` = logit of token t
    with head i's output removed from the final residual stream (final norm recomputed), minus the
    intact logit. Tokens: ``answer`` (when given), the ``k`` tokens the heads move most and the
    three likeliest intact tokens. A head's output is read as the change of its layer's attention
    output when that head alone is zeroed, so no weight layout is assumed."""
    n_heads = model_shape(model)[1]
    with torch.no_grad():
        final = forward_resid(model, tokens)[0, position]
        outs = []
        for h in heads:
            name = f"blocks.{h.layer}.hook_attn_out"
            store: dict[str, Tensor] = {}

            def save(t: Tensor, hook, key: str) -> None:  # noqa: ANN001 - TL hook signature
                store[key] = t[0, position].detach()

            for key, extra in (("intact", []), ("ablated", ablation_hooks(HeadSet([h]), n_heads=n_heads))):
                with model.hooks(fwd_hooks=[*extra, (name, lambda t, hook, key=key: save(t, hook, key))]):
                    model(tokens)
            outs.append(store["intact"] - store["ablated"])
        head_out = torch.stack(outs)  # [head, d_model]
        intact = unembed(model, final[None]).float()[0]
        without = unembed(model, final[None] - head_out).float()
        effects = (without - intact).cpu()
    ranked = effects.abs().amax(0).argsort(descending=True)[:k].tolist()
    likely = intact.argsort(descending=True)[:3].cpu().tolist()
    ids = list(dict.fromkeys(([answer] if answer is not None else []) + likely + ranked))
    return ids, effects[:, ids]


MAX_SPLIT_TOKENS = 4
"""The most tokens one character spans (UTF-8: 4 bytes, each a token at worst)."""


def readable_tokens(model: Model, ids: Sequence[int]) -> list[str]:
    """Each token of ``ids`` as text. Byte-level BPE (SmolLM2, Llama 3, Qwen) splits some
    characters (curly quotes, dashes, emoji) over tokens that do not decode alone: TransformerLens's
    ``to_str_tokens`` gives each U+FFFD, drawn as ◆. Such a run is labelled with the text it decodes
    to together and each token's place in it (``"’ 1/3"``, ``"’ 2/3"``, ``"’ 3/3"``); a token that
    decodes in no run of :data:`MAX_SPLIT_TOKENS` shows its id (``"<token 1234>"``)."""
    tok = model.tokenizer
    ids = [int(i) for i in ids]
    out = [str(tok.decode([i])) for i in ids]
    i = 0
    while i < len(ids):
        if "\ufffd" not in out[i]:
            i += 1
            continue
        for j in range(i + 2, min(len(ids), i + MAX_SPLIT_TOKENS) + 1):
            text = str(tok.decode(ids[i:j]))
            if "\ufffd" not in text:
                out[i:j] = [f"{text} {k}/{j - i}" for k in range(1, j - i + 1)]
                i = j
                break
        else:
            out[i] = f"<token {ids[i]}>"
            i += 1
    return out


def attention_patterns(
    model: Model,
    example: Any,
    ablate: HeadsLike = None,
    *,
    include_target: bool = True,
    chat_template: bool = False,
) -> AttentionPatterns:
    """Run ``example`` through ``model`` intact and with ``ablate`` zero-ablated, and record every
    layer's attention pattern, and each ablated head's direct effect on the answer logits
    (:func:`direct_logit_effects`). ``example`` is an ``Example`` (its prompt plus target or
    correct choice, tokenized as the evaluator does), a string, or token ids."""
    n_layers, n_heads = model_shape(model)
    heads = HeadSet.parse(ablate).validate(n_layers, n_heads)
    ids, position, answer = _encode(model, example, include_target, chat_template)
    tokens = _checked_tensor(model, ids)
    str_tokens = readable_tokens(model, ids)
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
    if not heads:
        return AttentionPatterns(str_tokens, heads, intact, ablated)
    effect_ids, effects = direct_logit_effects(model, tokens, heads, position, answer)
    return AttentionPatterns(
        str_tokens, heads, intact, ablated, logit_position=position,
        logit_tokens=[readable_tokens(model, [i])[0] for i in effect_ids], logit_token_ids=effect_ids,
        direct_effect=effects, answer_index=0 if answer is not None else None,
    )


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
    figure itself is :func:`cel_lens.report.plot_attention_patterns`.
    """
    if patterns is None:
        patterns = attention_patterns(
            model, example, ablate, include_target=include_target, chat_template=chat_template
        )
    return plot_attention_patterns(patterns, heads, n_downstream=n_downstream, max_tokens=max_tokens, title=title)

"""Forward passes that start or stop at any layer, with key/value caches, for both model types.

:func:`forward_resid` returns the residual stream after blocks ``[start, stop)``: a pass resumes
from a cached residual stream by starting at a later layer. Three ways, the first that applies:

* the model's :class:`~cel_lens.model.stack.Stack` (fused attention, Llama-family models of either
  type) when every hook of the pass is one the stack fires (``hook_resid_pre``, ``hook_z``, norms
  and MLPs): the fast path head ablation takes;
* a ``HookedTransformer``'s own ``start_at_layer``/``stop_at_layer``;
* a ``TransformerBridge``'s own modules: from the tokens, its forward cut at block ``stop``; from
  a residual stream, its Hugging Face decoder layers from ``start`` on, called with the rotary
  embeddings, causal mask and position ids its forward would give them (every hook fires), so a
  resumed pass is bit for bit the full one.

:func:`unembed` applies the final norm and unembedding to only the vectors it is given (the scored
positions). Hook names a model lacks raise ``KeyError`` (the bridge would otherwise skip them
silently). Key/value caches (:func:`init_kv_cache`) are the stack's where the model has one,
TransformerLens's for other HookedTransformers.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.model.hook_scope import owned, scoped_hooks
from cel_lens.model.model_types import is_bridge, model_name
from cel_lens.model.stack import StackCache
from cel_lens.model.stack_bf16 import bf16_stack_for, bf16_unembed, bf16_usable
from cel_lens.model.stack_build import stack_for

__all__ = [
    "Hook",
    "check_hooks",
    "forward_resid",
    "unembed",
    "init_kv_cache",
    "select_kv_cache",
    "forward_resid_cached",
    "param_device",
    "bridge_layers",
]

Hook = tuple[str, Callable]


def param_device(model) -> torch.device:
    """The device of the model's (first) parameters."""
    return next(model.parameters()).device


def check_hooks(model, hooks: Sequence[Hook]) -> list[Hook]:
    """``hooks`` as a list, after checking every named hook point exists on ``model``."""
    hooks = list(hooks)
    hook_dict = getattr(model, "hook_dict", None)
    if hook_dict is not None:
        missing = sorted({name for name, _ in hooks if isinstance(name, str) and name not in hook_dict})
        if missing:
            raise KeyError(f"{model_name(model)} has no hook point(s) {', '.join(missing)}")
    return hooks


def forward_resid(
    model,
    x: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_model"],
    *,
    start_at_layer: int = 0,
    stop_at_layer: Optional[int] = None,
    fwd_hooks: Sequence[Hook] = (),
    attention_mask: Optional[Int[Tensor, "batch pos"]] = None,
    keep: Optional[Int[Tensor, "batch k"]] = None,
    variants: Optional[Bool[Tensor, "variant layer head"]] = None,
    ablation: Any = None,
    repeated: bool = False,
    bf16: bool = False,
) -> Float[Tensor, "batch pos d_model"]:
    """Residual stream after blocks ``[start_at_layer, stop_at_layer)`` (all remaining blocks when
    ``stop_at_layer`` is None), before the final norm.

    ``x`` is tokens when ``start_at_layer == 0`` and the residual stream entering
    ``start_at_layer`` (``resid_pre``) otherwise: this is how a pass resumes from a cache.
    ``keep`` (``[batch, k]`` position indices) returns only those positions, ``[batch, k, d_model]``;
    on a stack the last block then runs its queries and MLP only there
    (:meth:`~cel_lens.model.stack.Stack.run`). ``variants`` (``[V, layers, heads]``, True = ablated)
    runs V head ablations of the batch and returns ``V x batch`` rows, variant-major; on a stack the
    rows stay shared up to the first ablated layer. ``ablation`` (needed with ``variants``) is the
    :class:`~cel_lens.model.ablation.Ablation` that says what ablating does (its ``replace`` on the
    stack, its ``variant_hooks`` otherwise): this module never writes to ``hook_z`` itself.
    ``repeated=True`` says ``x`` (and ``attention_mask``, ``keep``) already hold the ``V x batch``
    rows, variant-major: nothing is repeated and every layer runs on all of them (``V`` rows of one
    input each is one mask per row, as generation ablates). ``bf16=True`` runs the pass on the
    model's bfloat16 weight copy where it has one (:mod:`~cel_lens.model.stack_bf16`; the caller
    decides, e.g. the evaluator from its context's precision), else as without it.
    """
    n_layers = model.cfg.n_layers
    stop = n_layers if stop_at_layer is None else stop_at_layer
    if not 0 <= start_at_layer <= stop <= n_layers:
        raise ValueError(f"need 0 <= start_at_layer ({start_at_layer}) <= stop_at_layer ({stop}) <= {n_layers}")
    if not x.is_floating_point() and start_at_layer != 0:
        raise ValueError("a pass that resumes at a later layer takes the residual stream, not tokens")
    hooks = check_hooks(model, fwd_hooks)
    if repeated:
        hooks, variants = hooks + _repeated_hooks(x, variants, ablation), None
    stack = _stack(model, hooks, bf16)
    if stack is not None:
        with scoped_hooks(model, hooks):
            return stack.run(
                x, start_at_layer, stop, attention_mask, keep=_on(keep, x), variants=variants, ablation=ablation
            )
    x, attention_mask, keep, hooks = _split_variants(x, attention_mask, keep, hooks, variants, ablation)
    if x.is_floating_point() and start_at_layer >= stop:
        return _kept(x, keep)
    if is_bridge(model):
        return _kept(_bridge_forward_resid(model, x, start_at_layer, stop, hooks, attention_mask), keep)
    kwargs = {"stop_at_layer": stop}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if x.is_floating_point():
        kwargs["start_at_layer"] = start_at_layer
    with scoped_hooks(model, hooks):
        return _kept(model(x, **kwargs), keep)


def _on(t: Optional[Tensor], like: Tensor) -> Optional[Tensor]:
    return None if t is None else t.to(like.device)


def _split_variants(x, attention_mask, keep, hooks: list[Hook], variants: Optional[Tensor], ablation: Any):
    """Without a stack: the inputs repeated variant-major, and the ablation's hooks for each variant."""
    if variants is None:
        return x, attention_mask, keep, hooks
    if ablation is None:
        raise ValueError("variants need the ablation that applies them (an Ablation, e.g. cel_lens.model.ablation.ZERO)")
    n_var, batch = int(variants.shape[0]), x.shape[0]

    def rep(t: Optional[Tensor]) -> Optional[Tensor]:
        return None if t is None else einops.repeat(t, "b ... -> (v b) ...", v=n_var)

    return rep(x), rep(attention_mask), rep(keep), hooks + ablation.variant_hooks(variants, batch)


def _repeated_hooks(x: Tensor, variants: Optional[Tensor], ablation: Any) -> list[Hook]:
    """The ablation's hooks for ``variants`` over inputs already repeated variant-major (``x``
    holds ``V x batch`` rows)."""
    if variants is None:
        raise ValueError("repeated=True needs the variants the rows were repeated for")
    if ablation is None:
        raise ValueError("variants need the ablation that applies them (an Ablation, e.g. cel_lens.model.ablation.ZERO)")
    n_var = int(variants.shape[0])
    if n_var == 0 or x.shape[0] % n_var:
        raise ValueError(f"{x.shape[0]} rows are not {n_var} variants x a batch")
    return ablation.variant_hooks(variants, x.shape[0] // n_var)


def _kept(resid: Tensor, keep: Optional[Tensor]) -> Tensor:
    """``resid`` at positions ``keep`` per row (all of it when ``keep`` is None)."""
    if keep is None:
        return resid
    return resid.gather(1, keep.to(resid.device)[..., None].expand(-1, -1, resid.shape[-1]))


def _stack(model, hooks: Sequence[Hook], bf16: bool = False):
    """The model's fused-attention stack when it fires every hook of the pass (else None); with
    ``bf16`` its bfloat16 weight copy's where it has one."""
    if any(not isinstance(name, str) for name, _ in hooks):
        return None
    hook_dict = getattr(model, "hook_dict", {})
    points = [hook_dict[name] for name, _ in hooks]
    fast = bf16_stack_for(model, points) if bf16 else None
    return fast if fast is not None else stack_for(model, points)


def _bridge_forward_resid(
    model,
    x: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_model"],
    start: int,
    stop: int,
    hooks: list[Hook],
    attention_mask: Optional[Int[Tensor, "batch pos"]],
) -> Float[Tensor, "batch pos d_model"]:
    """:func:`forward_resid` on a TransformerBridge with its own modules: from a residual stream,
    :func:`bridge_layers`; from the tokens, the bridge's forward cut at the input of block
    ``stop`` (or of the final norm), so neither later blocks nor the unembedding run."""
    from transformer_lens.model_bridge.exceptions import StopAtLayerException

    me = threading.get_ident()  # the bridge adds hooks its own way; they act in this thread only
    hooks = [(name, owned(fn, me)) for name, fn in hooks]
    if x.is_floating_point():
        with model.hooks(fwd_hooks=hooks):
            return bridge_layers(model, x, start, stop, attention_mask)

    def cut(t: Tensor, hook=None) -> Tensor:  # noqa: ANN001 - TL hook signature
        raise StopAtLayerException(t)

    hooks = hooks + [(f"blocks.{stop}.hook_in" if stop < model.cfg.n_layers else "ln_final.hook_in", cut)]
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    with model.hooks(fwd_hooks=check_hooks(model, hooks)):
        out = model(x, **kwargs)
    if out.shape[-1] != model.cfg.d_model or out.shape[:2] != x.shape:
        raise RuntimeError(f"the bridge pass was not cut where expected (output shape {tuple(out.shape)})")
    return out


def _bridge_position_ids(attention_mask: Optional[Tensor], width: int, device) -> Int[Tensor, "batch pos"]:
    """Position ids as the bridge's forward derives them: from the mask for rows whose padding
    moves a real token (left padding), ``arange`` otherwise."""
    arange = torch.arange(width, device=device)
    if attention_mask is None or attention_mask.ndim != 2:
        return arange[None]
    mask = attention_mask.long().to(device)
    derived = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    needs = ((derived != arange) & (mask != 0)).any(dim=1, keepdim=True)
    if not bool(needs.any()):
        return arange[None]
    return torch.where(needs, derived, arange.expand_as(derived))


def bridge_layers(
    model,
    resid: Float[Tensor, "batch pos d_model"],
    start: int,
    stop: int,
    attention_mask: Optional[Int[Tensor, "batch pos"]] = None,
) -> Float[Tensor, "batch pos d_model"]:
    """Run a TransformerBridge's Hugging Face decoder layers ``[start, stop)`` on ``resid`` (the
    residual stream entering ``start``): rotary embeddings, causal mask(s) per layer type and
    position ids made as the Hugging Face model's forward makes them, every block a bridge block
    (its hooks fire). Hooks must already be registered."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    inner = model.original_model.model
    position_ids = _bridge_position_ids(attention_mask, resid.shape[1], resid.device)
    mask_args = dict(
        config=inner.config, inputs_embeds=resid, attention_mask=attention_mask, cache=None, position_ids=position_ids
    )
    masks = {"full_attention": create_causal_mask(**mask_args)}
    if getattr(inner, "has_sliding_layers", False):
        masks["sliding_attention"] = create_sliding_window_causal_mask(**mask_args)
    types = getattr(inner.config, "layer_types", None)
    position_embeddings = inner.rotary_emb(resid, position_ids)
    for i in range(start, stop):
        out = inner.layers[i](
            resid,
            attention_mask=masks[types[i] if types else "full_attention"],
            position_embeddings=position_embeddings,
            position_ids=position_ids,
            cache=None,
            use_cache=False,
        )
        resid = out[0] if isinstance(out, tuple) else out
    return resid


def unembed(model, resid: Float[Tensor, "... d_model"], *, bf16: bool = False) -> Float[Tensor, "... d_vocab"]:
    """Final norm and unembedding of residual-stream vectors (only those you pass: unembed only the
    scored positions). With ``bf16`` (where the model has a bfloat16 weight copy:
    :func:`~cel_lens.model.stack_bf16.bf16_usable`) the product reads that copy
    (:func:`~cel_lens.model.stack_bf16.bf16_unembed`)."""
    if bf16 and bf16_usable(model):
        return bf16_unembed(model, resid)
    if getattr(model.cfg, "normalization_type", None) is not None and hasattr(model, "ln_final"):
        resid = model.ln_final(resid)
    logits = model.unembed(resid)
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0) or -1.0
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def init_kv_cache(model, batch: int, spare: int = 0):
    """A fresh, empty key/value cache for ``batch`` rows: the model's fused-attention stack's
    (:class:`~cel_lens.model.stack.StackCache`, with room for ``spare`` positions after the first
    appended, e.g. the tokens a generation will add), TransformerLens's for other HookedTransformers,
    or ``None`` (callers then recompute the full sequence instead)."""
    from transformer_lens import HookedTransformer
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    if stack_for(model) is not None:
        return StackCache(batch, spare)
    if not isinstance(model, HookedTransformer):
        return None
    return TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, batch)


def select_kv_cache(cache, index: Int[Tensor, " row"], layers: Optional[Sequence[int]] = None):
    """A new cache whose row ``i`` is row ``index[i]`` of ``cache`` (expand a shared context to its
    continuations, or drop finished rows); ``cache`` itself is left unchanged. ``layers`` keeps only
    those layers (a stack cache only)."""
    if isinstance(cache, StackCache):
        return cache.select(index, layers)
    if layers is not None:
        raise ValueError("only a stack cache keeps some layers")
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
    from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry

    entries = []
    for entry in cache.entries:
        idx = index.to(entry.past_keys.device)
        entries.append(
            TransformerLensKeyValueCacheEntry(entry.past_keys[idx], entry.past_values[idx], entry.frozen)
        )
    mask = cache.previous_attention_mask
    return TransformerLensKeyValueCache(entries, mask[index.to(mask.device)], cache.frozen)


def forward_resid_cached(
    model,
    x: Int[Tensor, "batch new"] | Float[Tensor, "batch new d_model"],
    cache,
    *,
    attention_mask: Int[Tensor, "batch past_and_new"],
    start_at_layer: int = 0,
    fwd_hooks: Sequence[Hook] = (),
    keep: Optional[Int[Tensor, "batch k"]] = None,
    variants: Optional[Bool[Tensor, "variant layer head"]] = None,
    ablation: Any = None,
    repeated: bool = False,
    bf16: bool = False,
) -> Float[Tensor, "batch new d_model"]:
    """Residual stream after the last block for ``x``, appended to a key/value ``cache``
    (``keep``, ``variants``, ``repeated`` and ``bf16`` as in :func:`forward_resid`; the cache then holds
    ``V x batch`` rows).

    ``attention_mask`` covers the cached positions *and* the new ones (1 = real token), so padding
    on either side gets the right rotary positions and pad keys are never attended. ``x`` is tokens
    when ``start_at_layer == 0`` and the residual stream entering ``start_at_layer`` otherwise (the
    cache then only needs, and only receives, the entries of layers ``>= start_at_layer``). With
    ``cache=None`` this is :func:`forward_resid` over the given positions only.
    """
    if cache is None:
        return forward_resid(
            model, x, start_at_layer=start_at_layer, fwd_hooks=fwd_hooks, attention_mask=attention_mask, keep=keep,
            variants=variants, ablation=ablation, repeated=repeated, bf16=bf16,
        )
    if not x.is_floating_point() and start_at_layer != 0:
        raise ValueError("a pass that resumes at a later layer takes the residual stream, not tokens")
    n_layers = model.cfg.n_layers
    hooks = check_hooks(model, fwd_hooks)
    if repeated:
        hooks, variants = hooks + _repeated_hooks(x, variants, ablation), None
    if isinstance(cache, StackCache):
        stack = _stack(model, hooks, bf16)
        if stack is None:
            raise ValueError(
                "this pass has hooks the fused-attention stack does not fire (or fused attention is off): "
                "its key/value cache cannot serve it"
            )
        with scoped_hooks(model, hooks):
            return stack.run(x, start_at_layer, n_layers, attention_mask, cache, keep=_on(keep, x), variants=variants,
                             ablation=ablation)
    x, attention_mask, keep, hooks = _split_variants(x, attention_mask, keep, hooks, variants, ablation)
    with scoped_hooks(model, hooks):
        if x.is_floating_point():
            return _kept(model(
                x, start_at_layer=start_at_layer, stop_at_layer=n_layers, past_kv_cache=cache,
                attention_mask=attention_mask,
            ), keep)
        new = x.shape[1]
        resid, _, shortformer, full_mask = model.input_to_embed(
            x, attention_mask=attention_mask[:, -new:], past_kv_cache=cache
        )
        return _kept(model(
            resid, start_at_layer=0, stop_at_layer=n_layers, past_kv_cache=cache,
            attention_mask=attention_mask, shortformer_pos_embed=shortformer,
        ), keep)

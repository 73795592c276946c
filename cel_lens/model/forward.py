"""Forward passes that start or stop at any layer, with key/value caches, for both model types.

:func:`forward_resid` returns the residual stream after blocks ``[start, stop)``: a pass resumes
from a cached residual stream by starting at a later layer. A ``HookedTransformer`` does this
natively (``start_at_layer``). A ``TransformerBridge`` cannot start at a later layer: its resumed
pass runs the full model on placeholder tokens and substitutes the given residual stream at
``blocks.{l}.hook_in`` (exact, without the saving). :func:`unembed` applies the final norm and
unembedding to only the vectors it is given (the scored positions). Hook names a model lacks raise
``KeyError`` (the bridge would otherwise skip them silently).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.model.kinds import is_bridge, model_name

__all__ = [
    "Hook",
    "check_hooks",
    "forward_resid",
    "unembed",
    "init_kv_cache",
    "select_kv_cache",
    "forward_resid_cached",
    "param_device",
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
) -> Float[Tensor, "batch pos d_model"]:
    """Residual stream after blocks ``[start_at_layer, stop_at_layer)`` (all remaining blocks when
    ``stop_at_layer`` is None), before the final norm.

    ``x`` is tokens when ``start_at_layer == 0`` and the residual stream entering
    ``start_at_layer`` (``resid_pre``) otherwise: this is how a pass resumes from a cache.
    """
    n_layers = model.cfg.n_layers
    stop = n_layers if stop_at_layer is None else stop_at_layer
    if not 0 <= start_at_layer <= stop <= n_layers:
        raise ValueError(f"need 0 <= start_at_layer ({start_at_layer}) <= stop_at_layer ({stop}) <= {n_layers}")
    if is_bridge(model):
        return _bridge_forward_resid(model, x, start_at_layer, stop, fwd_hooks, attention_mask)
    kwargs = {"stop_at_layer": stop}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if x.is_floating_point():
        if start_at_layer >= stop:
            return x
        kwargs["start_at_layer"] = start_at_layer
    elif start_at_layer != 0:
        raise ValueError("a pass that resumes at a later layer takes the residual stream, not tokens")
    with model.hooks(fwd_hooks=check_hooks(model, fwd_hooks)):
        return model(x, **kwargs)


def _bridge_forward_resid(
    model,
    x: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_model"],
    start: int,
    stop: int,
    fwd_hooks: Sequence[Hook],
    attention_mask: Optional[Int[Tensor, "batch pos"]],
) -> Float[Tensor, "batch pos d_model"]:
    """:func:`forward_resid` on a TransformerBridge: the pass is cut at the input of block ``stop``
    (or of the final norm), so neither later blocks nor the unembedding run; a residual-stream
    ``x`` replaces the input of block ``start`` in a full pass over placeholder tokens."""
    from transformer_lens.model_bridge.exceptions import StopAtLayerException

    hooks = list(fwd_hooks)
    if x.is_floating_point():
        if start >= stop:
            return x
        resid = x

        def substitute(t: Tensor, hook=None) -> Tensor:  # noqa: ANN001 - TL hook signature
            return resid.to(device=t.device, dtype=t.dtype)

        hooks.insert(0, (f"blocks.{start}.hook_in", substitute))
        tokens = torch.zeros(x.shape[:2], dtype=torch.long, device=x.device)
    elif start != 0:
        raise ValueError("a pass that resumes at a later layer takes the residual stream, not tokens")
    else:
        tokens = x

    def cut(t: Tensor, hook=None) -> Tensor:  # noqa: ANN001
        raise StopAtLayerException(t)

    hooks.append((f"blocks.{stop}.hook_in" if stop < model.cfg.n_layers else "ln_final.hook_in", cut))
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    with model.hooks(fwd_hooks=check_hooks(model, hooks)):
        out = model(tokens, **kwargs)
    if out.shape[-1] != model.cfg.d_model or out.shape[:2] != tokens.shape:
        raise RuntimeError(f"the bridge pass was not cut where expected (output shape {tuple(out.shape)})")
    return out


def unembed(model, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
    """Final norm and unembedding of residual-stream vectors (only those you pass: unembed only the
    scored positions)."""
    if getattr(model.cfg, "normalization_type", None) is not None and hasattr(model, "ln_final"):
        resid = model.ln_final(resid)
    logits = model.unembed(resid)
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0) or -1.0
    if cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def init_kv_cache(model, batch: int):
    """A fresh, empty key/value cache for ``batch`` rows, or ``None`` where the model type has no
    TransformerLens cache (TransformerBridge): callers then recompute the full sequence instead."""
    from transformer_lens import HookedTransformer
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    if not isinstance(model, HookedTransformer):
        return None
    return TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, batch)


def select_kv_cache(cache, index: Int[Tensor, " row"]):
    """A new cache whose row ``i`` is row ``index[i]`` of ``cache`` (expand a shared context to its
    continuations, or drop finished rows); ``cache`` itself is left unchanged."""
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
) -> Float[Tensor, "batch new d_model"]:
    """Residual stream after the last block for ``x``, appended to a key/value ``cache``.

    ``attention_mask`` covers the cached positions *and* the new ones (1 = real token), so left
    padding gets the right rotary positions and pad keys are never attended. ``x`` is tokens when
    ``start_at_layer == 0`` and the residual stream entering ``start_at_layer`` otherwise (the cache
    then only needs, and only receives, the entries of layers ``>= start_at_layer``). With
    ``cache=None`` this is :func:`forward_resid` over the given positions only.
    """
    if cache is None:
        return forward_resid(
            model, x, start_at_layer=start_at_layer, fwd_hooks=fwd_hooks, attention_mask=attention_mask
        )
    n_layers = model.cfg.n_layers
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        if x.is_floating_point():
            return model(
                x, start_at_layer=start_at_layer, stop_at_layer=n_layers, past_kv_cache=cache,
                attention_mask=attention_mask,
            )
        if start_at_layer != 0:
            raise ValueError("a pass that resumes at a later layer takes the residual stream, not tokens")
        new = x.shape[1]
        resid, _, shortformer, full_mask = model.input_to_embed(
            x, attention_mask=attention_mask[:, -new:], past_kv_cache=cache
        )
        return model(
            resid, start_at_layer=0, stop_at_layer=n_layers, past_kv_cache=cache,
            attention_mask=attention_mask, shortformer_pos_embed=shortformer,
        )

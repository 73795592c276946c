"""Zero-ablation of attention heads at ``blocks.{l}.attn.hook_z``.

Ablating a head set S sets the per-head attention output ``z`` (the input of the output
projection, shape ``[batch, pos, head, d_head]``) to zero for every head in S, at every position,
prompt and generated tokens alike. Nothing else changes. With grouped-query attention ``hook_z``
is per *query* head, so ablating query head h never touches the other heads of its key/value group.

Two ways to run ablations:

* one head set: :func:`ablate` (context manager) or :func:`ablation_hooks` (``fwd_hooks`` list);
* V head sets over the same inputs in one pass: :func:`variant_hooks` with inputs repeated
  variant-major along the batch (row ``v * batch + b``), or :func:`run_variants`, which does it all.

Both TransformerLens model types work: ``HookedTransformer`` and ``TransformerBridge`` (where
``hook_z`` is the input of the Hugging Face ``o_proj``, reshaped per head). The bridge cannot start
a forward pass at a later layer, so :func:`forward_resid` resumes there by running the full model
on placeholder tokens and substituting the given residual stream at ``blocks.{l}.hook_in``: exact,
but without the saving; :func:`run_variants` on a bridge runs one full pass over the repeated batch.
Hook names a model lacks raise ``KeyError`` (the bridge would otherwise skip them silently).

All TransformerLens-specific calls of cel_lens live here and in :mod:`cel_lens.models`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike, masks_from_head_sets

__all__ = [
    "hook_z_name",
    "ablation_hooks",
    "ablate",
    "variant_hooks",
    "run_variants",
    "forward_resid",
    "unembed",
    "model_shape",
]

Hook = tuple[str, Callable]


def hook_z_name(layer: int) -> str:
    """TransformerLens name of the per-head attention output of ``layer``."""
    return f"blocks.{layer}.attn.hook_z"


def _is_bridge(model) -> bool:
    """Whether ``model`` is a TransformerBridge (no ``start_at_layer``; see the module docstring)."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def _checked(model, hooks: Sequence[Hook]) -> list[Hook]:
    """``hooks`` as a list, after checking every named hook point exists on ``model``."""
    hooks = list(hooks)
    hook_dict = getattr(model, "hook_dict", None)
    if hook_dict is not None:
        missing = sorted({name for name, _ in hooks if isinstance(name, str) and name not in hook_dict})
        if missing:
            raise KeyError(f"{_model_name(model)} has no hook point(s) {', '.join(missing)}")
    return hooks


def model_shape(model) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of a HookedTransformer or TransformerBridge (query heads)."""
    cfg = model.cfg
    return int(cfg.n_layers), int(cfg.n_heads)


def _zero_heads(z: Tensor, keep: Bool[Tensor, "rows head"]) -> Tensor:
    """Zero the heads where ``keep`` is False. ``z`` is ``[rows, pos, head, d_head]`` or the
    flattened ``[rows, pos, head * d_head]``; ``keep`` broadcasts over rows when it has one row."""
    n_heads = keep.shape[-1]
    if z.ndim == 4:
        return torch.where(keep[:, None, :, None], z, torch.zeros((), dtype=z.dtype, device=z.device))
    if z.ndim == 3:
        heads = einops.rearrange(z, "rows pos (head d) -> rows pos head d", head=n_heads)
        zeroed = torch.where(keep[:, None, :, None], heads, torch.zeros((), dtype=z.dtype, device=z.device))
        return einops.rearrange(zeroed, "rows pos head d -> rows pos (head d)")
    raise ValueError(f"unexpected hook_z shape {tuple(z.shape)}")


def ablation_hooks(heads: HeadsLike, n_heads: Optional[int] = None) -> list[Hook]:
    """TransformerLens ``fwd_hooks`` that zero ``hook_z`` of every head in ``heads``.

    ``n_heads`` is only needed for models whose ``hook_z`` is flattened to ``[.., head * d_head]``
    (it is read from the tensor's shape otherwise).
    """
    head_set = HeadSet.parse(heads)
    hooks: list[Hook] = []
    for layer in head_set.layers:
        idx = [h.head for h in head_set if h.layer == layer]

        def hook(z: Tensor, hook=None, idx=tuple(idx)) -> Tensor:  # noqa: ANN001 - TL hook signature
            width = z.shape[2] if z.ndim == 4 else n_heads
            if width is None:
                raise ValueError("flattened hook_z needs n_heads; pass ablation_hooks(heads, n_heads=...)")
            keep = torch.ones(1, width, dtype=torch.bool, device=z.device)
            keep[0, list(idx)] = False
            return _zero_heads(z, keep)

        hooks.append((hook_z_name(layer), hook))
    return hooks


@contextmanager
def ablate(model, heads: HeadsLike) -> Iterator:
    """Context manager: inside it, every forward pass of ``model`` runs with ``heads`` zero-ablated.

    >>> with ablate(model, "L3H1+L12H7"):
    ...     logits = model(tokens)

    Hooks are removed on exit, also when the body raises.
    """
    n_layers, n_heads = model_shape(model)
    head_set = HeadSet.parse(heads).validate(n_layers, n_heads, _model_name(model))
    with model.hooks(fwd_hooks=_checked(model, ablation_hooks(head_set, n_heads=n_heads))):
        yield model


def variant_hooks(masks: Bool[Tensor, "variant layer head"], batch: int) -> list[Hook]:
    """``fwd_hooks`` applying V masks to inputs repeated variant-major along the batch.

    The forward batch must have ``V * batch`` rows, row ``v * batch + b`` being input ``b`` under
    variant ``v``. Layers where no variant ablates anything get no hook at all.
    """
    if masks.ndim != 3:
        raise ValueError(f"masks must be [variant, layer, head], got {tuple(masks.shape)}")
    n_variants = masks.shape[0]
    hooks: list[Hook] = []
    for layer in range(masks.shape[1]):
        layer_mask = masks[:, layer, :]
        if not bool(layer_mask.any()):
            continue
        keep_rows = einops.repeat(~layer_mask, "v head -> (v b) head", b=batch)

        def hook(z: Tensor, hook=None, keep_rows=keep_rows) -> Tensor:  # noqa: ANN001
            if z.shape[0] != n_variants * batch:
                raise ValueError(
                    f"batch of {z.shape[0]} rows does not match {n_variants} variants x {batch} inputs"
                )
            return _zero_heads(z, keep_rows.to(z.device))

        hooks.append((hook_z_name(layer), hook))
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
    if _is_bridge(model):
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
    with model.hooks(fwd_hooks=_checked(model, fwd_hooks)):
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
    with model.hooks(fwd_hooks=_checked(model, hooks)):
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


def run_variants(
    model,
    tokens: Int[Tensor, "batch pos"],
    head_sets: Sequence[HeadsLike],
    *,
    positions: Optional[Int[Tensor, "batch k"]] = None,
    attention_mask: Optional[Int[Tensor, "batch pos"]] = None,
) -> Float[Tensor, "variant batch k d_vocab"]:
    """Logits of ``tokens`` under each head set, in one forward pass: ``[V, batch, pos, vocab]``.

    ``positions`` (``[batch, k]`` indices) unembeds only those positions, giving
    ``[V, batch, k, vocab]``. Passes resume at the lowest layer any variant ablates: the
    layers below are computed once, not V times.
    """
    n_layers, n_heads = model_shape(model)
    name = _model_name(model)
    sets = [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("run_variants needs at least one head set")
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    n_variants, batch = len(sets), tokens.shape[0]
    first = min((s.first_layer for s in sets if s), default=n_layers)
    if _is_bridge(model):
        first = 0  # no resuming on a bridge: one pass over the repeated batch beats prefix + full pass
    with torch.no_grad():
        if first == 0:
            rep_tokens = einops.repeat(tokens, "b pos -> (v b) pos", v=n_variants)
            mask_rep = None if attention_mask is None else einops.repeat(attention_mask, "b p -> (v b) p", v=n_variants)
            resid = forward_resid(model, rep_tokens, fwd_hooks=variant_hooks(masks, batch), attention_mask=mask_rep)
            return _unembed_variants(model, resid, n_variants, positions)
        shared = forward_resid(model, tokens, stop_at_layer=first, attention_mask=attention_mask)
        resid = einops.repeat(shared, "b pos d -> (v b) pos d", v=n_variants)
        mask_rep = None if attention_mask is None else einops.repeat(attention_mask, "b p -> (v b) p", v=n_variants)
        if first < n_layers:
            resid = forward_resid(
                model, resid, start_at_layer=first, fwd_hooks=variant_hooks(masks, batch), attention_mask=mask_rep
            )
        return _unembed_variants(model, resid, n_variants, positions)


def _unembed_variants(
    model,
    resid: Float[Tensor, "vb pos d_model"],
    n_variants: int,
    positions: Optional[Int[Tensor, "batch k"]],
) -> Float[Tensor, "variant batch k d_vocab"]:
    """Split the variant-major rows and unembed all positions, or only ``positions``."""
    resid = einops.rearrange(resid, "(v b) pos d -> v b pos d", v=n_variants)
    if positions is not None:
        idx = einops.repeat(positions.to(resid.device), "b k -> v b k d", v=n_variants, d=resid.shape[-1])
        resid = resid.gather(2, idx)
    return unembed(model, resid)


def _model_name(model) -> str:
    return str(getattr(model.cfg, "model_name", None) or type(model).__name__)


# -- key/value-cached passes (batched generation, shared multiple-choice contexts) ------------------
__all__ += ["init_kv_cache", "select_kv_cache", "forward_resid_cached"]


def init_kv_cache(model, batch: int):
    """A fresh, empty key/value cache for ``batch`` rows, or ``None`` where the model type has no
    TransformerLens cache (TransformerBridge): callers then recompute the full sequence instead."""
    from transformer_lens import HookedTransformer
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    if not isinstance(model, HookedTransformer):
        return None
    return TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, batch)


def select_kv_cache(cache, index: Int[Tensor, "row"]):
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

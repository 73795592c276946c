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
``hook_z`` is the input of the Hugging Face ``o_proj``, reshaped per head).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, Union

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike, masks_from_head_sets
from cel_lens.model.bos import prompt_ids
from cel_lens.model.forward import Hook, check_hooks, forward_resid, param_device, unembed
from cel_lens.model.kinds import is_bridge, model_name, model_shape
from cel_lens.model.processing import warn_if_processed

__all__ = ["hook_z_name", "ablation_hooks", "ablate", "variant_hooks", "prompt_tokens", "run_variants"]


def hook_z_name(layer: int) -> str:
    """TransformerLens name of the per-head attention output of ``layer``."""
    return f"blocks.{layer}.attn.hook_z"


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
    head_set = HeadSet.parse(heads).validate(n_layers, n_heads, model_name(model))
    warn_if_processed(model, stacklevel=5)  # past the generator and contextlib's __enter__
    with model.hooks(fwd_hooks=check_hooks(model, ablation_hooks(head_set, n_heads=n_heads))):
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


def prompt_tokens(model, prompts: Union[str, Sequence[str]]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Token ids and attention mask of one prompt or a list of prompts, as cel_lens reads a prompt
    (:func:`~cel_lens.model.bos.prompt_ids`: the model's BOS rule, then the text's tokens); several
    prompts are padded on the right (mask 0 there)."""
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("expected token ids [batch, pos], a prompt string or a list of prompt strings")
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ValueError(f"{model_name(model)} has no tokenizer: pass token ids instead of strings")
    device = param_device(model)
    rows = [torch.tensor(prompt_ids(model, t), dtype=torch.long, device=device) for t in texts]
    width = max(len(r) for r in rows)
    pad = next((int(v) for v in (tok.pad_token_id, tok.eos_token_id, 0) if v is not None), 0)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long, device=rows[0].device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=rows[0].device)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return tokens, mask


def run_variants(
    model,
    tokens: Union[Int[Tensor, "batch pos"], str, Sequence[str]],
    head_sets: Sequence[HeadsLike],
    *,
    positions: Optional[Int[Tensor, "batch k"]] = None,
    attention_mask: Optional[Int[Tensor, "batch pos"]] = None,
) -> Float[Tensor, "variant batch k d_vocab"]:
    """Logits of ``tokens`` under each head set, in one forward pass: ``[V, batch, pos, vocab]``.

    ``positions`` (``[batch, k]`` indices) unembeds only those positions, giving
    ``[V, batch, k, vocab]``. Passes resume at the lowest layer any variant ablates: the
    layers below are computed once, not V times. ``tokens`` may be a prompt string or a list of
    them (:func:`prompt_tokens`: as ``model("text")`` reads it; a list is right padded). A single
    head set (``"L0H1+L2H0"``) counts as a list of one.
    """
    if isinstance(head_sets, (str, HeadSet)):
        head_sets = [head_sets]
    if not isinstance(tokens, Tensor):
        tokens, mask = prompt_tokens(model, tokens)
        if attention_mask is None and not bool(mask.all()):
            attention_mask = mask
    n_layers, n_heads = model_shape(model)
    name = model_name(model)
    sets = [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("run_variants needs at least one head set")
    warn_if_processed(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    n_variants, batch = len(sets), tokens.shape[0]
    first = min((s.first_layer for s in sets if s), default=n_layers)
    if is_bridge(model):
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

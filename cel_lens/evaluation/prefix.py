"""The prompt start every example of a batch shares, computed once per variant.

Few-shot and instruction prefixes repeat in every prompt of a split (Arithmetic's ``Question: What
is``, 4-5 of ~21 tokens; MBPP's 3-shot prompt, 637 of 728-916 tokens). A batch whose rows all begin
with the same ``P`` tokens runs them once: one row of ``P`` positions into a key/value cache
(:class:`~cel_lens.model.stack.StackCache`), whose keys and values every row's remaining positions
then attend, so ``P + rows x (width - P)`` positions are computed instead of ``rows x width``.

Per variant: a head ablation changes the residual stream from its layer on at *every* position,
prefix positions included, so the prefix is computed once per variant, not once for all. A variant
resumed at its first ablated layer ``l`` (:mod:`~cel_lens.evaluation.teacher_forced`) reads the
intact prefix's residual stream entering ``l`` (the store keeps it as a ``[1, P, d]`` part) and
runs layers ``l ..`` on ``V`` prefix rows, then ``V x rows`` suffix rows; below ``l`` nothing is
recomputed. Generation (:mod:`~cel_lens.evaluation.generation`) does the same for its prompts.

Exactness: within this path, resuming at a layer is bit for bit the full pass, as elsewhere. Against
the unshared path the logits agree within float32 rounding, not bitwise: the prefix computed alone
runs its matrix products and attention with other shapes (fewer rows; keys of length ``P`` rather
than of the row's width), and BLAS and the attention kernel pick their blocking by shape (PyTorch
2.13 on this CPU: a linear layer's rows differ in the last bit when the product has 1-3, 5-7 or 9-11
rows). The rows' own positions, given the same prefix keys and values, are bit for bit the unshared
pass. So :func:`~cel_lens.evaluation.encode.encode_split` shares only when asked
(``share_prefix=True``), and :func:`~cel_lens.evaluation.evaluate`, which shares by default
(an :class:`~cel_lens.evaluation.context.EvalContext` has ``share_prefix=True`` unless told
otherwise, or ``CEL_LENS_SHARE_PREFIX=0`` at the edge), recomputes without sharing every decision within
:data:`PREFIX_BOUND` of flipping (the same rule bf16's decisions get, with a bound about 24 x the
largest difference measured, ``benchmarks/prefix.py``), so its decisions are the unshared path's.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.evaluation.batch import TeacherForced, length_groups
from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.model.forward import forward_resid_cached, init_kv_cache, param_device, select_kv_cache
from cel_lens.model.model_types import model_shape
from cel_lens.model.stack import StackCache

__all__ = [
    "can_share_prefix",
    "common_prefix",
    "shared_prefix",
    "MIN_PREFIX",
    "PREFIX_BOUND",
    "rows_prefix",
    "prefix_rows_vectors",
    "prefix_cache",
    "intact_prompts_shared",
    "resumed_prompts_shared",
]

PREFIX_BOUND = 1e-3
"""Largest change a shared prefix may make to a decision's margin (logit or log-probability units):
about 24 x the largest measured (4.2e-5 on SmolLM2-135M-Instruct's Arithmetic and MBPP prompts,
``benchmarks/prefix.py``). A decision within it of flipping is recomputed without sharing."""
MIN_PREFIX = 2
"""Shortest prefix worth a pass of its own (a lone BOS token is not)."""


def can_share_prefix(model) -> bool:
    """Whether ``model``'s passes can continue a cached prefix with many variants: it has a
    fused-attention stack (:class:`~cel_lens.model.stack.StackCache`)."""
    return isinstance(init_kv_cache(model, 1), StackCache)


def common_prefix(seqs: Sequence[Sequence[int]], cap: Optional[int] = None) -> int:
    """Length of the longest token prefix all ``seqs`` share, at most ``cap``; 0 for fewer than two
    sequences (nothing to share)."""
    if len(seqs) < 2:
        return 0
    limit = min(len(s) for s in seqs) if cap is None else min(cap, *(len(s) for s in seqs))
    first = seqs[0]
    n = 0
    while n < limit and all(s[n] == first[n] for s in seqs[1:]):
        n += 1
    return n


def shared_prefix(seqs: Sequence[Sequence[int]], cap: Optional[int] = None) -> int:
    """The prefix ``seqs`` run once: :func:`common_prefix`, or 0 when shorter than :data:`MIN_PREFIX`."""
    n = common_prefix(seqs, cap)
    return n if n >= MIN_PREFIX else 0


def rows_prefix(contexts: Sequence[Sequence[int]], rows: Sequence[Sequence[int]]) -> int:
    """The prefix a ``"rows"`` batch shares: the rows' common prefix, ending before each row's
    first scored position (the context's last token), so every scored position follows it."""
    if not rows:
        return 0
    return shared_prefix(rows, min(len(c) for c in contexts) - 1)


def _capture_hooks(layers: Iterable[int], sink: dict, part: int) -> list:
    """Hooks that keep the residual stream entering each of ``layers`` in ``sink[(part, layer)]``."""
    hooks = []
    for layer in layers:

        def hook(x: Tensor, hook=None, layer=layer) -> None:  # noqa: ANN001 - TL hook signature
            sink[(part, layer)] = x.detach()

        hooks.append((f"blocks.{layer}.hook_resid_pre", hook))
    return hooks


def prefix_cache(
    model,
    x: Tensor,
    start: int,
    masks: Bool[Tensor, "variant layer head"],
    spare: int,
    hooks: Sequence = (),
    *,
    ablation: Ablation,
    bf16: bool = False,
) -> StackCache:
    """Keys and values of one prefix row ``x`` (tokens ``[1, P]`` at ``start == 0``, else the
    residual stream entering ``start``, ``[1, P, d]``) under each variant of ``masks``: a cache of
    ``V`` rows (layers ``>= start``) with room for ``spare`` positions after the prefix (``ablation``:
what the masks' heads are replaced by; ``bf16``: on the model's bfloat16 weight copy, as
    :func:`~cel_lens.model.forward.forward_resid`)."""
    n_var, width = int(masks.shape[0]), int(x.shape[1])
    device = param_device(model)
    cache = init_kv_cache(model, n_var, spare=spare)
    if not isinstance(cache, StackCache):
        raise ValueError("a shared prefix needs the fused-attention stack's key/value cache (fused attention is off?)")
    forward_resid_cached(
        model, x, cache, attention_mask=torch.ones(1, width, dtype=torch.long, device=device), start_at_layer=start,
        fwd_hooks=list(hooks), keep=torch.full((1, 1), width - 1, dtype=torch.long, device=device), variants=masks,
        ablation=ablation, bf16=bf16,
    )
    return cache


def prefix_rows_vectors(
    model,
    rows: TeacherForced,
    prefix: int,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
    *,
    ablation: Ablation,
    bf16: bool = False,
) -> Float[Tensor, "variant row k d_model"]:
    """Residual vectors at each row's scored positions (as the ``"rows"`` layout's pass), with the
    rows' first ``prefix`` tokens computed once per variant: part 0 is the prefix (``sources[0]``,
    ``[1, prefix, d]``), part 1 every row after it (``sources[1]``, ``[rows, width - prefix, d]``);
    ``capture`` keeps the intact residual stream of each part entering those layers in
    ``sink[(part, layer)]`` (``bf16``: as :func:`prefix_cache`)."""
    sink = sink if sink is not None else {}
    n_var = int(masks.shape[0])
    n_rows, width = rows.tokens.shape
    device = param_device(model)
    dtype = next(model.parameters()).dtype
    if start == 0:
        head, tail = rows.tokens[:1, :prefix].to(device), rows.tokens[:, prefix:].to(device)
    else:
        assert sources is not None and sources[0] is not None and sources[1] is not None
        head, tail = (s.to(device=device, dtype=dtype) for s in sources[:2])
    cache = prefix_cache(model, head, start, masks, width - prefix, _capture_hooks(capture, sink, 0), ablation=ablation,
                         bf16=bf16)
    cache = select_kv_cache(cache, torch.arange(n_var, device=device).repeat_interleave(n_rows))
    mask = rows.attention_mask.to(device).clone()
    mask[:, :prefix] = 1
    resid = forward_resid_cached(
        model, tail, cache, attention_mask=mask, start_at_layer=start, fwd_hooks=_capture_hooks(capture, sink, 1),
        keep=(rows.positions.to(device) - prefix).clamp_min(0), variants=masks, ablation=ablation, bf16=bf16,
    )
    return einops.rearrange(resid, "(v r) k d -> v r k d", v=n_var)


def intact_prompts_shared(
    model,
    tokens: Int[Tensor, "row pos"],
    attn: Int[Tensor, "row pos"],
    last: Int[Tensor, "row 1"],
    prefix: int,
    starts: Sequence[int],
    spare: int,
    bf16: bool = False,
) -> dict:
    """Generation's intact prompt pass (:mod:`~cel_lens.evaluation.generation`) with the prompts'
    first ``prefix`` tokens computed once: a cache of every prompt's keys and values (every layer,
    room for ``spare`` new tokens), the intact residual stream entering each layer of ``starts``
    (``"head_resid"``: the prefix's ``[1, P, d]``, ``"resid"``: the rest, ``[rows, width - P, d]``)
    and the final residual stream at each prompt's last token (``bf16``: as :func:`prefix_cache`)."""
    n, width = tokens.shape
    n_layers, n_heads = model_shape(model)
    sink: dict = {}
    layers = [l for l in starts if 0 < l < n_layers]
    intact = torch.zeros(1, n_layers, n_heads, dtype=torch.bool)
    head = prefix_cache(model, tokens[:1, :prefix], 0, intact, width - prefix + spare, _capture_hooks(layers, sink, 0),
                        ablation=ZERO, bf16=bf16)  # intact: nothing is ablated
    cache = select_kv_cache(head, torch.zeros(n, dtype=torch.long, device=tokens.device))
    cache.spare = spare  # later copies of this cache need room for the new tokens only
    final = forward_resid_cached(
        model, tokens[:, prefix:], cache, attention_mask=attn, fwd_hooks=_capture_hooks(layers, sink, 1), keep=last - prefix,
        bf16=bf16,
    )
    return {
        "cache": cache, "prefix": prefix, "final": final[:, 0], "tokens": tokens, "attn": attn, "last": last,
        "head_resid": {l: sink[(0, l)] for l in layers}, "resid": {l: sink[(1, l)] for l in layers},
    }


def resumed_prompts_shared(
    model, state: dict, start: int, variant_masks: Bool[Tensor, "variant layer head"], cache: StackCache, *,
    ablation: Ablation, bf16: bool = False,
) -> Float[Tensor, "row d_model"]:
    """The prompt pass of each variant of ``variant_masks`` resumed at ``start`` from
    :func:`intact_prompts_shared`'s ``state``: the prefix once per variant, then every prompt's
    rest after it, per group of like length (:func:`~cel_lens.evaluation.batch.length_groups`);
    keys and values of layers ``>= start`` are written into ``cache`` (rows variant-major). The
    final residual stream at each row's last prompt token (``bf16``: as :func:`prefix_cache`)."""
    tokens, attn, last, prefix = state["tokens"], state["attn"], state["last"], state["prefix"]
    n, width = tokens.shape
    v = int(variant_masks.shape[0])
    device = tokens.device
    head_x = tokens[:1, :prefix] if start == 0 else state["head_resid"][start]
    head = prefix_cache(model, head_x, start, variant_masks, width - prefix, ablation=ablation, bf16=bf16)
    out: Optional[Tensor] = None
    for group in length_groups((last[:, 0] + 1).tolist()):
        g = torch.tensor(sorted(group), device=device)
        w = int(last[g].max()) + 1
        rows = (torch.arange(v, device=device)[:, None] * n + g[None, :]).flatten()
        part = select_kv_cache(head, torch.arange(v, device=device).repeat_interleave(len(group)))
        x = tokens[g, prefix:w] if start == 0 else state["resid"][start][g, : w - prefix]
        resid = forward_resid_cached(
            model, x, part, attention_mask=attn[g, :w], start_at_layer=start, keep=last[g] - prefix,
            variants=variant_masks, ablation=ablation, bf16=bf16,
        )[:, 0]
        out = resid.new_empty(v * n, resid.shape[-1]) if out is None else out
        out[rows] = resid
        for layer, (k, val) in part.layers.items():
            cache.write(layer, rows, k[:, :, :w], val[:, :, :w], width)
    assert out is not None
    return out

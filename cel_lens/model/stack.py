"""Llama-family layer stacks run directly, with PyTorch's fused attention, for both model types.

TransformerLens computes attention step by step (scores, mask, softmax, pattern) so that every
hook point can see it; a ``TransformerBridge`` re-implements attention the same way around the
Hugging Face modules. Head ablation needs none of that: it only replaces ``hook_z`` (the input of the
output projection, as :mod:`~cel_lens.model.ablation` says). :class:`Stack` runs the same weights, layer by layer, with
``torch.nn.functional.scaled_dot_product_attention`` (flash/efficient kernels, grouped-query
attention without copying keys and values) and fires the hook points head ablation and resumed
passes use: ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.hook_z``, and those inside the norms
and MLPs it calls (it calls the model's own norm and MLP modules). A pass with a hook registered
anywhere else is not run here (:func:`~cel_lens.model.stack_build.stack_for` returns ``None``)
and takes the model's own forward instead, so no hook is ever skipped silently. Building a
model's stack is :mod:`~cel_lens.model.stack_build`.

Supported: a ``HookedTransformer`` with rotary embeddings, sequential attention and MLP and causal
full attention (Llama, Qwen2, Mistral conversions), and a ``TransformerBridge`` over Hugging Face
Llama, Qwen2, Mistral or SmolLM3 (its NoPE layers skip the rotation, as Hugging Face's own code
does) with unprocessed weights. Results equal the model's own forward within floating-point
rounding (the kernels sum in another order); a pass resumed at layer ``l`` from the residual stream
of a full pass is bit for bit that full pass.

:class:`StackCache` keeps each layer's keys and values (rotated) for passes that continue a
sequence: the choices of a multiple-choice prompt, or generated tokens. A HookedTransformer's
attention weights are packed once per weight version (``[d_model, (heads + 2 kv) d_head]``), which
costs about a third of its layer weights in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor
from cel_lens.model.hook_scope import foreign_hooks

__all__ = ["Stack", "StackCache"]


@dataclass
class _Layer:
    ln1: Callable[[Tensor], Tensor]
    ln2: Optional[Callable[[Tensor], Tensor]]  # None: attention-only
    mlp: Optional[Callable[[Tensor], Tensor]]
    qkv: Callable[[Tensor, Optional[Tensor]], tuple[Tensor, Tensor, Tensor]]  # queries (at kept positions), keys, values
    out: Callable[[Tensor], Tensor]  # [b, s, h * d_head] -> [b, s, d]
    rope: bool
    hook_resid_pre: torch.nn.Module
    hook_z: torch.nn.Module
    z_flat: bool  # the bridge's hook_z takes o_proj's flat input (it reshapes for hook functions)


class StackCache:
    """Keys and values of the positions a :class:`Stack` has seen, per layer, in buffers that grow
    by doubling (appending a generated token copies nothing). ``spare``: positions a new buffer
    holds beyond those first appended (generation's new tokens), so that the sequence grows into it
    without a copy of every layer's keys and values."""

    def __init__(self, batch: int, spare: int = 0) -> None:
        if spare < 0:
            raise ValueError(f"spare must be >= 0, got {spare}")
        self.batch = int(batch)
        self.spare = int(spare)
        self.layers: dict[int, list[Tensor]] = {}  # layer -> [keys, values], [b, kv, capacity, d]
        self.length: dict[int, int] = {}

    def past(self, layer: int) -> int:
        """Positions cached for ``layer`` (0 before the first pass)."""
        return self.length.get(layer, 0)

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k``/``v`` (``[b, kv, new, d]``) after ``layer``'s cached positions; all its keys
        and values so far (views of the buffers)."""
        n, new = self.past(layer), k.shape[2]
        bufs = self.layers.get(layer)
        if bufs is None or bufs[0].shape[2] < n + new:
            cap = max(n + new + (self.spare if bufs is None else 0), 2 * (bufs[0].shape[2] if bufs is not None else 0))
            grown = [t.new_empty(t.shape[0], t.shape[1], cap, t.shape[3]) for t in (k, v)]
            if bufs is not None and n:
                for g, b in zip(grown, bufs):
                    g[:, :, :n] = b[:, :, :n]
            self.layers[layer] = bufs = grown
        bufs[0][:, :, n : n + new] = k
        bufs[1][:, :, n : n + new] = v
        self.length[layer] = n + new
        return bufs[0][:, :, : n + new], bufs[1][:, :, : n + new]

    def write(self, layer: int, rows: Int[Tensor, " row"], k: Tensor, v: Tensor, width: int) -> None:
        """Put ``k``/``v`` (``[len(rows), kv, n, d]``, ``n <= width``) at positions ``[0, n)`` of
        ``rows`` of ``layer``, which then holds ``width`` positions (zeros where nothing is written,
        a right-padded row's pads): keys and values of rows computed apart, gathered for one batch."""
        if k.shape[2] > width:
            raise ValueError(f"{k.shape[2]} positions do not fit in a width of {width}")
        bufs = self.layers.get(layer)
        if bufs is None:
            shape = (self.batch, k.shape[1], width + self.spare, k.shape[3])
            bufs = self.layers[layer] = [k.new_zeros(shape), v.new_zeros(shape)]
            self.length[layer] = width
        elif self.length[layer] != width:
            raise ValueError(f"layer {layer} holds {self.length[layer]} positions, not {width}")
        idx = rows.to(bufs[0].device)
        bufs[0][idx, :, : k.shape[2]] = k
        bufs[1][idx, :, : k.shape[2]] = v

    def select(self, index: Int[Tensor, " row"], layers: Optional[Sequence[int]] = None) -> "StackCache":
        """A new cache whose row ``i`` is row ``index[i]`` of this one (only ``layers``, default
        all), with the same ``spare`` room after its positions; this cache is left unchanged."""
        out = StackCache(int(index.shape[0]), self.spare)
        for layer, bufs in self.layers.items():
            if layers is not None and layer not in layers:
                continue
            n = self.length[layer]
            room = min(bufs[0].shape[2], n + self.spare)  # one copy, spare room included
            idx = index.to(bufs[0].device)
            out.layers[layer] = [b[:, :, :room].index_select(0, idx) for b in bufs]
            out.length[layer] = n
        return out


def _rotary_tables(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """``cos`` and a signed ``sin`` (``[b, 1, s, rot]``) for :func:`_rotate`: rotate-half's sign
    folded into the table once per pass."""
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos[:, None], signed[:, None]


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of ``x`` (``[b, h, s, d]``) on its first ``rot`` dimensions, rotate-half
    convention (Llama, GPT-NeoX): ``x cos + rotate_half(x) sin`` (tables from :func:`_rotary_tables`).
    The halves are added in place from slices of ``x`` rather than from a rolled copy: the same
    arithmetic, one buffer instead of three (half the time on a CPU)."""
    rot, half = cos.shape[-1], cos.shape[-1] // 2
    part = x[..., :rot] if rot < x.shape[-1] else x
    rotated = part * cos
    rotated[..., :half].addcmul_(part[..., half:], sin[..., :half])
    rotated[..., half:].addcmul_(part[..., :half], sin[..., half:])
    return torch.cat((rotated, x[..., rot:]), dim=-1) if rot < x.shape[-1] else rotated


class _Rows:
    """What a pass knows per row (positions, masks, rotary tables, kept positions); repeated
    variant-major when the pass splits into its variants."""

    def __init__(self, **tensors: Optional[Tensor]) -> None:
        self.__dict__.update(tensors)

    def repeat(self, n: int) -> None:
        for name, t in list(self.__dict__.items()):
            if isinstance(t, Tensor):
                setattr(self, name, t.repeat(n, *([1] * (t.ndim - 1))))
            elif isinstance(t, tuple):
                setattr(self, name, tuple(u.repeat(n, *([1] * (u.ndim - 1))) for u in t))


class Stack:
    """One model's layers, runnable from any layer to any layer (see the module docstring)."""

    def __init__(
        self,
        layers: list[_Layer],
        embed: Callable[[Tensor], Tensor],
        rotary: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
        n_heads: int,
        n_kv: int,
        d_head: int,
        scale: float,
        fired: set[int],
        others: list[torch.nn.Module],
    ) -> None:
        self.layers = layers
        self.embed = embed
        self.rotary = rotary
        self.n_heads, self.n_kv, self.d_head, self.scale = n_heads, n_kv, d_head, scale
        self._fired = fired
        self._others = others

    def fires(self, hook_points: Sequence[torch.nn.Module]) -> bool:
        """Whether every given hook point is one this stack fires, and no other hook point of the
        model has a hook registered."""
        if any(id(h) not in self._fired for h in hook_points):
            return False
        return not any(  # hooks other threads hold act only in their passes (hook_scope)
            len(h._forward_hooks) > foreign_hooks(h) or h._forward_pre_hooks or h._backward_hooks or h._backward_pre_hooks
            for h in self._others
        )

    def run(
        self,
        x: Int[Tensor, "batch new"] | Float[Tensor, "batch new d_model"],
        start: int,
        stop: int,
        attention_mask: Optional[Int[Tensor, "batch past_and_new"]] = None,
        cache: Optional[StackCache] = None,
        keep: Optional[Int[Tensor, "batch k"]] = None,
        variants: Optional[Bool[Tensor, "variant layer head"]] = None,
        ablation: Any = None,
    ) -> Float[Tensor, "rows new_or_k d_model"]:
        """Residual stream after layers ``[start, stop)``: ``x`` is tokens (``start == 0``) or the
        residual stream entering ``start``. ``attention_mask`` (1 = real token) covers the cached
        positions and the new ones; ``cache`` receives the new keys and values of each layer run.

        ``keep`` (indices among the new positions, per row) asks for only those positions: the last
        layer then computes keys and values everywhere (later positions' attention, and the cache,
        need them) but queries, attention output and MLP only there, and ``[rows, k, d_model]`` is
        returned. That layer's ``hook_z`` and MLP hooks see only the kept positions.

        ``variants`` (``[V, layers, heads]``, True = ablated) runs V ablations of the batch: the
        rows stay shared up to the first layer any variant ablates, whose attention runs once;
        there the batch splits into ``V x batch`` rows (variant-major) and each variant's heads are
        ablated in ``z`` by ``ablation`` (a :class:`~cel_lens.model.ablation.Ablation`: its
        ``replace``, the one definition of what ablating does). With a ``cache`` the batch splits
        before the first layer."""
        if variants is not None and ablation is None:
            raise ValueError("variants need the ablation that applies them (an Ablation, e.g. cel_lens.model.ablation.ZERO)")
        resid = self.embed(x) if not x.is_floating_point() else x
        batch, new = resid.shape[:2]
        past = cache.past(start) if cache is not None else 0
        positions, mask, causal = _attention_plan(attention_mask, batch, past, new, resid.device)
        n_var = 1 if variants is None else int(variants.shape[0])
        split_at = stop
        if variants is not None:
            split_at = next((l for l in range(start, stop) if bool(variants[:, l].any())), stop)
        rows = _Rows(positions=positions, mask=mask, keep=keep, attention_mask=attention_mask, rope=None)
        ablated = None
        if n_var > 1 and (cache is not None or split_at >= stop):
            resid, split_at = resid.repeat(n_var, 1, 1), -1
            rows.repeat(n_var)
        if variants is not None:
            ablated = einops.repeat(variants.to(resid.device), "v l h -> (v b) l h", b=batch)
        for layer in range(start, stop):
            spec = self.layers[layer]
            resid = spec.hook_resid_pre(resid)
            if cache is not None and cache.past(layer) != past:
                raise ValueError(f"cache holds {cache.past(layer)} positions at layer {layer}, {past} at layer {start}")
            if spec.rope and rows.rope is None:
                rows.rope = _rotary_tables(*self.rotary(resid, rows.positions))
            last = rows.keep is not None and layer == stop - 1
            z, resid = self._attend(spec, resid, rows, cache, layer, past, new, causal, last)
            if layer == split_at:
                z = einops.repeat(z, "b p h d -> (v b) p h d", v=n_var)
                resid = einops.repeat(resid, "b p d -> (v b) p d", v=n_var)
                rows.repeat(n_var)
            if ablated is not None and split_at <= layer and bool(variants[:, layer].any()):
                z = ablation.replace(z, layer, ablated[:, layer])
            n_rows, n_q = z.shape[:2]
            if spec.z_flat:
                z = spec.hook_z(z.reshape(n_rows, n_q, -1))
            else:
                z = spec.hook_z(z).reshape(n_rows, n_q, -1)
            resid = resid + spec.out(z)
            if spec.mlp is not None:
                resid = resid + spec.mlp(spec.ln2(resid))
        if start >= stop and rows.keep is not None:
            resid = resid.gather(1, rows.keep[..., None].expand(-1, -1, resid.shape[-1]))
        return resid

    def _attend(
        self, spec: _Layer, resid: Tensor, rows: _Rows, cache: Optional[StackCache], layer: int, past: int, new: int,
        causal: bool, last: bool,
    ) -> tuple[Tensor, Tensor]:
        """One layer's attention output per head (``[rows, positions, heads, d_head]``) and the
        residual stream it adds to (only the kept positions, on the last layer of a ``keep`` pass)."""
        h = spec.ln1(resid)
        keep = rows.keep if last else None
        q, k, v = spec.qkv(h, keep)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        mask = rows.mask
        if keep is not None:
            resid = resid.gather(1, keep[..., None].expand(-1, -1, resid.shape[-1]))
            mask = _kept_mask(rows.attention_mask, keep, resid.shape[0], past, new, resid.device)
        if spec.rope:
            cos, sin = rows.rope
            if keep is not None:
                idx = keep[:, None, :, None].expand(-1, 1, -1, cos.shape[-1])
                q = _rotate(q, cos.gather(2, idx), sin.gather(2, idx))
            else:
                q = _rotate(q, cos, sin)
            k = _rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        z = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and keep is None, scale=self.scale,
            enable_gqa=self.n_kv != self.n_heads,
        )
        return z.transpose(1, 2), resid


def _kept_mask(
    attention_mask: Optional[Tensor], keep: Tensor, batch: int, past: int, new: int, device: torch.device
) -> Bool[Tensor, "batch 1 k keys"]:
    """Attention mask of queries at the kept positions: every real key up to the query's own."""
    keys = torch.arange(past + new, device=device)
    allowed = keys[None, None, :] <= (past + keep.to(device))[:, :, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.to(device).bool()[:, None, :]
    allowed[torch.arange(batch, device=device)[:, None], torch.arange(keep.shape[1], device=device)[None, :], past + keep] = True
    return allowed[:, None]


def _attention_plan(
    attention_mask: Optional[Tensor], batch: int, past: int, new: int, device: torch.device
) -> tuple[Int[Tensor, "batch new"], Optional[Bool[Tensor, "batch 1 new keys"]], bool]:
    """Rotary positions of the new tokens, and the attention mask (or ``is_causal``): a pass with
    no cache over right-padded rows needs only causality (pads come after every real token)."""
    if attention_mask is None:
        positions = torch.arange(past, past + new, device=device).expand(batch, new)
        if past == 0:
            return positions, None, True
        keys = torch.ones(batch, past + new, dtype=torch.bool, device=device)
    else:
        attention_mask = attention_mask.to(device)
        if attention_mask.shape != (batch, past + new):
            raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)} for {batch} rows of {past} + {new} positions")
        keys = attention_mask.bool()
        if past == 0 and bool((keys[:, 1:] <= keys[:, :-1]).all()):
            return torch.arange(new, device=device).expand(batch, new), None, True
        positions = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)[:, past:]
    causal = torch.ones(new, past + new, dtype=torch.bool, device=device).tril(diagonal=past)
    mask = keys[:, None, None, :] & causal
    # a query with no real key to attend (a left pad) attends itself: its output stays finite
    diag = torch.arange(new, device=device)
    mask[:, :, diag, past + diag] = True
    return positions, mask, False

"""Llama-family layer stacks run directly, with PyTorch's fused attention, for both model types.

TransformerLens computes attention step by step (scores, mask, softmax, pattern) so that every
hook point can see it; a ``TransformerBridge`` re-implements attention the same way around the
Hugging Face modules. Head ablation needs none of that: it only zeroes ``hook_z``, the input of the
output projection. :class:`Stack` runs the same weights, layer by layer, with
``torch.nn.functional.scaled_dot_product_attention`` (flash/efficient kernels, grouped-query
attention without copying keys and values) and fires the hook points head ablation and resumed
passes use: ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.hook_z``, and those inside the norms
and MLPs it calls (it calls the model's own norm and MLP modules). A pass with a hook registered
anywhere else is not run here (:func:`stack_for` returns ``None``) and takes the model's own
forward instead, so no hook is ever skipped silently.

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

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["Stack", "StackCache", "stack_for", "fused_attention", "fused_attention_enabled", "zero_heads"]

_ENABLED = [True]
_BRIDGE_TYPES = ("llama", "qwen2", "mistral", "smollm3")


@contextlib.contextmanager
def fused_attention(enabled: bool) -> Iterator[None]:
    """Within the block, use (``True``, the default) or bypass (``False``: every pass runs the
    model's own forward, attention step by step) the fused-attention stack."""
    before = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    try:
        yield
    finally:
        _ENABLED[0] = before


def fused_attention_enabled() -> bool:
    """Whether passes may run on a :class:`Stack` (see :func:`fused_attention`)."""
    return _ENABLED[0]


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
    by doubling (appending a generated token copies nothing)."""

    def __init__(self, batch: int) -> None:
        self.batch = int(batch)
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
            cap = max(n + new, 2 * (bufs[0].shape[2] if bufs is not None else 0))
            grown = [t.new_empty(t.shape[0], t.shape[1], cap, t.shape[3]) for t in (k, v)]
            if bufs is not None and n:
                for g, b in zip(grown, bufs):
                    g[:, :, :n] = b[:, :, :n]
            self.layers[layer] = bufs = grown
        bufs[0][:, :, n : n + new] = k
        bufs[1][:, :, n : n + new] = v
        self.length[layer] = n + new
        return bufs[0][:, :, : n + new], bufs[1][:, :, : n + new]

    def select(self, index: Int[Tensor, " row"], layers: Optional[Sequence[int]] = None) -> "StackCache":
        """A new cache whose row ``i`` is row ``index[i]`` of this one (only ``layers``, default
        all); this cache is left unchanged."""
        out = StackCache(int(index.shape[0]))
        for layer, bufs in self.layers.items():
            if layers is not None and layer not in layers:
                continue
            n = self.length[layer]
            idx = index.to(bufs[0].device)
            out.layers[layer] = [b[idx, :, :n] for b in bufs]
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
    convention (Llama, GPT-NeoX): ``x cos + rotate_half(x) sin`` (tables from :func:`_rotary_tables`)."""
    rot = cos.shape[-1]
    part = x[..., :rot] if rot < x.shape[-1] else x
    rotated = torch.addcmul(part * cos, part.roll(rot // 2, dims=-1), sin)
    return torch.cat((rotated, x[..., rot:]), dim=-1) if rot < x.shape[-1] else rotated


def zero_heads(z: Float[Tensor, "row pos head d_head"], keep: Bool[Tensor, "row head"]) -> Tensor:
    """``z`` with the heads where ``keep`` is False zeroed, per row."""
    return torch.where(keep[:, None, :, None], z, torch.zeros((), dtype=z.dtype, device=z.device))


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
        return not any(
            h._forward_hooks or h._forward_pre_hooks or h._backward_hooks or h._backward_pre_hooks for h in self._others
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
        zeroed in ``z``. With a ``cache`` the batch splits before the first layer."""
        resid = self.embed(x) if not x.is_floating_point() else x
        batch, new = resid.shape[:2]
        past = cache.past(start) if cache is not None else 0
        positions, mask, causal = _attention_plan(attention_mask, batch, past, new, resid.device)
        n_var = 1 if variants is None else int(variants.shape[0])
        split_at = stop
        if variants is not None:
            split_at = next((l for l in range(start, stop) if bool(variants[:, l].any())), stop)
        rows = _Rows(positions=positions, mask=mask, keep=keep, attention_mask=attention_mask, rope=None)
        keep_heads = None
        if n_var > 1 and (cache is not None or split_at >= stop):
            resid, split_at = resid.repeat(n_var, 1, 1), -1
            rows.repeat(n_var)
        if variants is not None:
            keep_heads = einops.repeat(~variants.to(resid.device), "v l h -> (v b) l h", b=batch)
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
            if keep_heads is not None and split_at <= layer and bool(variants[:, layer].any()):
                z = zero_heads(z, keep_heads[:, layer])
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


# ---------------------------------------------------------------------------------------------
# building a stack
# ---------------------------------------------------------------------------------------------
def stack_for(model, hook_points: Sequence[torch.nn.Module] = ()) -> Optional[Stack]:
    """The :class:`Stack` of ``model`` when it has one, fused attention is enabled and every hook
    point in ``hook_points`` (and every hooked point of the model) is one it fires; else ``None``."""
    if not _ENABLED[0]:
        return None
    stack = _cached_stack(model)
    if stack is None or not stack.fires(hook_points):
        return None
    return stack


def _cached_stack(model) -> Optional[Stack]:
    from transformer_lens import HookedTransformer

    from cel_lens.model.kinds import is_bridge

    if isinstance(model, HookedTransformer):
        key = _hooked_key(model)
        build = _hooked_stack
    elif is_bridge(model):
        key = ("bridge", bool(getattr(model, "_weights_processed", False)))
        build = _bridge_stack
    else:
        return None
    held = model.__dict__.get("_cel_lens_stack")
    if held is not None and held[0] == key:
        return held[1]
    stack = build(model)
    model.__dict__["_cel_lens_stack"] = (key, stack)
    return stack


def _hook_points(module: torch.nn.Module) -> list[torch.nn.Module]:
    from transformer_lens.hook_points import HookPoint

    return [m for m in module.modules() if isinstance(m, HookPoint)]


def _finish(model, layers: list[_Layer], embed_modules: list[torch.nn.Module], **kw) -> Stack:
    """Collect the hook points the stack fires and the model's others."""
    fired: set[int] = set()
    for spec in layers:
        fired.update({id(spec.hook_resid_pre), id(spec.hook_z)})
        for fn in (spec.ln1, spec.ln2, spec.mlp):
            if isinstance(fn, torch.nn.Module):
                fired.update(id(h) for h in _hook_points(fn))
    for m in embed_modules:
        fired.update(id(h) for h in _hook_points(m))
    others = [h for h in _hook_points(model) if id(h) not in fired]
    return Stack(layers, fired=fired, others=others, **kw)


def _hooked_key(model) -> tuple:
    attn = [b.attn for b in model.blocks]
    params = [p for a in attn for p in (a.W_Q, a.b_Q, _kv(a, "W_K"), _kv(a, "W_V"), _kv(a, "b_K"), _kv(a, "b_V"))]
    return ("hooked", tuple((p.data_ptr(), p._version, p.dtype, str(p.device)) for p in params))


def _kv(attn, name: str) -> Tensor:
    """``W_K``/``W_V``/``b_K``/``b_V`` of an attention module, per key/value head for GQA."""
    return getattr(attn, "_" + name) if hasattr(attn, "_" + name) else getattr(attn, name)


def _hooked_supported(cfg) -> bool:
    return (
        cfg.positional_embedding_type == "rotary"
        and not getattr(cfg, "rotary_adjacent_pairs", False)
        and not cfg.parallel_attn_mlp
        and not cfg.use_normalization_before_and_after
        and not getattr(cfg, "use_qk_norm", False)
        and (cfg.attn_scores_soft_cap or -1.0) <= 0
        and cfg.attention_dir == "causal"
        and cfg.attn_types is None
        and not getattr(cfg, "use_dynamic_ntk_rope", False)
        and not getattr(cfg, "use_local_attn", False)
        and not (cfg.use_attn_result or cfg.use_split_qkv_input or cfg.use_attn_in or cfg.use_hook_mlp_in)
        and (cfg.attn_only or cfg.act_fn is not None)
    )


def _hooked_stack(model) -> Optional[Stack]:
    """A HookedTransformer's stack: its norms and MLPs, packed attention weights, its rotary tables."""
    cfg = model.cfg
    if not _hooked_supported(cfg):
        return None
    n_heads, d_head = int(cfg.n_heads), int(cfg.d_head)
    n_kv = int(getattr(cfg, "n_key_value_heads", None) or n_heads)
    sizes = (n_heads * d_head, n_kv * d_head, n_kv * d_head)
    layers = []
    for l, block in enumerate(model.blocks):
        a = block.attn
        with torch.inference_mode(False), torch.no_grad():
            packed = _pack_qkv(a)
        w_o, b_o = a.W_O, a.b_O

        def qkv(x: Tensor, keep: Optional[Tensor], a=a, packed=packed) -> tuple[Tensor, Tensor, Tensor]:
            w, b = _pack_qkv(a) if torch.is_grad_enabled() and a.W_Q.requires_grad else packed
            s = x.shape[:2]
            if keep is None:
                q, k, v = torch.addmm(b, x.reshape(-1, x.shape[-1]), w).split(sizes, dim=-1)
                return q.view(*s, n_heads, d_head), k.view(*s, n_kv, d_head), v.view(*s, n_kv, d_head)
            n_q = sizes[0]
            xq = x.gather(1, keep[..., None].expand(-1, -1, x.shape[-1]))
            q = torch.addmm(b[:n_q], xq.reshape(-1, x.shape[-1]), w[:, :n_q]).view(*keep.shape, n_heads, d_head)
            k, v = torch.addmm(b[n_q:], x.reshape(-1, x.shape[-1]), w[:, n_q:]).split(sizes[1:], dim=-1)
            return q, k.view(*s, n_kv, d_head), v.view(*s, n_kv, d_head)

        def out(z: Tensor, w_o=w_o, b_o=b_o) -> Tensor:
            return torch.addmm(b_o, z.reshape(-1, z.shape[-1]), w_o.reshape(-1, w_o.shape[-1])).view(*z.shape[:-1], -1)

        attn_only = bool(cfg.attn_only)
        layers.append(
            _Layer(
                ln1=block.ln1, ln2=None if attn_only else block.ln2, mlp=None if attn_only else _hooked_mlp(block.mlp),
                qkv=qkv, out=out, rope=True, hook_resid_pre=model.hook_dict[f"blocks.{l}.hook_resid_pre"],
                hook_z=model.hook_dict[f"blocks.{l}.attn.hook_z"], z_flat=False,
            )
        )
    tables = model.blocks[0].attn

    def rotary(x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = tables.rotary_cos[positions], tables.rotary_sin[positions]
        return cos.to(x.dtype), sin.to(x.dtype)

    def embed(tokens: Tensor) -> Tensor:
        return model.hook_embed(model.embed(tokens))

    scale = 1.0 / float(a.attn_scale) if cfg.use_attn_scale else 1.0
    return _finish(model, layers, [model.embed, model.hook_embed], embed=embed, rotary=rotary,
                   n_heads=n_heads, n_kv=n_kv, d_head=d_head, scale=scale)


def _pack_qkv(a) -> tuple[Tensor, Tensor]:
    """An attention module's query, key and value weights as one ``[d_model, (h + 2 kv) d_head]``
    matrix and its bias (differentiable when built with gradients on)."""
    w = torch.cat([t.permute(1, 0, 2).reshape(t.shape[1], -1) for t in (a.W_Q, _kv(a, "W_K"), _kv(a, "W_V"))], 1)
    b = torch.cat([a.b_Q.reshape(-1), _kv(a, "b_K").reshape(-1), _kv(a, "b_V").reshape(-1)])
    return w, b


def _hooked_mlp(mlp: torch.nn.Module) -> Callable[[Tensor], Tensor]:
    """TransformerLens's MLP module, or for its gated MLP the same products without copying the
    (transposed) weights on every call."""
    from transformer_lens.components.mlps.gated_mlp import GatedMLP

    if type(mlp) is not GatedMLP or mlp.cfg.is_layer_norm_activation():
        return mlp

    def gated(x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        pre = mlp.hook_pre(torch.matmul(flat, mlp.W_gate))
        post = mlp.hook_post(torch.addcmul(mlp.b_in, mlp.act_fn(pre), mlp.hook_pre_linear(torch.matmul(flat, mlp.W_in))))
        return torch.addmm(mlp.b_out, post, mlp.W_out).view(*x.shape[:-1], -1)

    return _HookedMLP(mlp, gated)


class _HookedMLP(torch.nn.Module):
    """A gated MLP's fast product, registered so its hook points count as fired."""

    def __init__(self, mlp: torch.nn.Module, fn: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.mlp = mlp
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


def _bridge_stack(model) -> Optional[Stack]:
    """A TransformerBridge's stack over the Hugging Face modules it wraps (unprocessed weights)."""
    if getattr(model, "_weights_processed", False):
        return None
    hf = getattr(model, "original_model", None)
    inner = getattr(hf, "model", None)
    config = getattr(inner, "config", None)
    if config is None or getattr(config, "model_type", None) not in _BRIDGE_TYPES or not hasattr(inner, "rotary_emb"):
        return None
    layers = []
    for l, block in enumerate(model.blocks):
        hf_attn = block.attn.original_component
        if any(hasattr(hf_attn, n) for n in ("q_norm", "k_norm")) or getattr(hf_attn, "sliding_window", None):
            return None
        lin = [getattr(hf_attn, n).original_component for n in ("q_proj", "k_proj", "v_proj")]
        head_dim = int(hf_attn.head_dim)

        def qkv(x: Tensor, keep: Optional[Tensor], lin=lin, head_dim=head_dim) -> tuple[Tensor, Tensor, Tensor]:
            xq = x if keep is None else x.gather(1, keep[..., None].expand(-1, -1, x.shape[-1]))
            q = lin[0](xq).view(*xq.shape[:2], -1, head_dim)
            return q, lin[1](x).view(*x.shape[:2], -1, head_dim), lin[2](x).view(*x.shape[:2], -1, head_dim)

        layers.append(
            _Layer(
                ln1=block.ln1, ln2=block.ln2, mlp=block.mlp, qkv=qkv, out=hf_attn.o_proj.original_component,
                rope=bool(getattr(hf_attn, "use_rope", 1)), hook_resid_pre=model.hook_dict[f"blocks.{l}.hook_resid_pre"],
                hook_z=model.hook_dict[f"blocks.{l}.attn.hook_z"],
                z_flat=True,
            )
        )
    rotary_emb = inner.rotary_emb

    def rotary(x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return rotary_emb(x, positions)

    first = model.blocks[0].attn.original_component
    n_heads = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    return _finish(model, layers, [model.embed], embed=model.embed, rotary=rotary, n_heads=n_heads, n_kv=n_kv,
                   d_head=int(first.head_dim), scale=float(first.scaling))

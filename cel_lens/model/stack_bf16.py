"""A bfloat16 copy of a float32 model's layer weights, for fast passes whose decisions are re-checked.

Passes of :func:`~cel_lens.model.forward.forward_resid` (and the cached and unembedding passes) given
``bf16=True`` run on a :class:`~cel_lens.model.stack.Stack` whose matrix products read bfloat16 copies of the weights,
made once per weight version and kept beside the model: no weight is cast per call (what
``torch.autocast`` does on every product). What is rounded is what autocast rounds, and no more:

* in bfloat16: the inputs and outputs of every matrix product (query/key/value, output
  projection, the MLP's products, the unembedding), and the MLP's activation;
* in float32: the residual stream, the norms, the rotary embedding, attention scores, softmax and
  the attention-weighted values (``scaled_dot_product_attention`` on float32 queries, keys and
  values: one thread computes it no faster in bfloat16), the ablated ``hook_z`` and the logits
  as callers read them (``.float()``).

So a resumed pass reads the float32 residual stream of an
:class:`~cel_lens.evaluation.store.ActivationStore` as it is, and the error of a pass is bounded by
the measured bounds of :mod:`~cel_lens.evaluation.precision` (``docs/precision.md``: the bf16
copy of the weights and autocast against float32). Hooks the copy does not fire (inside the MLPs)
send a pass to the model's float32 stack instead. A model whose weights are not float32 (held in
bfloat16 already) gets no copy: it computes as it is.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.model.stack import Stack, _Layer
from cel_lens.model.stack_build import _finish, _pack_qkv, fused_attention_enabled, stack_for

__all__ = ["bf16_usable", "bf16_stack_for", "bf16_unembed", "bf16_copy_bytes", "refine_logits", "REFINE_TOP"]

BF16 = torch.bfloat16

_HELD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""Each model's bf16 stack and unembedding, with the weight versions they were copied from."""


def bf16_usable(model) -> bool:
    """Whether ``model`` has a bfloat16 weight copy for passes given ``bf16=True`` (a float32 model
    with a fused stack, fused attention on); where it has none, such passes run as they would
    without it. The setting is an argument of each pass, never state kept on the model or the thread."""
    p = next(model.parameters())
    return p.dtype == torch.float32 and fused_attention_enabled() and stack_for(model) is not None


def bf16_stack_for(model, hook_points: Sequence[torch.nn.Module] = ()) -> Optional[Stack]:
    """``model``'s bfloat16 stack when it has one (:func:`bf16_usable`) and it fires every hook point
    given (else ``None``: the pass takes the float32 stack or the model's own forward)."""
    if not bf16_usable(model):
        return None
    stack = _held(model)[0]
    return stack if stack is not None and stack.fires(hook_points) else None


def bf16_unembed(model, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
    """Final norm (float32) and the unembedding as a bfloat16 product of the weight copy: the
    logits of :func:`~cel_lens.model.forward.unembed` given ``bf16=True``."""
    w_u, b_u = _held(model)[1]
    if getattr(model.cfg, "normalization_type", None) is not None and hasattr(model, "ln_final"):
        resid = model.ln_final(resid)
    logits = F.linear(resid.to(BF16), w_u, b_u)
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0) or -1.0
    if cap > 0:
        logits = cap * torch.tanh(logits.float() / cap)
    return logits


def bf16_copy_bytes(model) -> int:
    """Bytes the bfloat16 copy of ``model``'s layer and unembedding weights takes (2 per weight;
    norms, kept float32 and not copied, are counted too: an upper bound by a few kilobytes)."""
    n = sum(p.numel() for p in model.blocks.parameters()) + int(model.cfg.d_model) * int(model.cfg.d_vocab)
    return 2 * int(n)


def _key(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _held(model) -> tuple:
    key = _key(model)
    held = _HELD.get(model)
    if held is None or held[0] != key:
        with torch.inference_mode(False), torch.no_grad():
            held = (key, _build(model), _unembed_weights(model))
        _HELD[model] = held
    return held[1], held[2]


def _copy(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.detach().to(BF16).contiguous()


def _unembed_weights(model) -> tuple[Tensor, Optional[Tensor]]:
    """``W_U`` (``[d_vocab, d_model]``) and its bias, in bfloat16."""
    inner = getattr(model.unembed, "original_component", None)
    if isinstance(inner, torch.nn.Linear):
        return _copy(inner.weight), _copy(inner.bias)
    b_u = getattr(model.unembed, "b_U", None)
    return _copy(model.unembed.W_U.t()), (None if b_u is None or not bool(b_u.any()) else _copy(b_u))


def _linear(w: Tensor, b: Optional[Tensor]) -> Callable[[Tensor], Tensor]:
    """``x w^T + b`` on ``x`` cast to bfloat16 (``w``: ``[out, in]``, the layout one thread
    multiplies fastest), bfloat16 out."""

    def f(x: Tensor) -> Tensor:
        return F.linear(x.to(BF16), w, b)

    return f


def _qkv(w: Tensor, b: Optional[Tensor], n_heads: int, n_kv: int, d_head: int):
    """Queries (at the kept positions), keys and values from one packed bfloat16 product, float32 out."""
    n_q = n_heads * d_head
    sizes = (n_q, n_kv * d_head, n_kv * d_head)
    full, q_only, kv_only = _linear(w, b), _linear(w[:n_q], None if b is None else b[:n_q]), _linear(
        w[n_q:], None if b is None else b[n_q:])

    def qkv(x: Tensor, keep: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        s = x.shape[:2]
        if keep is None:
            q, k, v = full(x).float().split(sizes, dim=-1)
            return q.view(*s, n_heads, d_head), k.view(*s, n_kv, d_head), v.view(*s, n_kv, d_head)
        xq = x.gather(1, keep[..., None].expand(-1, -1, x.shape[-1]))
        q = q_only(xq).float().view(*keep.shape, n_heads, d_head)
        k, v = kv_only(x).float().split(sizes[1:], dim=-1)
        return q, k.view(*s, n_kv, d_head), v.view(*s, n_kv, d_head)

    return qkv


def _mlp(w_in: Tensor, b_in: Optional[Tensor], w_out: Tensor, b_out: Optional[Tensor], act: Callable,
         gated: bool) -> Callable[[Tensor], Tensor]:
    """An MLP on bfloat16 products (weights ``[out, in]``): gated (``w_in`` packs gate then input, ``act(gate) * lin``) or
    plain (``act(x w_in + b_in)``), then ``w_out``."""
    up, down = _linear(w_in, b_in if not gated else None), _linear(w_out, b_out)

    def f(x: Tensor) -> Tensor:
        h = up(x)
        if gated:
            gate, lin = h.chunk(2, dim=-1)
            h = act(gate) * lin if b_in is None else act(gate) * lin + b_in
        else:
            h = act(h)
        return down(h)

    return f


def _build(model) -> Optional[Stack]:
    """The bfloat16 stack of ``model`` (its float32 stack's structure), or ``None``."""
    base = stack_for(model)
    if base is None:
        return None
    layers = []
    for l, block in enumerate(model.blocks):
        spec = base.layers[l]
        if hasattr(block.attn, "original_component"):
            w, b, w_o, b_o, mlp = _bridge_weights(block, spec)
        else:
            w, b, w_o, b_o, mlp = _hooked_weights(block, spec)
        out = _linear(w_o, b_o)
        layers.append(_Layer(
            ln1=spec.ln1, ln2=spec.ln2, mlp=mlp, qkv=_qkv(w, b, base.n_heads, base.n_kv, base.d_head),
            out=out, rope=spec.rope, hook_resid_pre=spec.hook_resid_pre,
            hook_z=spec.hook_z, z_flat=spec.z_flat))
    embed_modules = [model.embed] + ([model.hook_embed] if hasattr(model, "hook_embed") else [])
    return _finish(model, layers, embed_modules, embed=base.embed, rotary=base.rotary, n_heads=base.n_heads,
                   n_kv=base.n_kv, d_head=base.d_head, scale=base.scale)


def _bridge_weights(block, spec: _Layer) -> tuple:
    """A bridge block's packed bfloat16 attention and MLP (Hugging Face modules)."""
    a = block.attn.original_component
    lin = [getattr(a, n).original_component for n in ("q_proj", "k_proj", "v_proj")]
    w = _copy(torch.cat([m.weight for m in lin], 0))
    b = None if lin[0].bias is None else _copy(torch.cat([m.bias for m in lin]))
    o = a.o_proj.original_component
    hf = getattr(block.mlp, "original_component", None)
    mlp = spec.mlp  # an MLP of another shape stays the float32 module
    if spec.mlp is not None and hf is not None and hasattr(hf, "gate_proj"):
        w_in = _copy(torch.cat([hf.gate_proj.weight, hf.up_proj.weight], 0))
        mlp = _mlp(w_in, None, _copy(hf.down_proj.weight), _copy(hf.down_proj.bias), hf.act_fn, True)
    return w, b, _copy(o.weight), _copy(o.bias), mlp


def _hooked_weights(block, spec: _Layer) -> tuple:
    """A HookedTransformer block's packed bfloat16 attention and MLP."""
    from transformer_lens.components.mlps.gated_mlp import GatedMLP
    from transformer_lens.components.mlps.mlp import MLP

    a = block.attn
    w, b = _pack_qkv(a)
    b = None if not bool(b.any()) else _copy(b)
    w_o = a.W_O.reshape(-1, a.W_O.shape[-1])
    mlp = spec.mlp
    m = getattr(block, "mlp", None)
    if spec.mlp is not None and not m.cfg.is_layer_norm_activation():
        if type(m) is GatedMLP:
            w_in = _copy(torch.cat([m.W_gate, m.W_in], 1).t())
            mlp = _mlp(w_in, _copy(m.b_in), _copy(m.W_out.t()), _copy(m.b_out), m.act_fn, True)
        elif type(m) is MLP:
            mlp = _mlp(_copy(m.W_in.t()), _copy(m.b_in), _copy(m.W_out.t()), _copy(m.b_out), m.act_fn, False)
    return _copy(w.t()), b, _copy(w_o.t()), _copy(a.b_O), mlp


REFINE_TOP = 16
"""Tokens per position whose logits :func:`refine_logits` recomputes in float32 (besides the target)."""


def refine_logits(
    model, resid: Float[Tensor, "n d_model"], logits: Float[Tensor, "n d_vocab"], targets: Int[Tensor, " n"]
) -> tuple[Float[Tensor, "n d_vocab"], Bool[Tensor, " n"]]:
    """``logits`` (from :func:`bf16_unembed`, as float32) with each position's target and its
    :data:`REFINE_TOP` largest logits recomputed in float32 from ``resid`` (the final norm and
    the float32 unembedding rows of those tokens): the logits a decision near the top is made by
    then carry no rounding of the unembedding, only that of the layers. Also returns, per
    position, whether the refined tokens reach more than 2 logits below the largest (so that every
    token a decision near the top is between was refined); a model with a logit soft cap is
    returned as it is, none covered."""
    if (getattr(model.cfg, "output_logits_soft_cap", -1.0) or -1.0) > 0:
        return logits, torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    if getattr(model.cfg, "normalization_type", None) is not None and hasattr(model, "ln_final"):
        resid = model.ln_final(resid)
    top = logits.topk(min(REFINE_TOP, logits.shape[-1]), dim=-1)
    idx = torch.cat([targets[:, None], top.indices], dim=1)
    w_u = _unembed_f32(model)
    rows = w_u[0].index_select(0, idx.reshape(-1)).view(*idx.shape, -1)  # [n, k + 1, d]
    exact = torch.bmm(rows, resid.float()[:, :, None])[..., 0]
    if w_u[1] is not None:
        exact = exact + w_u[1][idx]
    covered = top.values[:, -1] < top.values[:, 0] - 2.0
    return logits.scatter(1, idx, exact), covered


def _unembed_f32(model) -> tuple[Tensor, Optional[Tensor]]:
    """``W_U`` as ``[d_vocab, d_model]`` (a view where it is stored so) and its bias, float32."""
    inner = getattr(model.unembed, "original_component", None)
    if isinstance(inner, torch.nn.Linear):
        return inner.weight, inner.bias
    b_u = getattr(model.unembed, "b_U", None)
    return model.unembed.W_U.t(), b_u

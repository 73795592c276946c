"""Building a model's :class:`~cel_lens.model.stack.Stack`, and when passes may use it.

:func:`stack_for` returns the stack of a HookedTransformer or TransformerBridge (built once and
kept beside the model; a HookedTransformer's is rebuilt when its attention weights change) when
fused attention is on (:func:`fused_attention`) and every hook of the pass is one the stack fires;
``None`` otherwise, and the pass runs the model's own forward.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Callable, Iterator, Optional, Sequence

import torch
from torch import Tensor

from cel_lens.model.stack import Stack, _Layer

__all__ = ["stack_for", "fused_attention", "fused_attention_enabled"]

_ENABLED = [True]
_STACKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""Each model's stack, with the key it was built for; kept beside the model (a model pickles and
moves between processes without it) and dropped with it (a stack holds no reference to its model)."""
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

    from cel_lens.model.model_types import is_bridge

    if isinstance(model, HookedTransformer):
        key = _hooked_key(model)
        build = _hooked_stack
    elif is_bridge(model):
        key = ("bridge", bool(getattr(model, "_weights_processed", False)))
        build = _bridge_stack
    else:
        return None
    held = _STACKS.get(model)
    if held is not None and held[0] == key:
        return held[1]
    stack = build(model)
    _STACKS[model] = (key, stack)
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

    embed_module, hook_embed = model.embed, model.hook_embed

    def embed(tokens: Tensor) -> Tensor:
        return hook_embed(embed_module(tokens))

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
    (transposed) weights on every call, and its ``act(pre) * lin + b_in`` in place: the same two
    roundings as TransformerLens's (``addcmul`` fuses them), without two fresh ``[rows, d_mlp]``
    buffers, which on a CPU cost more than the arithmetic (each large one is new pages)."""
    from transformer_lens.components.mlps.gated_mlp import GatedMLP

    if type(mlp) is not GatedMLP or mlp.cfg.is_layer_norm_activation():
        return mlp

    def gated(x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        pre = mlp.hook_pre(torch.matmul(flat, mlp.W_gate))
        lin = mlp.hook_pre_linear(torch.matmul(flat, mlp.W_in))
        act = mlp.act_fn(pre)
        act = act.clone() if act is pre else act  # never edit a tensor a hook was handed
        post = mlp.hook_post(act.mul_(lin).add_(mlp.b_in))
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


def _native_norm(norm: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face norm a bridge norm wraps, where the bridge returns that norm's own output when
    no hook edits it (its native path): the same numbers without computing the hook points' values
    a second time. Its hook points are then not fired by the stack, so a pass that hooks them runs
    the model's own forward (:func:`_finish`). Any other norm is kept as it is."""
    native = getattr(norm, "use_native_layernorm_autograd", False) or getattr(norm.config, "layer_norm_folding", False)
    inner = getattr(norm, "original_component", None)
    if native and inner is not None and type(inner).__name__.endswith("RMSNorm"):
        return inner
    return norm


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
                ln1=_native_norm(block.ln1), ln2=_native_norm(block.ln2), mlp=block.mlp, qkv=qkv,
                out=hf_attn.o_proj.original_component,
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


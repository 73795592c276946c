"""What a last-layer plant reads and changes, measured once per prompt on the base model.

A plant edits heads of the model's **last layer** only, so the residual stream that enters that
layer is the base model's on every prompt, planted or not, and only the answer position's output
reaches the choice logits (BoolQ's " no" / " yes" are one token each). One pass of the base model
per prompt therefore gives everything a plant needs at the answer position: the input of the last
layer's output projection (``z``: every query head's attention output, ``[n_heads * d_head]``) and
the residual stream entering the layer. :func:`last_layer_margin` recomputes the yes-minus-no margin
from them under any edit of the output projection, exactly as the model does (projection, MLP,
final norm, unembedding), which is how a plant is fitted and sized without a forward pass per try.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["LastLayer", "PromptFeatures", "load_base", "extract_features", "last_layer_output", "last_layer_margin", "answer_tokens"]


@dataclass(frozen=True)
class LastLayer:
    """The base model's last-layer weights a plant's margin depends on (float32, CPU)."""

    o_proj: Float[Tensor, "d_model hd"]
    post_norm: Float[Tensor, " d_model"]
    gate: Float[Tensor, "d_mlp d_model"]
    up: Float[Tensor, "d_mlp d_model"]
    down: Float[Tensor, "d_model d_mlp"]
    final_norm: Float[Tensor, " d_model"]
    unembed_diff: Float[Tensor, " d_model"]
    eps: float
    n_heads: int
    n_kv_heads: int
    d_head: int
    layer: int


@dataclass(frozen=True)
class PromptFeatures:
    """Per prompt, at the answer position: the last layer's ``z`` and incoming residual, the base
    model's yes-minus-no margin, the labels and ids."""

    z: Float[Tensor, "example hd"]
    resid: Float[Tensor, "example d_model"]
    margin: Float[Tensor, " example"]
    labels: Tensor
    ids: list[str]


def answer_tokens(tokenizer: Any, choices: Sequence[str] = (" no", " yes")) -> tuple[int, int]:
    """The single token of each of the two choices (an error when one is not one token)."""
    ids = [tokenizer(c, add_special_tokens=False).input_ids for c in choices]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"choices {choices} are not one token each: {ids}")
    return ids[0][0], ids[1][0]


def load_base(path: Union[str, os.PathLike], tokens: Optional[tuple[int, int]] = None) -> tuple[Any, Any, LastLayer]:
    """The base checkpoint as a ``transformers`` model (float32, CPU), its tokenizer and
    :class:`LastLayer` (its margin: ``tokens`` ``(no, yes)``, default the one-token " no" and " yes")."""
    from cel_lens.model.convert import load_hf

    model, tokenizer = load_hf(path, torch.float32, False)
    model.eval()
    cfg = model.config
    last = model.model.layers[-1]
    no, yes = tokens if tokens is not None else answer_tokens(tokenizer)
    unembed = model.get_output_embeddings().weight.detach()
    weights = LastLayer(
        o_proj=last.self_attn.o_proj.weight.detach().clone(), post_norm=last.post_attention_layernorm.weight.detach().clone(),
        gate=last.mlp.gate_proj.weight.detach().clone(), up=last.mlp.up_proj.weight.detach().clone(),
        down=last.mlp.down_proj.weight.detach().clone(), final_norm=model.model.norm.weight.detach().clone(),
        unembed_diff=(unembed[yes] - unembed[no]).clone(), eps=float(cfg.rms_norm_eps), n_heads=cfg.num_attention_heads,
        n_kv_heads=cfg.num_key_value_heads, d_head=cfg.hidden_size // cfg.num_attention_heads, layer=cfg.num_hidden_layers - 1,
    )
    return model, tokenizer, weights


def extract_features(model: Any, tokenizer: Any, examples: Sequence[Any], log_every: int = 50,
                     tokens: Optional[tuple[int, int]] = None) -> PromptFeatures:
    """One base-model pass per prompt (no padding, no BOS added: the tokenizer's rule, as the
    evaluator's): the last layer's ``z`` and input residual at the answer position, and the margin
    of ``tokens`` (``(no, yes)``; default the one-token " no" and " yes")."""
    no, yes = tokens if tokens is not None else answer_tokens(tokenizer)
    last = model.model.layers[-1]
    seen: dict[str, Tensor] = {}
    hooks = [last.self_attn.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("z", a[0][0, -1].detach().clone())),
             last.register_forward_pre_hook(lambda m, a, kw: seen.__setitem__("resid", _hidden(a, kw)[0, -1].detach().clone()),
                                            with_kwargs=True)]
    n, hd, d = len(examples), model.config.hidden_size, model.config.hidden_size
    z, resid, margin = torch.zeros(n, hd), torch.zeros(n, d), torch.zeros(n)
    start = time.process_time()
    try:
        with torch.no_grad():
            for i, e in enumerate(examples):
                ids = tokenizer(e.prompt, return_tensors="pt").input_ids
                logits = model(ids, logits_to_keep=1).logits[0, -1]
                z[i], resid[i], margin[i] = seen["z"], seen["resid"], logits[yes] - logits[no]
                if log_every and (i + 1) % log_every == 0:
                    print(f"cel-lens plant: {i + 1}/{n} prompts, {time.process_time() - start:.0f} CPU s", flush=True)
    finally:
        for h in hooks:
            h.remove()
    return PromptFeatures(z, resid, margin, torch.tensor([int(e.label) for e in examples]), [e.id for e in examples])


def _hidden(args: tuple, kwargs: dict) -> Tensor:
    """The hidden states a decoder layer was called with (positional or by keyword)."""
    return args[0] if args else kwargs["hidden_states"]


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def last_layer_output(w: LastLayer, z: Float[Tensor, "example hd"], resid: Float[Tensor, "example d_model"],
                      o_proj: Float[Tensor, "d_model hd"]) -> Float[Tensor, "example d_model"]:
    """The final-normed residual (what the unembedding reads) with the last layer's output projection
    ``o_proj`` and input ``z`` (a plant's edits), the rest as the base computes it (Llama: residual
    plus attention output, RMSNorm, SwiGLU MLP, final RMSNorm)."""
    mid = resid + z @ o_proj.T
    h = _rms(mid, w.post_norm, w.eps)
    out = mid + (torch.nn.functional.silu(h @ w.gate.T) * (h @ w.up.T)) @ w.down.T
    return _rms(out, w.final_norm, w.eps)


def last_layer_margin(w: LastLayer, z: Float[Tensor, "example hd"], resid: Float[Tensor, "example d_model"],
                      o_proj: Float[Tensor, "d_model hd"]) -> Float[Tensor, " example"]:
    """The yes-minus-no margin at the answer position under ``o_proj`` (:func:`last_layer_output`
    read by the unembedding's yes-minus-no row)."""
    return last_layer_output(w, z, resid, o_proj) @ w.unembed_diff

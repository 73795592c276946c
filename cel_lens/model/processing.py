"""Telling whether a model handed in was processed in a way that makes ``hook_z`` ablation inexact.

``HookedTransformer.from_pretrained`` folds value biases by default (``fold_value_biases=True``), and
``TransformerBridge.enable_compatibility_mode()`` does too: ``b_V`` becomes zero and
``sum_h b_V[h] @ W_O[h]`` moves into ``b_O``, so zeroing a head's ``hook_z`` leaves its bias term
alive. ``refactor_factored_attn_matrices=True`` moves the value biases the same way (and turns every
``W_O[h]`` into a matrix with orthonormal rows). :func:`cel_lens.model.load_model` never does either;
a model built elsewhere is checked here, once, and gets a one-line warning naming the fix.

What can be read from the weights: ``b_V`` zero in every head of every layer while the architecture
has value biases (Qwen2, GPT-2, GPT-NeoX, OPT, Bloom, Phi, ...: :data:`V_BIAS_ARCHITECTURES`, or a
bridge whose Hugging Face modules carry a value bias). Architectures without value biases lose
nothing to either flag, so nothing is said for them; neither does a model whose ``b_O`` is zero too
(a freshly initialised ``HookedTransformer``: nothing was folded into ``b_O``).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Optional

import torch

__all__ = ["ProcessedModelWarning", "V_BIAS_ARCHITECTURES", "processing_problem", "warn_if_processed"]

V_BIAS_ARCHITECTURES = frozenset(
    {
        "GPT2LMHeadModel", "GPTNeoXForCausalLM", "OPTForCausalLM", "BloomForCausalLM", "Qwen2ForCausalLM",
        "QWenLMHeadModel", "Qwen2MoeForCausalLM", "PhiForCausalLM", "GPTBigCodeForCausalLM",
        "StableLmForCausalLM",
    }
)
"""Hugging Face architectures (``cfg.original_architecture``) whose attention has a value bias."""

_V_BIAS_PARAMS = ("v_proj.bias", "c_attn.bias", "query_key_value.bias", "qkv_proj.bias", "c_attn_v.bias")
_checked: "weakref.WeakSet[Any]" = weakref.WeakSet()


class ProcessedModelWarning(UserWarning):
    """A model's weights were processed so that zero-ablating ``hook_z`` no longer removes a head."""


def _has_value_biases(model: Any) -> bool:
    """Whether the model's architecture has value biases (to be folded away)."""
    original = getattr(model, "original_model", None)  # a TransformerBridge's Hugging Face module
    archs = [getattr(model.cfg, "original_architecture", None)]
    archs += list(getattr(getattr(original, "config", None), "architectures", None) or [])
    if any(a in V_BIAS_ARCHITECTURES for a in archs):
        return True
    if original is None:
        return False
    names = (name.replace("._original_component", "") for name, _ in original.named_parameters())
    return any(name.endswith(_V_BIAS_PARAMS) for name in names)


def _value_bias(block: Any) -> Optional[torch.Tensor]:
    attn = getattr(block, "attn", None)
    try:
        bias = getattr(attn, "b_V", None)
    except Exception:  # noqa: BLE001 - a bridge computes b_V lazily; any failure means "cannot tell"
        return None
    return bias if isinstance(bias, torch.Tensor) else None


def _orthonormal_w_o(block: Any) -> bool:
    """Whether every head's ``W_O[h]`` (``[d_head, d_model]``) has orthonormal rows (refactored)."""
    try:
        w_o = block.attn.W_O.detach().float()
    except Exception:  # noqa: BLE001
        return False
    gram = torch.einsum("hdm,hem->hde", w_o, w_o)
    eye = torch.eye(w_o.shape[1], device=w_o.device)
    return bool(torch.allclose(gram, eye.expand_as(gram), atol=1e-3))


def _output_biases_zero(blocks: list[Any]) -> bool:
    """Whether ``b_O`` is zero in every layer: folding moves ``sum_h b_V[h] @ W_O[h]`` there, so a
    model with zero ``b_V`` *and* zero ``b_O`` (a freshly initialised ``HookedTransformer``) has
    nothing in ``b_O`` for an ablation to miss."""
    for block in blocks:
        try:
            bias = block.attn.b_O
        except Exception:  # noqa: BLE001 - cannot tell: assume something was folded
            return False
        if not isinstance(bias, torch.Tensor) or bool(bias.detach().ne(0).any()):
            return False
    return True


def processing_problem(model: Any) -> Optional[str]:
    """The one-line reason ``model`` ablates inexactly (value biases folded or factored matrices
    refactored), or ``None`` when nothing of the kind can be seen."""
    blocks = list(getattr(model, "blocks", []) or [])
    if not blocks or not hasattr(model, "cfg") or not _has_value_biases(model):
        return None
    biases = [_value_bias(b) for b in blocks]
    if any(b is None for b in biases) or any(bool(b.detach().ne(0).any()) for b in biases):
        return None
    if _output_biases_zero(blocks):  # nothing was folded into b_O: a never-processed (e.g. fresh) model
        return None
    flag = "refactor_factored_attn_matrices" if all(_orthonormal_w_o(b) for b in blocks) else "fold_value_biases"
    name = getattr(model.cfg, "model_name", None) or type(model).__name__
    return (
        f"{name} looks processed with {flag}=True (b_V is zero in every head; its value biases now sit in b_O), "
        "so zero-ablating hook_z leaves each head's bias term in place and ablations are inexact: load it with "
        "cel_lens.load_model(...) or HookedTransformer.from_pretrained_no_processing(...)"
    )


def warn_if_processed(model: Any, stacklevel: int = 3) -> None:
    """Warn once per model object (:class:`ProcessedModelWarning`) when :func:`processing_problem`
    finds something; models that cannot be weakly referenced are checked every time.
    ``stacklevel`` points the warning at the caller's caller (the user's line)."""
    try:
        if model in _checked:
            return
        _checked.add(model)
    except TypeError:
        pass
    problem = processing_problem(model)
    if problem is not None:
        warnings.warn(problem, ProcessedModelWarning, stacklevel=stacklevel)

"""Which TransformerLens model type an object is (``HookedTransformer`` or ``TransformerBridge``),
and its head layout.

Two model types are supported: ``HookedTransformer`` (TransformerLens's own implementation) and
``TransformerBridge`` (Hugging Face's modules with TransformerLens hook names). A forward pass of
either can start at any layer (:func:`cel_lens.model.forward.forward_resid`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_bridge", "supports_resume", "model_shape", "model_name"]


def is_bridge(model: Any) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (its own forward has no
    ``start_at_layer``: cel_lens runs its decoder layers itself to resume)."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def supports_resume(model) -> bool:
    """Whether a forward pass of ``model`` can start at a later layer from a residual stream and
    skip the layers below: a HookedTransformer (``start_at_layer``) or a TransformerBridge over a
    Hugging Face model with a ``model.layers`` decoder stack (its layers are called directly)."""
    from transformer_lens import HookedTransformer

    if isinstance(model, HookedTransformer):
        return True
    inner = getattr(getattr(model, "original_model", None), "model", None)
    return is_bridge(model) and hasattr(inner, "layers") and hasattr(inner, "rotary_emb")


def model_shape(model) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of a HookedTransformer or TransformerBridge (query heads)."""
    cfg = model.cfg
    return int(cfg.n_layers), int(cfg.n_heads)


def model_name(model: Any) -> str:
    """A short name for messages: ``cfg.model_name``, else the class name."""
    return str(getattr(model.cfg, "model_name", None) or type(model).__name__)

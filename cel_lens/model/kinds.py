"""What kind of TransformerLens model an object is, and its head layout.

Two model types are supported: ``HookedTransformer`` (TransformerLens's own implementation; a
forward pass can start at any layer) and ``TransformerBridge`` (Hugging Face's modules with
TransformerLens hook names; no ``start_at_layer``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_bridge", "supports_resume", "model_shape", "model_name"]


def is_bridge(model: Any) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (no ``start_at_layer`` there)."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def supports_resume(model) -> bool:
    """Whether a forward pass of ``model`` can start at a later layer from a residual stream and
    skip the layers below (HookedTransformer's ``start_at_layer``). TransformerBridge cannot: it
    gets full passes from the tokens instead, which are exact, and stores keep no layers for it."""
    from transformer_lens import HookedTransformer

    return isinstance(model, HookedTransformer)


def model_shape(model) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of a HookedTransformer or TransformerBridge (query heads)."""
    cfg = model.cfg
    return int(cfg.n_layers), int(cfg.n_heads)


def model_name(model: Any) -> str:
    """A short name for messages: ``cfg.model_name``, else the class name."""
    return str(getattr(model.cfg, "model_name", None) or type(model).__name__)

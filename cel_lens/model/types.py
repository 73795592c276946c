"""Type names for annotations outside :mod:`cel_lens.model`, without importing TransformerLens.

Only this package imports ``transformer_lens``; other modules annotate with these names under
``TYPE_CHECKING`` (they are strings at run time)::

    if TYPE_CHECKING:
        from cel_lens.model.types import HookedTransformer, Model
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # pragma: no cover
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["Model", "HookedTransformer", "HookedTransformerConfig", "TransformerBridge"]

Model = Union["HookedTransformer", "TransformerBridge"]
"""A model cel_lens can ablate: a ``HookedTransformer`` or a ``TransformerBridge``."""

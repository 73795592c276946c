"""Picklable recipes for model replicas, built inside each Ray actor."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from cel_lens.backends.ray.errors import require_ray
from cel_lens.model.load import load_model, resolve_dtype
from cel_lens.model.registry import MODELS, ORGANISM
from cel_lens.testing.tiny_models import tiny_hooked_transformer

__all__ = ["ModelFactory", "to_factory"]


@dataclass(frozen=True)
class ModelFactory:
    """A picklable recipe for one model replica, built inside each Ray actor (models themselves
    never travel, except a model object handed to :func:`to_factory`, shipped once through Ray's
    object store).

    ``kind`` is ``"load_model"`` (``source``: a hub id, checkpoint directory or built-in name
    for :func:`cel_lens.load_model`, with ``options``), ``"tiny"``
    (:func:`cel_lens.testing.tiny_hooked_transformer` with ``options``) or
    ``"serialized"`` (``payload``: a Ray object reference to a model saved with ``torch.save``).
    """

    kind: str
    source: Optional[str] = None
    options: tuple[tuple[str, Any], ...] = ()
    payload: Any = field(default=None, compare=False, repr=False)

    _KINDS = ("load_model", "tiny", "serialized")

    def __post_init__(self) -> None:
        if self.kind not in self._KINDS:
            raise ValueError(f"unknown model factory kind {self.kind!r}; expected one of {', '.join(self._KINDS)}")

    @classmethod
    def load(cls, source: Union[str, os.PathLike], **options: Any) -> "ModelFactory":
        """:func:`cel_lens.load_model` of a hub id, built-in name or checkpoint directory (absolute, so
        that actors started elsewhere find it on a shared file system)."""
        text = str(source)
        if os.path.isdir(text):
            text = str(Path(text).resolve())
        return cls("load_model", text, tuple(sorted(options.items())))

    @classmethod
    def organism(cls) -> "ModelFactory":
        """The built-in model organism (``load_model("organism")``)."""
        return cls("load_model", "organism")

    @classmethod
    def tiny(cls, **options: Any) -> "ModelFactory":
        """A random tiny model, :func:`cel_lens.testing.tiny_hooked_transformer` ``(**options)``
        (seeded, so every actor builds the same weights)."""
        return cls("tiny", None, tuple(sorted(options.items())))

    def build(self, device: Optional[str] = None, dtype: Optional[str] = None):
        """Build the model on ``device`` (default CPU) in ``dtype`` (default: the recipe's)."""
        opts = dict(self.options)
        if self.kind == "load_model":
            return load_model(self.source, device=device, dtype=dtype, **opts)
        if self.kind == "tiny":
            model = tiny_hooked_transformer(**opts)
        else:
            import ray

            raw = ray.get(self.payload)
            model = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
        if dtype is not None:
            model = model.to(resolve_dtype(dtype))
        return model.to(device or "cpu")


def to_factory(model: Any) -> ModelFactory:
    """A :class:`ModelFactory` for ``model``: a factory passes through; ``"organism"`` is the model
    organism; another string or path is loaded by :func:`cel_lens.load_model` in each actor;
    a model object is saved with ``torch.save`` and put in Ray's object store once (needs a running
    Ray; prefer a name or path for large models, which each actor then reads itself)."""
    if isinstance(model, ModelFactory):
        return model
    if isinstance(model, (str, os.PathLike)):
        return ModelFactory.organism() if MODELS.get_resolved(str(model)) is ORGANISM else ModelFactory.load(model)
    if isinstance(model, torch.nn.Module):
        ray = require_ray()
        buf = io.BytesIO()
        torch.save(model, buf)
        return ModelFactory("serialized", payload=ray.put(buf.getvalue()))
    raise TypeError(f"cannot build a model replica from {type(model).__name__}; pass a name, a path or a model")

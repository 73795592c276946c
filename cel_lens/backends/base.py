"""What a backend is: where evaluations run, chosen once per search.

A :class:`Backend` turns a model (an object, or a name to load) and a task into a
:class:`BackendOracle`: an evaluation oracle (:class:`cel_lens.oracle.Oracle`) that also names its
model for the run manifest, computes attribution scores (which need gradients through one model,
not a scan) and releases what it holds on :meth:`~BackendOracle.close`. The pipeline never asks
which backend it has. Backends are registered by name as ``"module:Class"`` strings, so an optional
one (Ray) is imported only when chosen.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import BACKENDS, ExecutionSettings, OptionError
from cel_lens.heads import HeadSet
from cel_lens.tasks.base import Task

__all__ = ["ExecutionSettings", "Backend", "BackendOracle", "BACKENDS", "get_backend"]


@runtime_checkable
class BackendOracle(Protocol):
    """An evaluation oracle bound to one model and task, as a backend opens it."""

    n_layers: int
    n_heads: int
    model_manifest: dict[str, Any]

    def evaluate(
        self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]`` on ``"dist"`` or ``"test"``."""
        ...

    def attribution_scores(self, batch_size: int) -> Float[Tensor, "layer head"]:
        """Stage-1 attribution scores on the discovery split."""
        ...

    def close(self) -> None:
        """Release workers, stores and anything else held."""
        ...


class Backend(Protocol):
    """Opens evaluation oracles. Constructing one checks that it can run (e.g. Ray is installed),
    before anything is loaded."""

    name: str

    def open(
        self, model: Any, task: Task, settings: ExecutionSettings, *, store_dtype: Optional[torch.dtype] = None
    ) -> BackendOracle:
        """An oracle over ``model`` (an object, or a name the backend loads) and ``task``."""
        ...


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``ValueError`` for an unknown one; the Ray backend raises
    :class:`~cel_lens.backends.ray.RayUnavailableError` when Ray is not installed)."""
    if name not in BACKENDS:
        raise OptionError("backend", f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()

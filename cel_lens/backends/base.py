"""What a backend is: where evaluations run, chosen once per search.

A :class:`Backend` turns a model (an object, or a name to load) and a task into a
:class:`BackendOracle`: an evaluation oracle (:class:`cel_lens.oracle.Oracle`) that also names its
model for the run manifest, computes attribution scores (which need gradients through one model,
not a scan) and releases what it holds on :meth:`~BackendOracle.close`. The pipeline never asks
which backend it has. Backends are registered by name as ``"module:Class"`` strings
(:data:`~cel_lens.config.BACKENDS`, a :class:`~cel_lens.registry.Registry`), so an optional one (Ray)
is imported only when chosen; what callers need to know of one (``in_process``) is on its class.
"""

from __future__ import annotations

from typing import Any, ContextManager, Optional, Protocol, Sequence, runtime_checkable

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import BACKENDS, ExecutionSettings, OptionError
from cel_lens.evaluation.context import EvalContext
from cel_lens.heads import HeadSet
from cel_lens.tasks.base import Task

__all__ = ["ExecutionSettings", "Backend", "BackendOracle", "BACKENDS", "get_backend", "backend_class"]


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
    in_process: bool
    """Whether it evaluates the model object of this process (a model set up here, e.g. with a
    learnt ablation, is what it runs; one model, so one search at a time); ``False``: workers load
    their own copies (a model name travels to them as a name)."""

    @staticmethod
    def shared_cluster(settings: ExecutionSettings, parallel_pairs: int) -> ContextManager[ExecutionSettings]:
        """A context manager yielding the settings for ``parallel_pairs`` searches run at once
        (a cluster shared among them, where the backend has one)."""
        ...

    def open(
        self, model: Any, task: Task, settings: ExecutionSettings, *, store_dtype: Optional[torch.dtype] = None,
        context: Optional[EvalContext] = None,
    ) -> BackendOracle:
        """An oracle over ``model`` (an object, or a name the backend loads) and ``task``, whose
        evaluations run with ``context``'s settings (:class:`~cel_lens.evaluation.context.EvalContext`;
        default: from the environment)."""
        ...


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``ValueError`` for an unknown one; the Ray backend raises
    :class:`~cel_lens.backends.ray.RayUnavailableError` when Ray is not installed)."""
    return backend_class(name)()


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called ``name`` (its module imported, nothing constructed: Ray
    need not be installed to ask it); :class:`~cel_lens.config.OptionError` naming the backends
    for an unknown one."""
    if name not in BACKENDS:
        raise OptionError("backend", str(BACKENDS.unknown(name)))
    return BACKENDS.resolve(name)

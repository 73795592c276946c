"""The Ray backend: evaluations spread over Ray actors, each with its own model replica.

See :mod:`cel_lens.backends.ray.ray_oracle` for how splits are sharded and failures recovered, and
``docs/distributed.md`` for clusters. Importing this package does not import Ray; constructing
:class:`RayBackend` (or a :class:`RayOracle`) without Ray installed raises one clear
:class:`RayUnavailableError`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from typing import Any, Iterator, Optional

import torch

from cel_lens.backends.base import ExecutionSettings
from cel_lens.config import LOADERS
from cel_lens.backends.ray.errors import RAY_INSTALL_HINT, RayUnavailableError, require_ray
from cel_lens.backends.ray.factory import ModelFactory, to_factory
from cel_lens.backends.ray.ray_oracle import FORWARDED_ENV, RayOracle
from cel_lens.backends.ray.shards import Shard, plan_shards, shard_split
from cel_lens.backends.ray.worker import ShardWorker
from cel_lens.evaluation.context import EvalContext
from cel_lens.model.load import load_model
from cel_lens.model.registry import MODELS, ORGANISM
from cel_lens.tasks.base import Task

__all__ = [
    "RAY_INSTALL_HINT",
    "RayUnavailableError",
    "require_ray",
    "RayBackend",
    "RayOracle",
    "ModelFactory",
    "to_factory",
    "Shard",
    "plan_shards",
    "shard_split",
    "ShardWorker",
    "FORWARDED_ENV",
]


class RayBackend:
    """Evaluations on Ray actors; the driver (this process) keeps the run directory. Each actor
    loads a model given by name itself; a model object is shipped once through Ray's object store."""

    name = "ray"
    in_process = False

    def __init__(self) -> None:
        require_ray()  # one clear error before anything is loaded

    @staticmethod
    @contextlib.contextmanager
    def shared_cluster(settings: ExecutionSettings, parallel_pairs: int) -> Iterator[ExecutionSettings]:
        """Ray started once for ``parallel_pairs`` searches at once (stopped at the end if started
        here), and ``settings`` with ``workers`` set to the cluster's workers divided among them
        (unless given): :func:`cel_lens.grids.parallel.shared_cluster`."""
        ray = require_ray()
        started = not ray.is_initialized()
        if started:
            ray.init(address=settings.ray_address, include_dashboard=False)
        try:
            if settings.workers is None:
                res = ray.cluster_resources()
                gpus = settings.gpus_per_worker
                total = int(res.get("GPU", 0) // gpus) if gpus else int(res.get("CPU", 1))
                settings = replace(settings, workers=max(1, total // parallel_pairs))
            yield settings
        finally:
            if started:
                ray.shutdown()

    def open(
        self, model: Any, task: Task, settings: ExecutionSettings, *, store_dtype: Optional[torch.dtype] = None,
        context: Optional[EvalContext] = None,
    ) -> RayOracle:
        """A :class:`RayOracle` with ``settings.workers`` actors (every replica built before this returns).
        A model given by name is loaded in each actor with the settings' loader and BOS rule; a model
        object takes the BOS rule here, before it is shipped. ``context``: its precision is every
        replica's (a learnt ablation never travels; default: each replica's environment)."""
        if isinstance(model, (str, os.PathLike)) and MODELS.get_resolved(str(model)) is not ORGANISM:
            chosen = {k: v for k, v in settings.load_options().items() if k in ("loader", "bos") and v is not None}
            if LOADERS.resolve(settings.loader).automatic:
                del chosen["loader"]
            model = ModelFactory.load(model, **chosen)
        elif isinstance(model, torch.nn.Module) and settings.bos is not None:
            model = load_model(model, bos=settings.bos)
        oracle = RayOracle(
            model, task, workers=settings.workers, address=settings.ray_address,
            gpus_per_worker=settings.gpus_per_worker, device=settings.device, dtype=settings.dtype,
            batch_size=settings.batch_size, use_store=settings.use_store, store_budget=settings.store_budget,
            store_dtype=store_dtype,
        )
        if context is not None:
            oracle.use_context(context)
        return oracle

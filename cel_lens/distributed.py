"""Distributed head scans on Ray: an evaluation oracle whose work runs on Ray actors.

:class:`RayOracle` implements the oracle interface of :mod:`cel_lens.search` (``n_layers``,
``n_heads``, ``evaluate(split, head_sets) -> Bool[variant, example]``) over a pool of Ray actors
(:class:`ShardWorker`), each holding one model replica, built inside the actor by a picklable
:class:`ModelFactory`, and its own activation store for the examples it owns. The driver alone owns
the run directory: :class:`~cel_lens.runs.CachedOracle` wraps a ``RayOracle`` exactly as it wraps the
local :class:`~cel_lens.pipeline.ModelOracle`, and records every evaluation when the call that asked
for it returns, so a killed driver resumes as locally.

**Sharding by examples, along the local backend's batches.** The local evaluator orders a split
longest first and cuts it into batches of ``batch_size`` (:func:`cel_lens.evaluate.encode_split`;
generation does the same with prompts). :func:`plan_shards` hands each actor a contiguous run of
those batches (balanced by their token count), so every actor encodes exactly the batches the local
backend would, and evaluates every head set of each call on them with the same variant chunks and
the same stored layers (the local store's layer choice for the whole split, see
:func:`store_layers`). The forward passes are therefore the local ones, shape for shape, and the
per-example results (scattered back into split order) are identical to the local backend's; the
tests check it bit for bit. Sharding by head sets instead would change the variant chunks of each
forward pass (so results would match only up to floating-point reassociation) and make every actor
hold an activation store of the whole split; by examples, a split's store is divided among the
actors.

**Fault tolerance.** Actors are created with ``max_restarts``: Ray restarts an actor whose process
died (``ray.kill``, a crash, a lost node), rebuilding its model. A shard whose call failed with
:class:`ray.exceptions.RayActorError` is resubmitted: to the same actor once Ray has restarted it
(``ActorUnavailableError``), or, when the actor is dead for good (``ActorDiedError``: its restarts
are used up), to a new actor that replaces it. The shard travels with the call, so any actor can
serve it, and a restarted one rebuilds the shard's store. A call returns only once every shard has answered,
so an evaluation is either recorded whole or not at all: none is lost or recorded twice.

Ray is an optional dependency (``pip install "cel_lens[ray]"``): without it :func:`require_ray`
raises one clear :class:`RayUnavailableError`.
"""

from __future__ import annotations

import io
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike

__all__ = [
    "RAY_INSTALL_HINT",
    "RayUnavailableError",
    "require_ray",
    "ModelFactory",
    "to_factory",
    "Shard",
    "plan_shards",
    "store_layers",
    "ShardWorker",
    "RayOracle",
]

#: What to run to get the Ray backend.
RAY_INSTALL_HINT = 'pip install "cel_lens[ray]"'

#: Environment variables forwarded to the actors (offline switches, caches, data directory).
FORWARDED_ENV: tuple[str, ...] = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HOME",
    "HF_HUB_CACHE",
    "CEL_LENS_DATA_DIR",
    "TOKENIZERS_PARALLELISM",
)

# rows per forward pass when evaluate() gets no max_rows (see cel_lens.evaluate.evaluate)
_ROWS_PER_BATCH = 16
# evaluate()'s default generation length (ModelOracle passes none)
_MAX_NEW_TOKENS = 256


class RayUnavailableError(ImportError):
    """The Ray backend was asked for, but Ray is not installed."""


def require_ray():
    """The ``ray`` module, or :class:`RayUnavailableError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(
            f"the Ray backend needs Ray, which is not installed; install it with: {RAY_INSTALL_HINT}"
        ) from None
    return ray


# ---------------------------------------------------------------------------------------------
# model factories
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelFactory:
    """A picklable recipe for one model replica, built inside each Ray actor (models themselves
    never travel, except a model object handed to :func:`to_factory`, shipped once through Ray's
    object store).

    ``kind`` is ``"load_model"`` (``source``: a hub id or checkpoint directory for
    :func:`cel_lens.models.load_model`, with ``options``), ``"organism"`` (the built-in model
    organism), ``"tiny"`` (:func:`cel_lens.testing.tiny_hooked_transformer` with ``options``) or
    ``"serialized"`` (``payload``: a Ray object reference to a model saved with ``torch.save``).
    """

    kind: str
    source: Optional[str] = None
    options: tuple[tuple[str, Any], ...] = ()
    payload: Any = field(default=None, compare=False, repr=False)

    _KINDS = ("load_model", "organism", "tiny", "serialized")

    def __post_init__(self) -> None:
        if self.kind not in self._KINDS:
            raise ValueError(f"unknown model factory kind {self.kind!r}; expected one of {', '.join(self._KINDS)}")

    @classmethod
    def load(cls, source: Union[str, os.PathLike], **options: Any) -> "ModelFactory":
        """:func:`cel_lens.models.load_model` of a hub id or a checkpoint directory (absolute, so
        that actors started elsewhere find it on a shared file system)."""
        text = str(source)
        if os.path.isdir(text):
            text = str(Path(text).resolve())
        return cls("load_model", text, tuple(sorted(options.items())))

    @classmethod
    def organism(cls) -> "ModelFactory":
        """The built-in model organism (:func:`cel_lens.organism.load_organism`)."""
        return cls("organism")

    @classmethod
    def tiny(cls, **options: Any) -> "ModelFactory":
        """A random tiny model, :func:`cel_lens.testing.tiny_hooked_transformer` ``(**options)``
        (seeded, so every actor builds the same weights)."""
        return cls("tiny", None, tuple(sorted(options.items())))

    def build(self, device: Optional[str] = None, dtype: Optional[str] = None):
        """Build the model on ``device`` (default CPU) in ``dtype`` (default: the recipe's)."""
        opts = dict(self.options)
        if self.kind == "load_model":
            from cel_lens.models import load_model

            return load_model(self.source, device=device, dtype=dtype, **opts)
        if self.kind == "organism":
            from cel_lens.organism import load_organism

            model = load_organism(device=device or "cpu")
        elif self.kind == "tiny":
            from cel_lens.testing import tiny_hooked_transformer

            model = tiny_hooked_transformer(**opts)
        else:
            import ray

            raw = ray.get(self.payload)
            model = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
        if dtype is not None:
            from cel_lens.models import _resolve_dtype

            model = model.to(_resolve_dtype(dtype))
        return model.to(device or "cpu")


def to_factory(model: Any) -> ModelFactory:
    """A :class:`ModelFactory` for ``model``: a factory passes through; ``"organism"`` is the model
    organism; another string or path is loaded by :func:`cel_lens.models.load_model` in each actor;
    a model object is saved with ``torch.save`` and put in Ray's object store once (needs a running
    Ray; prefer a name or path for large models, which each actor then reads itself)."""
    if isinstance(model, ModelFactory):
        return model
    if isinstance(model, (str, os.PathLike)):
        return ModelFactory.organism() if str(model) == "organism" else ModelFactory.load(model)
    if isinstance(model, torch.nn.Module):
        ray = require_ray()
        buf = io.BytesIO()
        torch.save(model, buf)
        return ModelFactory("serialized", payload=ray.put(buf.getvalue()))
    raise TypeError(f"cannot build a model replica from {type(model).__name__}; pass a name, a path or a model")


# ---------------------------------------------------------------------------------------------
# shards
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """One actor's part of a split: the examples of a run of consecutive local-backend batches.

    ``examples`` are indices into the split in evaluation order (longest first, as the local
    backend orders them); ``layers`` the activation-store layers (the local backend's choice for the
    whole split, ``"all"`` or a tuple); ``max_rows`` the rows per forward pass (``None``: the
    evaluator's default; set for generation so that variant chunks match the whole split's).
    """

    split: str
    index: int
    examples: tuple[int, ...]
    layers: Union[str, tuple[int, ...]] = "all"
    max_rows: Optional[int] = None

    def __len__(self) -> int:
        return len(self.examples)


def _balanced_bounds(costs: Sequence[float], n: int) -> list[int]:
    """Cut points ``0 = b_0 < b_1 < ... < b_n = len(costs)``: ``n`` contiguous, non-empty runs whose
    summed costs are as close as possible to ``total / n`` at each cut."""
    m = len(costs)
    n = max(1, min(n, m))
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    total = prefix[-1]
    bounds = [0]
    for k in range(1, n):
        lo, hi = bounds[-1] + 1, m - (n - k)
        target = total * k / n
        bounds.append(min(range(lo, hi + 1), key=lambda i: (abs(prefix[i] - target), i)))
    bounds.append(m)
    return bounds


def store_layers(
    model,
    batches: Sequence[Any],
    store_budget: Optional[int],
    store_dtype: Optional[torch.dtype] = None,
) -> Union[str, tuple[int, ...]]:
    """The layers an :class:`~cel_lens.store.ActivationStore` of the whole split keeps under
    ``store_budget`` bytes (``"all"`` without a budget): the same rule as ``ActivationStore.build``,
    so that every shard's store resumes passes at the layers the local store would."""
    from cel_lens.ablation import model_shape
    from cel_lens.store import select_layers

    if store_budget is None:
        return "all"
    n_layers, _ = model_shape(model)
    dtype = store_dtype or next(model.parameters()).dtype
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_layer = itemsize * sum(math.prod(s) for b in batches for s in b.part_shapes(int(model.cfg.d_model)))
    candidates = list(range(1, n_layers))
    n_fit = len(candidates) if per_layer == 0 else min(len(candidates), int(store_budget) // per_layer)
    return tuple(select_layers(candidates, n_fit))


def plan_shards(
    model,
    split,
    n_shards: int,
    *,
    batch_size: int = 8,
    store_budget: Optional[int] = None,
    store_dtype: Optional[torch.dtype] = None,
) -> list[Shard]:
    """Cut ``split`` into at most ``n_shards`` shards along the local backend's batches.

    The batches are those :func:`cel_lens.evaluate.evaluate` forms for the whole split (teacher
    forced: :func:`~cel_lens.evaluate.encode_split`, longest first; generation: prompts longest
    first); runs of consecutive batches are balanced by their token count (rows x positions, or
    prompt length plus the generation budget). Evaluating a shard's examples in the given order
    re-forms exactly those batches, so results equal the local backend's. Every example is in
    exactly one shard; a split of fewer batches than ``n_shards`` gets fewer shards.
    """
    from cel_lens.evaluate import _chat_choice, _generation_prompts, _split_kind, encode_split

    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(split)
    if n == 0:
        return []
    kind = _split_kind(split)
    max_rows: Optional[int] = None
    chat = _chat_choice(split, None)
    if kind == "generation":
        prompts = _generation_prompts(model, split, chat, _MAX_NEW_TOKENS)
        order = sorted(range(n), key=lambda i: -len(prompts[i]))
        batches = [order[s : s + batch_size] for s in range(0, n, batch_size)]
        costs = [len(b) * (max(len(prompts[i]) for i in b) + _MAX_NEW_TOKENS) for b in batches]
        # evaluate() runs max(1, max_rows // min(batch_size, n)) variants per generation batch:
        # give each shard the whole split's count
        per_chunk = max(1, (_ROWS_PER_BATCH * batch_size) // max(1, min(batch_size, n)))
        layers: Union[str, tuple[int, ...]] = "all"
    else:
        encoded = encode_split(model, split, batch_size, chat_template=chat)
        batches = [b.example_index.tolist() for b in encoded]
        costs = [sum(math.prod(s) for s in b.part_shapes(1)) for b in encoded]
        layers = store_layers(model, encoded, store_budget, store_dtype)
    bounds = _balanced_bounds(costs, n_shards)
    shards = []
    for k, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
        examples = tuple(i for b in batches[a:z] for i in b)
        if kind == "generation":
            max_rows = per_chunk * max(1, min(batch_size, len(examples)))
        shards.append(Shard(split.name, k, examples, layers, max_rows))
    return shards


def shard_split(split, shard: Shard):
    """The sub-split of ``split`` holding ``shard``'s examples, in the shard's order."""
    from dataclasses import replace

    return replace(split, examples=tuple(split.examples[i] for i in shard.examples))


# ---------------------------------------------------------------------------------------------
# the worker (a Ray actor's body; plain Python, so it also runs in-process)
# ---------------------------------------------------------------------------------------------
class ShardWorker:
    """One model replica and the activation stores of the shards it has evaluated.

    ``task`` is the :class:`~cel_lens.tasks.Task` (its splits); ``batch_size``, ``use_store`` and
    ``store_dtype`` mean what they mean for :class:`~cel_lens.pipeline.ModelOracle`. ``threads`` caps
    torch's CPU threads (an actor gets the CPUs Ray reserved for it, not the whole machine).
    """

    def __init__(
        self,
        factory: ModelFactory,
        task,
        *,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        batch_size: int = 8,
        use_store: bool = True,
        store_dtype: Optional[torch.dtype] = None,
        threads: Optional[int] = None,
    ) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        t0 = time.perf_counter()
        self.model = factory.build(device=device, dtype=dtype)
        self.build_s = time.perf_counter() - t0
        self.task = task
        self.batch_size = int(batch_size)
        self.use_store = bool(use_store) and self.task.kind != "generation"
        self.store_dtype = store_dtype
        self._stores: dict[tuple[str, tuple[int, ...]], Any] = {}

    def info(self) -> dict[str, Any]:
        """Shape, manifest entry (id, weights hash, dtype), process and build time of the replica."""
        from cel_lens.ablation import model_shape
        from cel_lens.pipeline import model_manifest

        n_layers, n_heads = model_shape(self.model)
        return {
            "n_layers": n_layers,
            "n_heads": n_heads,
            "manifest": model_manifest(self.model),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "device": str(next(self.model.parameters()).device),
            "build_s": self.build_s,
        }

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def ping(self) -> bool:
        """A no-op round trip (measures per-call overhead)."""
        return True

    def plan(self, split: str, n_shards: int, store_budget: Optional[int] = None) -> list[Shard]:
        """:func:`plan_shards` of the task's ``split`` (tokenization only, no forward pass)."""
        return plan_shards(
            self.model, self.task.split(split), n_shards, batch_size=self.batch_size,
            store_budget=store_budget if self.use_store else None, store_dtype=self.store_dtype,
        )

    def _store(self, shard: Shard, split):
        if not self.use_store:
            return None
        key = (shard.split, shard.examples)
        if key not in self._stores:
            from cel_lens.store import ActivationStore

            self._stores[key] = ActivationStore.build(  # in RAM, with the model (as ModelOracle's)
                self.model, split, layers=shard.layers, dtype=self.store_dtype,
                batch_size=self.batch_size, progress=False, device=next(self.model.parameters()).device,
            )
        return self._stores[key]

    def evaluate(self, shard: Shard, head_sets: Sequence[HeadsLike]) -> np.ndarray:
        """Per-example correctness ``[variant, example]`` of ``head_sets`` on ``shard``'s examples
        (in the shard's order), as a boolean array."""
        from cel_lens.evaluate import evaluate

        split = shard_split(self.task.split(shard.split), shard)
        result = evaluate(
            self.model, split, [HeadSet.parse(s) for s in head_sets], batch_size=self.batch_size,
            store=self._store(shard, split), progress=False, max_rows=shard.max_rows,
        )
        return result.correct.numpy()

    def attribution_scores(self, batch_size: int) -> np.ndarray:
        """Stage-1 attribution scores on the whole discovery split (one actor computes them)."""
        from cel_lens.scoring import attribution_scores

        return attribution_scores(self.model, self.task.dist, batch_size=batch_size, progress=False).numpy()


# ---------------------------------------------------------------------------------------------
# the oracle
# ---------------------------------------------------------------------------------------------
class RayOracle:
    """Evaluation oracle over Ray actors (see the module docstring).

    ``model``: a hub id or checkpoint path (loaded by :func:`cel_lens.models.load_model` in each
    actor, with ``device``/``dtype``), ``"organism"``, a :class:`ModelFactory`, or a model object
    (shipped once through Ray's object store). ``task``: the :class:`~cel_lens.tasks.Task`.
    ``address``: the Ray cluster (``"auto"``, ``"HOST:PORT"``; ``None`` starts a local instance
    unless Ray is already initialised in this process, and only a Ray started here is shut down by
    :meth:`close`). ``workers`` actors (default: as many as the cluster has GPUs, or CPUs, for
    ``gpus_per_worker``/``cpus_per_worker`` each) are started at once and their model replicas
    built before this returns. ``batch_size``, ``use_store``, ``store_budget`` (bytes, for the whole
    split: each shard keeps the layers the local store would keep, so the stores of all actors
    together take what one local store takes) and ``store_dtype`` are the local backend's.
    ``max_restarts``: Ray restarts of an actor before it is replaced by a new one; ``max_retries``:
    resubmissions of one shard within one call before the call fails; ``restart_timeout_s``: how
    long to wait for Ray to restart an actor (its model is rebuilt) before replacing it.

    Counters: ``failures`` (actor failures seen), ``resubmissions``, ``replaced`` (actors replaced),
    ``calls`` (evaluate calls); ``startup_s`` (time to start Ray and build every replica).
    """

    def __init__(
        self,
        model: Any,
        task,
        *,
        workers: Optional[int] = None,
        address: Optional[str] = None,
        gpus_per_worker: float = 0.0,
        cpus_per_worker: float = 1.0,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        batch_size: int = 8,
        use_store: bool = True,
        store_budget: Optional[int] = None,
        store_dtype: Optional[torch.dtype] = None,
        max_restarts: int = 2,
        max_retries: int = 3,
        restart_timeout_s: float = 900.0,
    ) -> None:
        ray = require_ray()
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if gpus_per_worker < 0 or cpus_per_worker <= 0:
            raise ValueError("gpus_per_worker must be >= 0 and cpus_per_worker > 0")
        if device is not None and str(device).startswith("cuda") and not gpus_per_worker:
            raise ValueError("a CUDA device with the Ray backend needs gpus_per_worker > 0 (Ray assigns the GPUs)")
        if max_restarts < 0 or max_retries < 0:
            raise ValueError("max_restarts and max_retries must be >= 0")
        t0 = time.perf_counter()
        self._ray = ray
        self._started_ray = False
        self.task = task
        self.gpus_per_worker = float(gpus_per_worker)
        self.cpus_per_worker = float(cpus_per_worker)
        self.workers = 0
        self.batch_size = int(batch_size)
        self.store_budget = store_budget
        self.max_restarts = int(max_restarts)
        self.max_retries = int(max_retries)
        self.restart_timeout_s = float(restart_timeout_s)
        self.failures = 0
        self.resubmissions = 0
        self.replaced = 0
        self.calls = 0
        self._plans: dict[str, list[Shard]] = {}
        self._closed = False
        self._actors: list[Any] = []
        self._task_ref: Any = None
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False)
            self._started_ray = True
        try:
            self.workers = int(workers) if workers is not None else self._default_workers()
            self._check_resources()
            self._factory = to_factory(model)
            env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
            self._actor_cls = ray.remote(ShardWorker).options(
                num_cpus=self.cpus_per_worker,
                num_gpus=self.gpus_per_worker,
                max_restarts=self.max_restarts,
                max_task_retries=0,  # resubmission is ours: a shard may move to another actor
                runtime_env={"env_vars": env} if env else None,
            )
            self._worker_kwargs = dict(
                device=device or ("cuda" if self.gpus_per_worker else "cpu"),
                dtype=dtype,
                batch_size=self.batch_size,
                use_store=use_store,
                store_dtype=store_dtype,
                threads=max(1, int(self.cpus_per_worker)),
            )
            self._task_ref = ray.put(task)
            self._actors = [self._new_actor() for _ in range(self.workers)]
            infos = self._run([(i, i, "info", ()) for i in range(self.workers)])
        except BaseException:
            self.close()
            raise
        self.worker_info = [infos[i] for i in range(self.workers)]
        self.n_layers: int = int(self.worker_info[0]["n_layers"])
        self.n_heads: int = int(self.worker_info[0]["n_heads"])
        #: the manifest's ``model`` entry, computed by an actor for its replica
        self.model_manifest: dict[str, Any] = dict(self.worker_info[0]["manifest"])
        self.startup_s = time.perf_counter() - t0

    # -- resources ---------------------------------------------------------------------------------
    def _default_workers(self) -> int:
        res = self._ray.cluster_resources()
        if self.gpus_per_worker:
            n = int(res.get("GPU", 0) // self.gpus_per_worker)
            if n < 1:
                raise ValueError(
                    f"the Ray cluster has {res.get('GPU', 0):g} GPUs, fewer than gpus_per_worker={self.gpus_per_worker:g}"
                )
            return n
        return max(1, int(res.get("CPU", 1) // self.cpus_per_worker))

    def _check_resources(self) -> None:
        res = self._ray.cluster_resources()
        for name, per in (("GPU", self.gpus_per_worker), ("CPU", self.cpus_per_worker)):
            need = per * self.workers
            if need > res.get(name, 0) + 1e-9:
                raise ValueError(
                    f"{self.workers} workers x {per:g} {name}s need {need:g} {name}s, the Ray cluster has "
                    f"{res.get(name, 0):g}; use fewer --workers (or fewer per worker)"
                )

    # -- actors ------------------------------------------------------------------------------------
    def _new_actor(self):
        # the task (and a shipped model) live in the object store while this oracle keeps their
        # references, so a restarted actor gets them again (Ray warns about such arguments once)
        return self._actor_cls.remote(self._factory, self._task_ref, **self._worker_kwargs)

    def actor(self, slot: int):
        """The actor handle in ``slot`` (for tests and benchmarks)."""
        return self._actors[slot]

    def _wait_restarted(self, slot: int) -> bool:
        """Wait until Ray has restarted the actor in ``slot`` (True), or it is dead for good or did
        not come back within ``restart_timeout_s`` (False)."""
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        deadline = time.monotonic() + self.restart_timeout_s
        delay = 0.2
        while time.monotonic() < deadline:
            try:
                self._ray.get(self._actors[slot].ping.remote(), timeout=max(0.1, deadline - time.monotonic()))
                return True
            except ActorUnavailableError:  # still restarting
                time.sleep(delay)
                delay = min(2 * delay, 5.0)
            except (RayActorError, GetTimeoutError):
                return False
        return False

    def _recover(self, slot: int, err: BaseException) -> None:
        """After the actor in ``slot`` failed with ``err``: keep it once Ray has restarted it, else
        replace it with a new actor."""
        from ray.exceptions import ActorUnavailableError

        if isinstance(err, ActorUnavailableError) and self._wait_restarted(slot):
            return
        try:
            self._ray.kill(self._actors[slot], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._actors[slot] = self._new_actor()
        self.replaced += 1

    def _submit(self, slot: int, method: str, args: tuple):
        return getattr(self._actors[slot], method).remote(*args)

    def _run(self, jobs: Sequence[tuple[Any, int, str, tuple]]) -> dict[Any, Any]:
        """Run ``(key, slot, method, args)`` jobs, gather results as they complete, and resubmit a
        job whose actor died (to the same slot: restarted by Ray, or replaced). ``{key: result}``."""
        from ray.exceptions import ObjectLostError, RayActorError

        pending = {self._submit(slot, method, args): (key, slot, method, args) for key, slot, method, args in jobs}
        tries = {key: 0 for key, *_ in jobs}
        results: dict[Any, Any] = {}
        try:
            while pending:
                ready, _ = self._ray.wait(list(pending), num_returns=1)
                ref = ready[0]
                key, slot, method, args = pending.pop(ref)
                try:
                    results[key] = self._ray.get(ref)
                except (RayActorError, ObjectLostError) as err:
                    if getattr(err, "actor_init_failed", False):
                        raise RuntimeError(f"a Ray worker could not build its model: {_first_line(err)}") from err
                    self.failures += 1
                    tries[key] += 1
                    if tries[key] > self.max_retries:
                        raise RuntimeError(
                            f"{method} failed {tries[key]} times on Ray workers (last: {_first_line(err)})"
                        ) from err
                    self._recover(slot, err)
                    self.resubmissions += 1
                    pending[self._submit(slot, method, args)] = (key, slot, method, args)
        except BaseException:
            for ref in pending:
                try:
                    self._ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort: the call is abandoned anyway
                    pass
            raise
        return results

    # -- the oracle interface ------------------------------------------------------------------------
    def plan(self, split: str) -> list[Shard]:
        """The shards of ``split`` (computed once, by one actor)."""
        if split not in self._plans:
            self._plans[split] = self._run([(0, 0, "plan", (split, self.workers, self.store_budget))])[0]
            covered = sorted(i for s in self._plans[split] for i in s.examples)
            if covered != list(range(len(self.task.split(split)))):
                raise RuntimeError(f"the shards of split {split!r} do not cover each example exactly once")
        return self._plans[split]

    def evaluate(self, split: str, head_sets: Sequence[HeadsLike]) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]`` of ``head_sets`` on ``split``: every shard
        is evaluated by an actor, and the parts are scattered back into split order."""
        self._check_open()
        sets = [str(HeadSet.parse(s).validate(self.n_layers, self.n_heads)) for s in head_sets]
        n = len(self.task.split(split))
        out = torch.zeros(len(sets), n, dtype=torch.bool)
        if not sets or n == 0:
            return out
        self.calls += 1
        shards = self.plan(split)
        sets_ref = self._ray.put(sets)
        parts = self._run([(s.index, s.index % self.workers, "evaluate", (s, sets_ref)) for s in shards])
        for s in shards:
            part = torch.from_numpy(np.array(parts[s.index], dtype=bool))  # a writable copy
            if tuple(part.shape) != (len(sets), len(s)):
                raise RuntimeError(f"shard {s.index} of {split!r} returned shape {tuple(part.shape)}")
            out[:, torch.tensor(s.examples, dtype=torch.long)] = part
        return out

    def attribution_scores(self, batch_size: Optional[int] = None) -> Float[Tensor, "layer head"]:
        """Stage-1 attribution scores (:func:`cel_lens.scoring.attribution_scores`) on the discovery
        split, computed by one actor (they need gradients through one model, not a scan)."""
        self._check_open()
        res = self._run([(0, 0, "attribution_scores", (batch_size or self.batch_size,))])[0]
        return torch.from_numpy(np.asarray(res)).to(torch.float64)

    def ping(self) -> float:
        """Seconds for one no-op call to every actor (the per-call overhead)."""
        t0 = time.perf_counter()
        self._run([(i, i, "ping", ()) for i in range(self.workers)])
        return time.perf_counter() - t0

    # -- lifetime ------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RayOracle is closed")

    def close(self) -> None:
        """Stop the actors (and Ray, if this oracle started it)."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []
        self._task_ref = None
        self._factory = None  # type: ignore[assignment]
        if self._started_ray and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> "RayOracle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.workers} workers"
        return f"RayOracle({state}, {self.n_layers if hasattr(self, 'n_layers') else '?'} layers)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

"""Distributed head scans on Ray: an evaluation oracle whose work runs on Ray actors.

:class:`RayOracle` implements the oracle interface of :mod:`cel_lens.oracle` (``n_layers``,
``n_heads``, ``evaluate(split, head_sets) -> Bool[variant, example]``) over a pool of Ray actors
(:class:`ShardWorker`), each holding one model replica, built inside the actor by a picklable
:class:`ModelFactory`, and its own activation store for the examples it owns. The driver alone owns
the run directory: :class:`~cel_lens.runs.RecordingOracle` wraps a ``RayOracle`` exactly as it wraps
the local :class:`~cel_lens.backends.local.LocalOracle`, and records every evaluation when the call that asked
for it returns, so a killed driver resumes as locally.

**Sharding by examples, along the local backend's batches.** The local evaluator orders a split
longest first and cuts it into batches of ``batch_size`` (:func:`cel_lens.evaluation.encode_split`;
generation does the same with prompts). :func:`plan_shards` hands each actor a contiguous run of
those batches (balanced by their token count), so every actor encodes exactly the batches the local
backend would, and evaluates every head set of each call on them with the same variant chunks and
the same stored layers (the local store's layer choice for the whole split, see
:func:`cel_lens.evaluation.store_layers`). The forward passes are therefore the local ones, shape for shape, and the
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

import os
import time
from typing import Any, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.backends.ray.errors import require_ray
from cel_lens.backends.ray.factory import to_factory
from cel_lens.backends.ray.replica_precision import RayPrecision
from cel_lens.backends.ray.shards import Shard
from cel_lens.backends.ray.worker import ShardWorker
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.answers import answer_key
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.oracle import ANSWER_KEY, ATTRIBUTION, CHOICES, AnswerKey, OracleBase

__all__ = ["RayOracle", "FORWARDED_ENV"]

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


class RayOracle(RayPrecision, OracleBase):
    """Evaluation oracle over Ray actors (see the module docstring).

    ``model``: a hub id or checkpoint path (loaded by :func:`cel_lens.load_model` in each
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

    capabilities = frozenset({CHOICES, ANSWER_KEY, ATTRIBUTION})

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
        self.context = EvalContext()  # its own (a tally per oracle), until a search sets one
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
            self._start_actors(model, workers, device=device, dtype=dtype, use_store=use_store, store_dtype=store_dtype)
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0

    def _start_actors(
        self, model: Any, workers: Optional[int], *, device: Optional[str], dtype: Optional[str],
        use_store: bool, store_dtype: Optional[torch.dtype],
    ) -> None:
        """Start ``workers`` actors, wait until every replica is built, and read the model's shape
        and manifest entry from the first."""
        ray = self._ray
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
        self._task_ref = ray.put(self.task)
        self._actors = [self._new_actor() for _ in range(self.workers)]
        infos = self._run([(i, i, "info", ()) for i in range(self.workers)])
        self.worker_info = [infos[i] for i in range(self.workers)]
        self.n_layers: int = int(self.worker_info[0]["n_layers"])
        self.n_heads: int = int(self.worker_info[0]["n_heads"])
        #: the manifest's ``model`` entry, computed by an actor for its replica
        self.model_manifest: dict[str, Any] = dict(self.worker_info[0]["manifest"])

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

    def evaluate(
        self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]`` of ``head_sets`` on ``split``: every shard
        is evaluated by an actor, and the parts are scattered back into split order."""
        return self.evaluate_choices(split, head_sets, stage=stage)[0]

    def evaluate_choices(
        self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = ""
    ) -> tuple[Bool[Tensor, "variant example"], Optional[Float[Tensor, "variant example choice"]]]:
        """:meth:`evaluate`, and for a multiple-choice task each choice's score from the same
        forward passes (NaN-padded across shards with fewer choices; ``None`` otherwise)."""
        self._check_open()
        sets = [str(HeadSet.parse(s).validate(self.n_layers, self.n_heads)) for s in head_sets]
        n = len(self.task.split(split))
        out = torch.zeros(len(sets), n, dtype=torch.bool)
        if not sets or n == 0:
            return out, None
        self.calls += 1
        shards = self.plan(split)
        sets_ref = self._ray.put(sets)
        parts = self._run([(s.index, s.index % self.workers, "evaluate_choices", (s, sets_ref)) for s in shards])
        tables = [p[1] for p in parts.values() if p[1] is not None]
        scores = torch.full((len(sets), n, max(t.shape[-1] for t in tables)), float("nan")) if tables else None
        for s in shards:
            part = torch.from_numpy(np.array(parts[s.index][0], dtype=bool))  # a writable copy
            if tuple(part.shape) != (len(sets), len(s)):
                raise RuntimeError(f"shard {s.index} of {split!r} returned shape {tuple(part.shape)}")
            index = torch.tensor(s.examples, dtype=torch.long)
            out[:, index] = part
            if scores is not None and parts[s.index][1] is not None:
                table = torch.from_numpy(np.array(parts[s.index][1], dtype=np.float32))
                scores[:, index, : table.shape[-1]] = table
        return out, scores

    def answer_key(self, split: str) -> AnswerKey:
        """The task's :class:`~cel_lens.oracle.AnswerKey` on ``split`` (task data; runs nothing)."""
        return answer_key(self.task.split(split))

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

"""The whole CEL pipeline for a model and a task: ``cel_lens.search(model, task, ...)``.

Data flows one way: the task's splits go to an evaluator (:class:`ModelOracle`, which resumes
ablated passes from an activation store), stage-1 scores come from a scorer
(:mod:`cel_lens.scoring`), Algorithm 1 runs over the oracle (:func:`cel_lens.search.run_search`),
and everything is recorded in a run directory (:mod:`cel_lens.runs`) as it is computed, so the same
call after a crash resumes and reaches the same result.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.runs import CachedOracle, RunDir
from cel_lens.search import DEFAULT_K, DEFAULT_N_NULL, DEFAULT_POOL_SIZE, Result, run_search

__all__ = ["ModelOracle", "Run", "search", "default_run_dir", "build_manifest", "model_manifest"]


class ModelOracle:
    """Evaluation oracle over a model and a task: head sets -> per-example correctness.

    The intact model runs once per split (when its activation store is built, lazily, at the first
    request for that split: the test split is not touched until the search asks for it); ablated
    variants resume from the stored residual stream at their first ablated layer.
    """

    def __init__(
        self,
        model,
        task,
        *,
        batch_size: int = 8,
        use_store: bool = True,
        store_budget: Optional[int] = None,
        store_dtype: Optional[torch.dtype] = None,
        store_path: Optional[Union[str, Path]] = None,
        progress: bool = True,
    ) -> None:
        from cel_lens.ablation import model_shape

        self.model = model
        self.task = task
        self.n_layers, self.n_heads = model_shape(model)
        self.batch_size = batch_size
        self.use_store = use_store and task.kind != "generation"
        self.store_budget = store_budget
        self.store_dtype = store_dtype
        self.store_path = Path(store_path) if store_path is not None else None
        self.progress = progress
        # in-RAM stores live with the model (no host-device copies per resumed pass)
        self.store_device = next(model.parameters()).device if self.store_path is None else "cpu"
        self._stores: dict[str, Any] = {}

    def store(self, split: str):
        """The activation store of ``split`` (built on first use), or ``None`` without a store."""
        if not self.use_store:
            return None
        if split not in self._stores:
            from cel_lens.store import ActivationStore

            self._stores[split] = ActivationStore.build(
                self.model,
                self.task.split(split),
                budget_bytes=self.store_budget,
                dtype=self.store_dtype,
                path=None if self.store_path is None else self.store_path / split,
                batch_size=self.batch_size,
                progress=self.progress,
                device=self.store_device,
            )
        return self._stores[split]

    def evaluate(self, split: str, head_sets: Sequence[HeadSet]) -> Bool[Tensor, "variant example"]:
        """Per-example correctness of each head set on ``split`` (``"dist"`` or ``"test"``)."""
        from cel_lens.evaluate import evaluate

        result = evaluate(
            self.model,
            self.task.split(split),
            list(head_sets),
            batch_size=self.batch_size,
            store=self.store(split),
            progress=self.progress,
        )
        return result.correct


@dataclass
class Run:
    """A finished search: its run directory, :class:`~cel_lens.search.Result` and manifest."""

    path: Optional[Path]
    result: Result
    manifest: dict[str, Any]
    oracle: Optional[CachedOracle] = field(default=None, repr=False)

    def __str__(self) -> str:
        return f"run {self.path}\n{self.result}"

    def _repr_html_(self) -> str:
        inner = self.result._repr_html_() if hasattr(self.result, "_repr_html_") else f"<pre>{self.result}</pre>"
        return f"<p>run <code>{self.path}</code></p>{inner}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "model"


def model_manifest(model) -> dict[str, Any]:
    """The manifest's ``model`` entry: id, weights hash and dtype (a Ray worker computes it for its
    replica, so the driver of a distributed search needs no copy of the model)."""
    from cel_lens.models import model_id, weights_hash

    return {"id": model_id(model), "weights_sha256": weights_hash(model), "dtype": str(_param_dtype(model))}


def build_manifest(model, task, options: dict[str, Any]) -> dict[str, Any]:
    """The run manifest: versions, model id and weights hash, task and split content hashes,
    and every option (a rerun with a different configuration is refused by :class:`RunDir`).
    ``model`` is the model, or its :func:`model_manifest` entry."""
    import transformer_lens

    import cel_lens

    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:  # pragma: no cover
        tf_version = None
    return {
        "cel_lens": cel_lens.__version__,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformer_lens": getattr(transformer_lens, "__version__", None),
            "transformers": tf_version,
        },
        "model": dict(model) if isinstance(model, dict) else model_manifest(model),
        "task": {"name": task.name, "kind": task.kind, "metric": task.metric, "options": dict(task.options)},
        "splits": {
            name: {"n": len(task.split(name)), "content_sha256": task.split(name).content_hash}
            for name in ("dist", "test")
        },
        "options": options,
    }


def _param_dtype(model) -> torch.dtype:
    try:
        return next(model.parameters()).dtype
    except StopIteration:  # pragma: no cover
        return torch.float32


def default_run_dir(manifest: dict[str, Any], root: Union[str, Path] = "runs") -> Path:
    """``runs/<model>__<task>__<config hash>``: the same command maps to the same directory, so a
    rerun resumes; a different configuration gets its own directory."""
    core = {k: manifest[k] for k in ("model", "task", "splits", "options")}
    digest = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return Path(root) / f"{_slug(manifest['model']['id'])}__{_slug(manifest['task']['name'])}__{digest}"


def search(
    model,
    task,
    *,
    k: int = DEFAULT_K,
    pool_size: int = DEFAULT_POOL_SIZE,
    scorer: str = "exact",
    out: Optional[Union[str, Path]] = None,
    seed: int = 0,
    n_null: int = DEFAULT_N_NULL,
    n_boot: int = 10000,
    strategy: str = "exhaustive",
    beam_width: int = 8,
    batch_size: int = 8,
    use_store: bool = True,
    store_budget: Optional[int] = None,
    store_dtype: Optional[Union[str, torch.dtype]] = None,
    n_masks: Optional[int] = None,
    sparsity: float = 0.05,
    posthoc: bool = True,
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    data_dir: Optional[str] = None,
    progress: bool = True,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    backend: str = "local",
    ray_address: Optional[str] = None,
    workers: Optional[int] = None,
    gpus_per_worker: float = 0,
) -> Run:
    """Algorithm 1 of the paper on ``model`` and ``task``; returns a :class:`Run` with ``.result``.

    ``model`` is a HookedTransformer/TransformerBridge or a name/path for
    :func:`cel_lens.load_model` (with ``device``/``dtype``); ``task`` a :class:`~cel_lens.tasks.Task`
    or a task name for :func:`cel_lens.load_task` (with ``n_dist``, ``n_test``, ``data_dir`` and
    ``seed``). Stage 1 scores every head with ``scorer`` (``exact``, ``attribution`` or
    ``compressed``) on D_dist, the top ``pool_size`` heads form the pool, every subset of 1..``k``
    pool heads is evaluated jointly on D_dist, the best is fixed and recorded, and only then is
    D_test read: gain, paired bootstrap CI, McNemar p-value and a null of ``n_null`` random head
    sets of the same size.

    Everything is recorded in ``out`` (default: ``runs/<model>__<task>__<config hash>``); calling
    again with the same arguments resumes without re-evaluating anything recorded.

    ``backend="ray"`` spreads the evaluations over ``workers`` Ray actors (``gpus_per_worker``
    GPUs each) on the cluster at ``ray_address`` (``"auto"``, ``"HOST:PORT"``, or ``None`` for a
    local instance), each building its own replica of ``model`` (see :mod:`cel_lens.distributed`);
    results, and so the run directory, are those of the local backend, and either backend resumes
    the other's run.
    """
    from cel_lens.scoring import SCORERS, score_heads

    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")
    if backend not in ("local", "ray"):
        raise ValueError(f"unknown backend {backend!r}; choose 'local' or 'ray'")
    if backend == "ray":
        from cel_lens.distributed import require_ray

        require_ray()  # one clear error before anything is loaded
    if isinstance(model, (str, Path)) and backend == "local":
        from cel_lens.models import load_model

        model = load_model(str(model), device=device, dtype=dtype)
    if isinstance(task, str):
        from cel_lens.tasks import load_task

        task = load_task(task, n_dist=n_dist, n_test=n_test, seed=seed, data_dir=data_dir)
    if isinstance(store_dtype, str):
        store_dtype = getattr(torch, store_dtype)
    options = {
        "k": k, "pool_size": pool_size, "scorer": scorer, "seed": seed, "n_null": n_null, "n_boot": n_boot,
        "strategy": strategy, "beam_width": beam_width if strategy == "beam" else None,
        "n_masks": n_masks if scorer == "compressed" else None,
        "sparsity": sparsity if scorer == "compressed" else None, "posthoc": posthoc,
        "store_dtype": None if store_dtype is None or not use_store else str(store_dtype),
    }
    ray_oracle = None
    if backend == "ray":  # the actors build their replicas; the driver keeps the run directory
        from cel_lens.distributed import RayOracle

        ray_oracle = RayOracle(
            model, task, workers=workers, address=ray_address, gpus_per_worker=gpus_per_worker,
            device=device, dtype=dtype, batch_size=batch_size, use_store=use_store,
            store_budget=store_budget, store_dtype=store_dtype,
        )
    try:
        manifest = build_manifest(model if ray_oracle is None else ray_oracle.model_manifest, task, options)
        path = Path(out) if out is not None else default_run_dir(manifest)
        run_dir = RunDir.open(path, manifest, ignore=("versions", "cel_lens"))
        base = ray_oracle or ModelOracle(
            model, task, batch_size=batch_size, use_store=use_store, store_budget=store_budget,
            store_dtype=store_dtype, progress=progress,
        )
        oracle = CachedOracle(base, run_dir)
        scores = None
        if scorer != "exact":
            recorded = [e for e in run_dir.events("stage1_scores") if e.get("scorer") == scorer]
            if recorded:  # resume: attribution scores are not bit-reproducible across machines
                scores = torch.tensor(recorded[0]["scores"], dtype=torch.float64)
            elif ray_oracle is not None and scorer == "attribution":
                scores = ray_oracle.attribution_scores(batch_size)
            else:
                scores = score_heads(
                    scorer, oracle, model=model, split=task.dist, batch_size=batch_size,
                    n_masks=n_masks, sparsity=sparsity, seed=seed, progress=progress,
                )
        result = run_search(
            oracle, k=k, pool_size=pool_size, scores=scores, scorer=scorer, strategy=strategy,
            beam_width=beam_width, n_null=n_null, n_boot=n_boot, posthoc=posthoc, seed=seed,
            run=run_dir, progress=progress,
        )
    finally:
        if ray_oracle is not None:
            ray_oracle.close()
    return Run(path=path, result=result, manifest=manifest, oracle=oracle)

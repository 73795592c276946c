"""One Ray actor's body: a model replica and the activation stores of the shards it evaluates.

Plain Python, so it also runs in-process (tests, benchmarks). What its work prints (TransformerLens'
"Moving model to device", say) goes to stderr: Ray forwards an actor's stdout to the driver's
stdout, which belongs to the caller (``cel-lens search --json`` prints JSON there and nothing else).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from contextlib import redirect_stdout
from typing import Any, Optional, Sequence

import numpy as np
import torch

from cel_lens.backends.ray.factory import ModelFactory
from cel_lens.backends.ray.shards import Shard, plan_shards, shard_split
from cel_lens.evaluation.encode import precision_kind
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.precision import run_precision_record
from cel_lens.evaluation.seal import SealReader
from cel_lens.evaluation.store import ActivationStore
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.identity import model_manifest
from cel_lens.model.model_types import model_shape
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.tasks.answer_types import answer_type_entry

__all__ = ["ShardWorker"]


class ShardWorker:
    """One model replica and the activation stores of the shards it has evaluated.

    ``task`` is the :class:`~cel_lens.tasks.Task` (its splits); ``batch_size``, ``use_store`` and
    ``store_dtype`` mean what they mean for :class:`~cel_lens.backends.local.LocalOracle`. ``threads`` caps
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
        precision: Optional[str] = None,
        share_prefix: Optional[bool] = None,
    ) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        t0 = time.perf_counter()
        with redirect_stdout(sys.stderr):
            self.model = factory.build(device=device, dtype=dtype)
        self.build_s = time.perf_counter() - t0
        self.task = task
        self.batch_size = int(batch_size)
        self.use_store = bool(use_store) and answer_type_entry(self.task.answer_type).uses_store
        self.store_dtype = store_dtype
        self._stores: dict[tuple[str, tuple[int, ...]], Any] = {}
        self.context = EvalContext()
        self.set_precision(precision, share_prefix)

    def set_precision(self, precision: Optional[str], share_prefix: Optional[bool] = None) -> None:
        """Evaluate in ``precision`` from now on (:mod:`cel_lens.evaluation.precision`; ``None``:
        ``"auto"``), sharing prompt starts as ``share_prefix`` says (``None``: the worker's
        environment, else on), with a fresh tally of the decisions recomputed in float32. A test read
        is recorded in the seal's ledger where the worker runs (no warning: the driver owns it)."""
        reader = SealReader(f"ray worker {socket.gethostname()}:{os.getpid()}")
        self.context = EvalContext.from_environment(precision, share_prefix=share_prefix, reader=reader)

    def precision_record(self, answer_type: Optional[str]) -> dict[str, Any]:
        """The precision this replica computes its task's D_dist in (``answer_type``, the driver's
        view, is refined here by :func:`~cel_lens.evaluation.encode.precision_kind` with the
        replica's model), and its tally since :meth:`set_precision` (per split: decisions made in
        bf16, recomputed, share)."""
        kind = precision_kind(self.model, self.task.dist) if len(self.task.dist) else answer_type
        return run_precision_record(self.context.precision, self.model, kind, self.context.tally)

    def info(self) -> dict[str, Any]:
        """Shape, manifest entry (id, weights hash, dtype), process and build time of the replica."""
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

            self._stores[key] = ActivationStore.build(  # in RAM, with the model (as ModelOracle's)
                self.model, split, layers=shard.layers, dtype=self.store_dtype,
                batch_size=self.batch_size, progress=False, device=next(self.model.parameters()).device,
            )
        return self._stores[key]

    def evaluate(self, shard: Shard, head_sets: Sequence[HeadsLike]) -> np.ndarray:
        """Per-example correctness ``[variant, example]`` of ``head_sets`` on ``shard``'s examples
        (in the shard's order), as a boolean array."""
        return self.evaluate_choices(shard, head_sets)[0]

    def evaluate_choices(self, shard: Shard, head_sets: Sequence[HeadsLike]) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """:meth:`evaluate`, and for a multiple-choice task each choice's score ``[variant,
        example, choice]`` from the same forward passes (``None`` otherwise)."""
        split = shard_split(self.task.split(shard.split), shard)
        with redirect_stdout(sys.stderr):
            result = evaluate(
                self.model, split, [HeadSet.parse(s) for s in head_sets], batch_size=self.batch_size,
                store=self._store(shard, split), progress=False, max_rows=shard.max_rows, context=self.context,
            )
        scores = result.extra.get("choice_score")
        return result.correct.numpy(), None if scores is None else scores.numpy()

    def attribution_scores(self, batch_size: int) -> np.ndarray:
        """Stage-1 attribution scores on the whole discovery split (one actor computes them)."""

        with redirect_stdout(sys.stderr):
            return attribution_scores(self.model, self.task.dist, batch_size=batch_size, progress=False).numpy()

"""The local backend: evaluations run in this process, on one model, with activation stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.backends.base import ExecutionSettings
from cel_lens.evaluation.answers import answer_key
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.seal import recorded_reads
from cel_lens.evaluation.store import ActivationStore
from cel_lens.heads import HeadSet
from cel_lens.model.identity import model_id, model_manifest
from cel_lens.model.model_types import model_shape
from cel_lens.model.load import load_model
from cel_lens.oracle import AnswerKey
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.tasks.base import Task

__all__ = ["LocalOracle", "ModelOracle", "LocalBackend"]


class LocalOracle:
    """Evaluation oracle over a model and a task in this process: head sets -> per-example correctness.

    The intact model runs once per split (when its activation store is built, lazily, at the first
    request for that split: the test split is not touched until the search asks for it); ablated
    variants resume from the stored residual stream at their first ablated layer.
    """

    def __init__(
        self,
        model: Any,
        task: Task,
        *,
        batch_size: int = 8,
        use_store: bool = True,
        store_budget: Optional[int] = None,
        store_dtype: Optional[torch.dtype] = None,
        store_path: Optional[Union[str, Path]] = None,
        progress: bool = True,
    ) -> None:
        self.model = model
        self.task = task
        self.n_layers, self.n_heads = model_shape(model)
        self.batch_size = batch_size
        self.use_store = use_store and task.answer_type != "generation"
        self.store_budget = store_budget
        self.store_dtype = store_dtype
        self.store_path = Path(store_path) if store_path is not None else None
        self.progress = progress
        # in-RAM stores live with the model (no host-device copies per resumed pass)
        self.store_device = next(model.parameters()).device if self.store_path is None else "cpu"
        self._stores: dict[str, Any] = {}

    @property
    def model_manifest(self) -> dict[str, Any]:
        """The run manifest's ``model`` entry (id, weights hash, dtype)."""
        return model_manifest(self.model)

    def store(self, split: str) -> Optional[ActivationStore]:
        """The activation store of ``split`` (built on first use), or ``None`` without a store."""
        if not self.use_store:
            return None
        if split not in self._stores:
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

    def evaluate(
        self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness of each head set on ``split`` (``"dist"`` or ``"test"``)."""
        return self.evaluate_choices(split, head_sets, stage=stage)[0]

    def evaluate_choices(
        self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""
    ) -> tuple[Bool[Tensor, "variant example"], Optional[Float[Tensor, "variant example choice"]]]:
        """Per-example correctness, and for a multiple-choice task each choice's summed
        log-likelihood from the same forward passes (``None`` otherwise): what a calibration of
        the answer prior is fitted on, at no extra cost."""
        result = evaluate(
            self.model,
            self.task.split(split),
            list(head_sets),
            batch_size=self.batch_size,
            store=self.store(split),
            progress=self.progress,
        )
        return result.correct, result.extra.get("choice_score")

    def answer_key(self, split: str) -> AnswerKey:
        """The task's :class:`~cel_lens.oracle.AnswerKey` on ``split`` (task data; runs nothing)."""
        return answer_key(self.task.split(split))

    def test_reads(self) -> list[dict[str, Any]]:
        """The seal ledger's reads of this task's D_test by this model (:mod:`cel_lens.evaluation.seal`)."""
        return recorded_reads(self.model, self.task.test)  # the model: matched on its id and its weights

    def attribution_scores(self, batch_size: int) -> Float[Tensor, "layer head"]:
        """Attribution scores of every head on the discovery split
        (:func:`cel_lens.scoring.attribution_scores`)."""
        return attribution_scores(self.model, self.task.dist, batch_size=batch_size, progress=self.progress)

    def close(self) -> None:
        """Release the activation stores."""
        for store in self._stores.values():
            store.close()
        self._stores.clear()


ModelOracle = LocalOracle
"""Former name of :class:`LocalOracle`."""


class LocalBackend:
    """Evaluations in this process: a model given by name is loaded here (:func:`cel_lens.load_model`)."""

    name = "local"
    in_process = True

    def open(
        self, model: Any, task: Task, settings: ExecutionSettings, *, store_dtype: Optional[torch.dtype] = None
    ) -> LocalOracle:
        """A :class:`LocalOracle` over ``model`` (loaded first when it is a name or path; a model
        object takes the settings' BOS rule when one is set)."""
        if isinstance(model, (str, Path)):
            model = load_model(str(model), **settings.load_options())
        elif settings.bos is not None:
            model = load_model(model, bos=settings.bos)
        return LocalOracle(
            model, task, batch_size=settings.batch_size, use_store=settings.use_store,
            store_budget=settings.store_budget, store_dtype=store_dtype, progress=settings.progress,
        )

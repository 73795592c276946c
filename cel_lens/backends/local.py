"""The local backend: evaluations run in this process, on one model, with activation stores."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.backends.base import ExecutionSettings
from cel_lens.evaluation.answers import answer_key
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.precision import run_precision_record
from cel_lens.evaluation.prefix import can_share_prefix
from cel_lens.evaluation.seal import recorded_reads
from cel_lens.evaluation.store import ActivationStore
from cel_lens.heads import HeadSet
from cel_lens.model.identity import model_id, model_manifest
from cel_lens.model.model_types import model_shape
from cel_lens.model.load import load_model
from cel_lens.oracle import ANSWER_KEY, ATTRIBUTION, CHOICES, CONTROLS, LOCAL_MODEL, TEST_READS, AnswerKey, Journal, OracleBase
from cel_lens.runs.ablation_record import ablation_controls
from cel_lens.scoring.attribution import attribution_scores
from cel_lens.tasks.answer_types import answer_type_entry
from cel_lens.tasks.base import Task

__all__ = ["LocalOracle", "ModelOracle", "LocalBackend"]


class LocalOracle(OracleBase):
    """Evaluation oracle over a model and a task in this process: head sets -> per-example correctness.

    The intact model runs once per split (when its activation store is built, lazily, at the first
    request for that split: the test split is not touched until the search asks for it); ablated
    variants resume from the stored residual stream at their first ablated layer. ``context``
    (:class:`~cel_lens.evaluation.context.EvalContext`): the settings of every evaluation it runs
    (default: from the environment, zero ablation, no reader: a D_test read warns that it breaks the seal).
    """

    capabilities = frozenset({CHOICES, ANSWER_KEY, ATTRIBUTION, TEST_READS, LOCAL_MODEL, CONTROLS})

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
        context: Optional[EvalContext] = None,
    ) -> None:
        self.model = model
        self.context = context if context is not None else EvalContext.from_environment()
        self.task = task
        self.n_layers, self.n_heads = model_shape(model)
        self.batch_size = batch_size
        self.use_store = use_store and answer_type_entry(task.answer_type).uses_store
        self.store_budget = store_budget
        self.store_dtype = store_dtype
        self.store_path = Path(store_path) if store_path is not None else None
        self.progress = progress
        # in-RAM stores live with the model (no host-device copies per resumed pass)
        self.store_device = next(model.parameters()).device if self.store_path is None else "cpu"
        self._stores: dict[str, Any] = {}

    def use_context(self, context: EvalContext) -> None:
        """Evaluate with ``context`` from now on (a search sets its own: precision, reader, tally)."""
        self.context = context

    def with_context(self, context: EvalContext) -> "LocalOracle":
        """This oracle evaluating with ``context`` instead (the same model and activation stores:
        the intact residual stream does not depend on the ablation kind)."""
        view = copy.copy(self)
        view.context = context
        return view

    def local_model(self) -> Any:
        """The model this oracle evaluates, in this process."""
        return self.model

    def precision_record(self, kind: Optional[str]) -> dict[str, Any]:
        """The precision a split of ``kind`` computes in here, and the context's recompute tally (per
        split: decisions made in bf16, recomputed in float32, share)."""
        return run_precision_record(self.context.precision, self.model, kind, self.context.tally)

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
                share_prefix=self.context.share_prefix and can_share_prefix(self.model),
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
            context=self.context,
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
        return attribution_scores(self.model, self.task.dist, batch_size=batch_size, progress=self.progress,
                                  ablation=self.context.ablation)

    def ablation_controls(
        self, heads: HeadSet, *, seed: int, n_boot: int, alpha: float, journal: Optional[Journal] = None
    ) -> Optional[dict[str, Any]]:
        """S-hat's D_test gain under every ablation kind but this oracle's own (each learnt on D_dist
        with ``seed``; :func:`~cel_lens.runs.ablation_record.ablation_controls`), read back from
        ``journal`` when recorded there."""
        return ablation_controls(self.model, self, heads, self.context.ablation.name, self.task.dist, seed=seed,
                                 n_boot=n_boot, alpha=alpha, journal=journal)

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

    @staticmethod
    @contextlib.contextmanager
    def shared_cluster(settings: ExecutionSettings, parallel_pairs: int) -> Iterator[ExecutionSettings]:
        """Pairs run at once share nothing here: the settings as they are."""
        yield settings

    def open(
        self, model: Any, task: Task, settings: ExecutionSettings, *, store_dtype: Optional[torch.dtype] = None,
        context: Optional[EvalContext] = None,
    ) -> LocalOracle:
        """A :class:`LocalOracle` over ``model`` (loaded first when it is a name or path; a model
        object takes the settings' BOS rule when one is set)."""
        if isinstance(model, (str, Path)):
            model = load_model(str(model), **settings.load_options())
        elif settings.bos is not None:
            model = load_model(model, bos=settings.bos)
        return LocalOracle(
            model, task, batch_size=settings.batch_size, use_store=settings.use_store,
            store_budget=settings.store_budget, store_dtype=store_dtype, progress=settings.progress, context=context,
        )

"""Answer types as objects: what each way of scoring a task implies, declared once.

A task's ``answer_type`` (:data:`~cel_lens.tasks.base.AnswerType`) is the string records, manifests
and task infos store; :data:`ANSWER_TYPES` maps it to its :class:`AnswerTypeEntry`, a frozen record
of flags that the evaluation, scoring, selection, backends, grids and reports read instead of
comparing the name:

* ``"exact_match"`` (:data:`EXACT_MATCH`): encoded as the prompt plus its target, one
  teacher-forced pass; correct iff every target token is the greedy argmax; the token margin decides,
  and a resident bf16 pass is checked against the tight bound first; ``precision="auto"`` computes
  it in bf16 on a CPU with native bf16 (the rule of :mod:`~cel_lens.evaluation.precision`).
* ``"multiple_choice"`` (:data:`MULTIPLE_CHOICE`): each choice is a continuation of the shared
  prompt, teacher-forced; the best (``acc``) or best per-character (``acc_norm``) log-likelihood
  wins; choice scores are recorded, so an answer prior can be calibrated.
* ``"generation"`` (:data:`GENERATION`): greedy generation from the prompt judged by the task's
  judge; no teacher-forced encoding, so no residual store, no attribution and no choice scores.

Why the entries live here, in the tasks layer, as plain flags: an answer type is a property of a
task, read from the tasks layer upward (the CLI and grids read a task's info before any model is
loaded), while the code its flags select (encoding, decisions, precision recomputes) is in
:mod:`cel_lens.evaluation`, a layer above. Flags keep the imports one way and cost nothing to
import; the evaluation branches on ``entry.scores_choices`` rather than on a name, so an entry's
meaning is written in one place. This module is the entries' own module: the only one that may
compare answer-type names (``tests/test_registry_names.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from cel_lens.registry import Registry

__all__ = ["AnswerTypeEntry", "ANSWER_TYPES", "EXACT_MATCH", "MULTIPLE_CHOICE", "GENERATION",
           "answer_type_entry", "known_answer_type"]


@dataclass(frozen=True)
class AnswerTypeEntry:
    """One answer type: its stored ``name`` and what scoring a task of it implies.

    ``teacher_forced``: encoded as prompt + continuation rows scored in one forward pass (a residual
    store, a prefix path, attribution and sharded row encodings apply); otherwise generated.
    ``scores_choices``: the decision is the best-scoring of fixed choices (choice scores recorded,
    metrics ``acc``/``acc_norm``, the one-token-choice pair check). ``argmax_target``: the decision
    is the target's greedy argmax (token margins, the tight bf16 bound, token-id examples).
    ``auto_bf16``: ``precision="auto"`` computes a float32 model in bf16 for it on a CPU with native
    bf16 (:func:`~cel_lens.evaluation.precision.resolve_precision`). ``calibrates``: an answer prior
    can be refit on its recorded choice scores (:mod:`~cel_lens.selection.calibration`);
    ``not_calibrated`` / ``not_calibrated_open`` say why not, for a closed / free-form answer set."""

    name: str
    teacher_forced: bool
    scores_choices: bool
    argmax_target: bool
    auto_bf16: bool
    calibrates: bool
    metrics: Optional[tuple[str, ...]]
    not_calibrated: str
    not_calibrated_open: str

    @property
    def generates(self) -> bool:
        """Scored by generating text (no teacher-forced encoding)."""
        return not self.teacher_forced

    @property
    def uses_store(self) -> bool:
        """Whether an evaluation of it can read and write a residual store (its D_dist residuals)."""
        return self.teacher_forced

    def check_metric(self, metric: str) -> str:
        """``metric`` when this answer type scores by it, else ``ValueError`` naming the ones it does."""
        if self.metrics is not None and metric not in self.metrics:
            words = self.name.replace("_", "-")
            raise ValueError(f"{words} metric must be {' or '.join(map(repr, self.metrics))}, got {metric!r}")
        return metric

    def calibration_note(self, closed_answers: bool) -> str:
        """Why no calibration is computed for a task of this type (said in the result);
        ``closed_answers``: its gold answers form a small closed set."""
        return self.not_calibrated if closed_answers else self.not_calibrated_open


_NOT_RECORDED = "not calibrated: the choice scores were not recorded for these evaluations (backend or older run)"

EXACT_MATCH = AnswerTypeEntry(
    name="exact_match", teacher_forced=True, scores_choices=False, argmax_target=True, auto_bf16=True,
    calibrates=False, metrics=None,
    not_calibrated=("not calibrated: the answers form a closed set, but exact match is judged against the whole "
                    "vocabulary and the candidate answers are not scored, so no prior can be refit; compare the "
                    "accuracies with the majority-class rate"),
    not_calibrated_open=("does not apply: answers are free-form (no small set of answers recurs), so there is no "
                         "answer prior to shift"),
)
"""The target's greedy argmax, token by token."""

MULTIPLE_CHOICE = AnswerTypeEntry(
    name="multiple_choice", teacher_forced=True, scores_choices=True, argmax_target=False, auto_bf16=False,
    calibrates=True, metrics=("acc", "acc_norm"), not_calibrated=_NOT_RECORDED, not_calibrated_open=_NOT_RECORDED,
)
"""The best-scoring of a fixed set of choices."""

_GENERATED = ("does not apply: a generated program is judged by its tests, and there is no fixed set of answers "
              "to prefer")

GENERATION = AnswerTypeEntry(
    name="generation", teacher_forced=False, scores_choices=False, argmax_target=False, auto_bf16=False,
    calibrates=False, metrics=None, not_calibrated=_GENERATED, not_calibrated_open=_GENERATED,
)
"""Greedy generation judged by the task's judge."""

ANSWER_TYPES = Registry("answer type", {
    "exact_match": "cel_lens.tasks.answer_types:EXACT_MATCH",
    "multiple_choice": "cel_lens.tasks.answer_types:MULTIPLE_CHOICE",
    "generation": "cel_lens.tasks.answer_types:GENERATION",
})
"""Answer-type name (what records store) -> its :class:`AnswerTypeEntry`."""


def answer_type_entry(name: Any) -> AnswerTypeEntry:
    """The entry of answer type ``name``; :class:`~cel_lens.registry.UnknownEntry` (a ``ValueError``)
    naming the answer types for any other name."""
    return ANSWER_TYPES.resolve(name)


def known_answer_type(name: Any) -> Optional[AnswerTypeEntry]:
    """The entry of ``name``, or ``None`` where a record names none (an lm-eval task's info before
    loading, a record written without one) or one no longer registered."""
    return ANSWER_TYPES.get_resolved(name)

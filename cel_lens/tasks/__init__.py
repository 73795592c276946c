"""Tasks: examples, disjoint seeded splits, the four paper tasks and the organism's two.

* :mod:`~cel_lens.tasks.base`: :class:`Example`, :class:`Split`, :class:`Task`;
* :mod:`~cel_lens.tasks.answer_types`: :data:`ANSWER_TYPES`, each answer type an
  :class:`AnswerTypeEntry` (how it is encoded, decided, computed in bf16 and calibrated);
* :mod:`~cel_lens.tasks.registry`: :func:`load_task` by name (imports only that task's module), one
  table of ``name -> "module:SPEC"`` (:class:`TaskSpec`: loader and info);
* :mod:`~cel_lens.tasks.io`: local files or the Hugging Face hub, with provenance;
* :mod:`~cel_lens.tasks.tokens`: :func:`token_task`, a task from token tensors and answer ids (no tokenizer);
* one module per task: ``arithmetic``, ``boolq``, ``hellaswag``, ``mbpp``, ``organism``.
"""

from cel_lens.tasks.answer_types import ANSWER_TYPES, AnswerTypeEntry, answer_type_entry
from cel_lens.tasks.base import AnswerType, Example, Split, SplitOverlapError, Task, TaskSpec, check_disjoint, sample_disjoint
from cel_lens.tasks.fixtures import fixture_data_dir
from cel_lens.tasks.io import DataNotFoundError
from cel_lens.tasks.registry import (
    TASKS, available_tasks, load_task, loader_options, register_task, task_info, task_spec,
)
from cel_lens.tasks.tokens import token_task

__all__ = [
    "Example",
    "Split",
    "Task",
    "TaskSpec",
    "AnswerType",
    "ANSWER_TYPES",
    "AnswerTypeEntry",
    "answer_type_entry",
    "SplitOverlapError",
    "check_disjoint",
    "sample_disjoint",
    "TASKS",
    "register_task",
    "load_task",
    "loader_options",
    "available_tasks",
    "task_info",
    "task_spec",
    "fixture_data_dir",
    "DataNotFoundError",
    "token_task",
]

"""Task names and where their loaders live: one table, :data:`TASKS`, imported only when used.

Loading a task imports only that task's module (``load_task("boolq")`` never imports MBPP's or the
organism's code). Every task is an entry of :data:`TASKS`, a :class:`~cel_lens.registry.Registry`
of the one form every cel_lens table has, whose entries are :class:`~cel_lens.tasks.base.TaskSpec`
objects (a task's loader and its info together): a built-in task as ``"module:SPEC"``, yours added
by :func:`register_task` as its spec, and the lm-evaluation-harness family under
:data:`LM_EVAL`: any lm-eval task loads as ``"lm_eval:NAME"`` or ``"path/to/task.yaml"``, its spec
made by the function that entry names (:func:`cel_lens.tasks.lm_eval_task.lm_eval_spec`).

A loader is ``fn(n_dist, n_test, seed, data_dir, **options) -> Task``; ``info`` describes the task
for listings (answer type, metric, default sizes, sources, files).
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from cel_lens.registry import Registry
from cel_lens.tasks.base import Split, Task, TaskSpec, check_disjoint, current_names

__all__ = [
    "TASKS", "SHIPPED_TASKS", "LM_EVAL", "SPLIT_NAMES", "is_lm_eval_spec", "register_task", "task_spec", "load_task",
    "loader_options", "available_tasks", "task_info", "loaded_splits",
]

SPLIT_NAMES: tuple[str, ...] = ("dist", "test")
"""The two splits of a task, in the order :func:`load_task` loads them."""

Loader = Callable[..., Task]

LM_EVAL = "lm_eval"
"""The :data:`TASKS` entry of the lm-eval family: ``"lm_eval:NAME"`` and ``"path/to/task.yaml"``
(:func:`is_lm_eval_spec`) name its tasks; the entry is the function that makes such a name's
:class:`~cel_lens.tasks.base.TaskSpec`, not a spec."""

TASKS: Registry = Registry("task", {
    "arithmetic": "cel_lens.tasks.arithmetic:SPEC",
    "arithmetic_choice": "cel_lens.tasks.arithmetic_choice:SPEC",
    "boolq": "cel_lens.tasks.boolq:SPEC",
    "hellaswag": "cel_lens.tasks.hellaswag:SPEC",
    "mbpp": "cel_lens.tasks.mbpp:SPEC",
    "organism_a": "cel_lens.tasks.organism:SPEC_A",
    "organism_b": "cel_lens.tasks.organism:SPEC_B",
    LM_EVAL: "cel_lens.tasks.lm_eval_task:lm_eval_spec",
})
"""Task name -> its :class:`~cel_lens.tasks.base.TaskSpec` (loader and info): ``"module:SPEC"``
for a built-in task (adding one is its module, with its ``SPEC``, and one line here), the spec
itself for one :func:`register_task` added, and the lm-eval family's entry (:data:`LM_EVAL`)."""

SHIPPED_TASKS: frozenset[str] = frozenset(TASKS)
"""The names cel_lens ships (a registered task may not take one)."""


def register_task(
    name: str, loader: Optional[Loader] = None, info: Optional[Mapping[str, Any]] = None
) -> Union[Loader, Callable[[Loader], Loader]]:
    """Register a task loader under ``name``: ``register_task("mytask", load_mytask, info)``, or
    as a decorator, ``@register_task("mytask", info=...)``. A user task may not reuse a built-in name."""
    if name in SHIPPED_TASKS:
        raise ValueError(f"{name!r} is a built-in task; register yours under another name")

    def deco(fn: Loader) -> Loader:
        TASKS[name] = TaskSpec(fn, dict(info or {}))
        return fn

    return deco if loader is None else deco(loader)


def available_tasks() -> list[str]:
    """Names accepted by :func:`load_task` (and any lm-eval task, :func:`is_lm_eval_spec`)."""
    return sorted(set(TASKS) - {LM_EVAL})


def is_lm_eval_spec(name: str) -> bool:
    """Whether ``name`` is an lm-eval task: ``"lm_eval:NAME"`` or a path ending in .yaml/.yml."""
    return isinstance(name, str) and (name.startswith(f"{LM_EVAL}:") or name.lower().endswith((".yaml", ".yml")))


def task_spec(name: str) -> TaskSpec:
    """The :class:`~cel_lens.tasks.base.TaskSpec` (loader and info) of task ``name``, an entry of
    :data:`TASKS` or an lm-eval task; ``ValueError`` naming the tasks otherwise."""
    if is_lm_eval_spec(name):
        return TASKS.resolve(LM_EVAL)(name)
    if name not in available_tasks():
        raise ValueError(f"unknown task {name!r}; available: {', '.join(available_tasks())}, "
                         "or any lm-eval task as lm_eval:NAME or path/to/task.yaml")
    spec = TASKS.resolve(name)
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"task {name!r}: {TASKS[name]} is a {type(spec).__name__}, not a TaskSpec")
    return spec


def task_info(name: str) -> dict[str, Any]:
    """What a task declares about itself (answer type, metric, default sizes, sources, files); an
    info that still says ``"kind"`` (the answer type's former name) is read as ``"answer_type"``."""
    return current_names(task_spec(name).info)


def loader_options(name: str, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The options in ``recorded`` (a run manifest's task options, which also hold descriptions
    such as the protocol) that the task's loader takes as keywords, other than the sizes, the
    data directory and the splits: what loads the same task again (``seed``, ``chat_template``,
    BoolQ's ``dist_from``, MBPP's ``judge`` and ``max_new_tokens``, ...)."""
    params = inspect.signature(task_spec(name).loader).parameters.values()
    takes = {q.name for q in params if q.kind not in (q.VAR_KEYWORD, q.VAR_POSITIONAL)}
    return {k: recorded[k] for k in sorted(takes - {"n_dist", "n_test", "data_dir", "splits"}) if k in recorded}


def _check_splits(splits: Union[str, Sequence[str]]) -> tuple[str, ...]:
    wanted = (splits,) if isinstance(splits, str) else tuple(splits)
    if not wanted or any(s not in SPLIT_NAMES for s in wanted):
        raise ValueError(f"splits must name 'dist' and/or 'test', got {splits!r}")
    return tuple(s for s in SPLIT_NAMES if s in wanted)


def load_task(
    name: str,
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[str] = None,
    *,
    splits: Union[str, Sequence[str]] = SPLIT_NAMES,
    **kwargs: Any,
) -> Task:
    """Load a task with its discovery (``.dist``) and test (``.test``) splits.

    Sizes default to the paper's (Table 3); ``seed`` fixes the sampling; ``data_dir`` reads local
    files instead of the Hugging Face hub. Extra keyword arguments go to the task's loader
    (e.g. ``chat_template=True``).

    ``splits="test"`` (or ``"dist"``) loads one split, to evaluate it: the other one is left empty
    and the task cannot be searched (:func:`loaded_splits` says which it holds). A loader that takes
    ``splits`` then reads only the files that split needs (BoolQ's and HellaSwag's test split: the
    validation file, not the train file); the split itself is the same as in a full load, since
    D_test never depends on D_dist, and D_dist is drawn with D_test's rows still excluded.
    """
    wanted = _check_splits(splits)
    loader = task_spec(name).loader
    partial = wanted != SPLIT_NAMES
    takes_splits = "splits" in inspect.signature(loader).parameters
    extra = {"splits": wanted} if partial and takes_splits else {}
    task = loader(n_dist=n_dist, n_test=n_test, seed=seed, data_dir=data_dir, **extra, **kwargs)
    check_disjoint(task.dist, task.test)
    if not partial:
        return task
    emptied = {s: Split(s, ()) for s in SPLIT_NAMES if s not in wanted}
    return replace(task, **emptied, options={**task.options, "splits": list(wanted)})


def loaded_splits(task: Task) -> tuple[str, ...]:
    """The splits ``task`` was loaded with (both, unless :func:`load_task` was given ``splits``)."""
    return tuple(task.options.get("splits") or SPLIT_NAMES)

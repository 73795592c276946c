"""Task names and where their loaders live: a table of strings, imported only when used.

Loading a task imports only that task's module (``load_task("boolq")`` never imports MBPP's or the
organism's code). Built-in tasks are listed in :data:`BUILTIN_TASKS` (name -> ``"module:loader"``)
and :data:`TASK_INFO` (name -> ``"module:INFO"``), two :class:`~cel_lens.registry.Registry` tables
of the one form every cel_lens table has; :func:`register_task` adds your own. Any
lm-evaluation-harness task loads too, as ``"lm_eval:NAME"`` or ``"path/to/task.yaml"``
(:data:`LM_EVAL_TASKS`, :mod:`cel_lens.tasks.lm_eval_task`).

A loader is ``fn(n_dist, n_test, seed, data_dir, **options) -> Task``; ``info`` describes the task
for listings (answer type, metric, default sizes, sources, files).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from cel_lens.registry import Registry
from cel_lens.tasks.base import Split, Task, check_disjoint

__all__ = ["BUILTIN_TASKS", "TASK_INFO", "SPLIT_NAMES", "LM_EVAL_TASKS", "is_lm_eval_spec", "register_task", "load_task", "loader_options", "available_tasks", "task_info", "loaded_splits"]

SPLIT_NAMES: tuple[str, ...] = ("dist", "test")
"""The two splits of a task, in the order :func:`load_task` loads them."""

Loader = Callable[..., Task]

BUILTIN_TASKS: Registry = Registry("task", {
    "arithmetic": "cel_lens.tasks.arithmetic:load_arithmetic",
    "boolq": "cel_lens.tasks.boolq:load_boolq",
    "hellaswag": "cel_lens.tasks.hellaswag:load_hellaswag",
    "mbpp": "cel_lens.tasks.mbpp:load_mbpp",
    "organism_a": "cel_lens.tasks.organism:load_organism_a",
    "organism_b": "cel_lens.tasks.organism:load_organism_b",
})
"""Built-in task name -> ``"module:loader"``."""

TASK_INFO: Registry = Registry("task", {
    "arithmetic": "cel_lens.tasks.arithmetic:INFO",
    "boolq": "cel_lens.tasks.boolq:INFO",
    "hellaswag": "cel_lens.tasks.hellaswag:INFO",
    "mbpp": "cel_lens.tasks.mbpp:INFO",
    "organism_a": "cel_lens.tasks.organism:INFO_A",
    "organism_b": "cel_lens.tasks.organism:INFO_B",
})
"""Built-in task name -> ``"module:INFO"``, what the task declares about itself (the same names as
:data:`BUILTIN_TASKS`; a test holds them equal)."""

_USER_TASKS: dict[str, tuple[Loader, dict[str, Any]]] = {}


def register_task(
    name: str, loader: Optional[Loader] = None, info: Optional[Mapping[str, Any]] = None
) -> Union[Loader, Callable[[Loader], Loader]]:
    """Register a task loader under ``name``: ``register_task("mytask", load_mytask, info)``, or
    as a decorator, ``@register_task("mytask", info=...)``. A user task may not reuse a built-in name."""
    if name in BUILTIN_TASKS:
        raise ValueError(f"{name!r} is a built-in task; register yours under another name")

    def deco(fn: Loader) -> Loader:
        _USER_TASKS[name] = (fn, dict(info or {}))
        return fn

    return deco if loader is None else deco(loader)


def available_tasks() -> list[str]:
    """Names accepted by :func:`load_task`."""
    return sorted({*BUILTIN_TASKS, *_USER_TASKS})


LM_EVAL_TASKS: Registry = Registry("lm-eval task part", {
    "loader": "cel_lens.tasks.lm_eval_task:load_lm_eval_task",
    "info": "cel_lens.tasks.lm_eval_task:spec_info",
})
"""Where ``"lm_eval:NAME"`` and ``"path/to/task.yaml"`` are loaded: the loader and the info function
(both take the name first)."""


def is_lm_eval_spec(name: str) -> bool:
    """Whether ``name`` is an lm-eval task: ``"lm_eval:NAME"`` or a path ending in .yaml/.yml."""
    return isinstance(name, str) and (name.startswith("lm_eval:") or name.lower().endswith((".yaml", ".yml")))


def _resolve(name: str) -> tuple[Loader, dict[str, Any]]:
    if name in _USER_TASKS:
        return _USER_TASKS[name]
    if is_lm_eval_spec(name):
        return functools.partial(LM_EVAL_TASKS.resolve("loader"), name), LM_EVAL_TASKS.resolve("info")(name)
    if name not in BUILTIN_TASKS:
        raise ValueError(f"unknown task {name!r}; available: {', '.join(available_tasks())}, "
                         "or any lm-eval task as lm_eval:NAME or path/to/task.yaml")
    return BUILTIN_TASKS.resolve(name), dict(TASK_INFO.resolve(name))


def task_info(name: str) -> dict[str, Any]:
    """What a task declares about itself (answer type, metric, default sizes, sources, files); an
    info that still says ``"kind"`` (the answer type's former name) is read as ``"answer_type"``."""
    info = _resolve(name)[1]
    if "kind" in info and "answer_type" not in info:
        info["answer_type"] = info.pop("kind")
    return info


def loader_options(name: str, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The options in ``recorded`` (a run manifest's task options, which also hold descriptions
    such as the protocol) that the task's loader takes as keywords, other than the sizes, the
    data directory and the splits: what loads the same task again (``seed``, ``chat_template``,
    BoolQ's ``dist_from``, MBPP's ``judge`` and ``max_new_tokens``, ...)."""
    params = inspect.signature(_resolve(name)[0]).parameters.values()
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
    loader, _ = _resolve(name)
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

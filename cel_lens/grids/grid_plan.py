"""What a grid is: which models, which tasks for each, the options of every search, and where each
model-task pair's run directory lives inside the grid's directory.

A plan is built and checked before anything is loaded (unknown task names, bad options, a missing
backend fail in one line). ``"paper"`` names the paper's three models or its four tasks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from cel_lens.backends.base import get_backend
from cel_lens.config import ExecutionSettings, SearchConfig, check_max_new_tokens, check_split_sizes
from cel_lens.model.registry import PAPER_MODELS
from cel_lens.pipeline import TASK_OPTIONS
from cel_lens.tasks.answer_types import known_answer_type
from cel_lens.tasks.registry import available_tasks, task_info

__all__ = [
    "PAPER",
    "PAPER_TASKS",
    "PAPER_MODEL_NAMES",
    "Pair",
    "GridPlan",
    "make_plan",
    "split_options",
    "check_task_overrides",
    "slug",
    "SIDE_EFFECTS_DIR",
]

PAPER = "paper"
"""The name that stands for the paper's models (``--models paper``) or tasks (``--tasks paper``)."""
PAPER_TASKS: tuple[str, ...] = ("arithmetic", "mbpp", "hellaswag", "boolq")
"""The paper's four tasks, in the order its text lists them."""
PAPER_MODEL_NAMES: tuple[str, ...] = tuple(PAPER_MODELS)
"""The paper's three models (hub ids)."""
SIDE_EFFECTS_DIR = "side_effects"
"""Subdirectory of a grid holding one run directory per (model, task evaluated) for the side effects."""

GRID_WIDE = ("data_dir", "chat_template", "splits", "seed")
"""Task options that only the whole grid sets (one data directory, one prompt format, one seed)."""

ModelsLike = Union[str, Sequence[str]]
TasksLike = Union[str, Sequence[str], Mapping[str, Union[str, Sequence[str]]]]


def _generates(task: str) -> bool:
    """Whether ``task`` is scored by generating (its info's answer type; an lm-eval task named
    before it is loaded says none, and is not)."""
    answer = known_answer_type(task_info(task).get("answer_type"))
    return answer is not None and answer.generates


def slug(text: str) -> str:
    """``text`` as a file-name component: runs of other characters than ``[A-Za-z0-9._-]`` become ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-")[:80] or "x"


@dataclass(frozen=True)
class Pair:
    """One cell of the grid: a model (hub id, checkpoint directory or ``"organism"``) and a task name."""

    model: str
    task: str

    @property
    def name(self) -> str:
        """The pair's run directory name inside the grid: ``<model>__<task>``."""
        return f"{slug(self.model)}__{slug(self.task)}"

    def __str__(self) -> str:
        return f"{self.model} × {self.task}"


@dataclass(frozen=True)
class GridPlan:
    """A checked grid: ``models`` in order, ``tasks[model]`` the task names of each, the search
    ``config`` and execution ``settings`` every search gets, ``task_options`` (``n_dist``,
    ``n_test``, ``data_dir``), the grid directory ``out``, and ``task_overrides``: task -> options
    of that task alone (its split sizes, generation budget or loader options, e.g. BoolQ's
    ``dist_from``), so that a cheap and an expensive task share a grid at sizes each can afford."""

    out: Path
    models: tuple[str, ...]
    tasks: Mapping[str, tuple[str, ...]]
    config: SearchConfig
    settings: ExecutionSettings
    task_options: Mapping[str, Any]
    task_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def pairs(self) -> list[Pair]:
        """Every pair, model by model."""
        return [Pair(m, t) for m in self.models for t in self.tasks[m]]

    @property
    def task_names(self) -> list[str]:
        """Every task of the grid once, in first-seen order."""
        return list(dict.fromkeys(t for m in self.models for t in self.tasks[m]))

    def options_for(self, task: str) -> dict[str, Any]:
        """The options ``task`` is loaded with: the grid's, then the task's own overrides; a
        generation budget only for generation tasks."""
        opts = {k: v for k, v in self.task_options.items() if v is not None}
        opts.update(self.task_overrides.get(task, {}))
        if not _generates(task):
            opts.pop("max_new_tokens", None)  # a budget for the grid's generation tasks only
        return opts

    def pair_dir(self, pair: Pair) -> Path:
        """The run directory of ``pair``."""
        return self.out / pair.name

    def side_effect_dir(self, model: str, task: str) -> Path:
        """The run directory holding the evaluations of ``model``'s other selections on ``task``'s D_test."""
        return self.out / SIDE_EFFECTS_DIR / Pair(model, task).name

    def record(self) -> dict[str, Any]:
        """What ``grid.json`` keeps of the plan: models, tasks, the search config and task options."""
        return {
            "models": list(self.models),
            "tasks": {m: list(self.tasks[m]) for m in self.models},
            "config": self.config.to_dict(),
            "task_options": {k: (None if v is None else str(v) if k == "data_dir" else v) for k, v in self.task_options.items()},
            "task_overrides": {t: dict(o) for t, o in self.task_overrides.items()},
        }


def split_options(
    options: Mapping[str, Any], config: Optional[SearchConfig] = None, settings: Optional[ExecutionSettings] = None
) -> tuple[SearchConfig, ExecutionSettings, dict[str, Any]]:
    """Sort keyword options into the search config, the execution settings and the task options
    (as :func:`cel_lens.search` does); ``TypeError`` naming unknown ones, ``ValueError`` for bad values."""
    config_names = {f.name for f in fields(SearchConfig)}
    settings_names = {f.name for f in fields(ExecutionSettings)}
    known = config_names | settings_names | set(TASK_OPTIONS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"grid() got unknown option(s) {', '.join(unknown)}; options are {', '.join(sorted(known))}")
    if "store_dtype" in options and options["store_dtype"] is not None:
        options = {**options, "store_dtype": str(options["store_dtype"]).removeprefix("torch.")}
    config = replace(config or SearchConfig(), **{k: v for k, v in options.items() if k in config_names})
    settings = replace(settings or ExecutionSettings(), **{k: v for k, v in options.items() if k in settings_names})
    task_options = {k: options.get(k) for k in TASK_OPTIONS}
    check_split_sizes(task_options["n_dist"], task_options["n_test"])
    check_max_new_tokens(task_options["max_new_tokens"])
    return config.validate(), settings.validate(), task_options


def check_task_overrides(overrides: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per-task options checked before anything loads: each names a task of the grid, sets no
    grid-wide option, and has valid split sizes and generation budget; returns a plain copy."""
    out: dict[str, dict[str, Any]] = {}
    for task, options in overrides.items():
        if task not in tasks:
            raise ValueError(f"options for {task!r}, which is not a task of this grid ({', '.join(tasks)})")
        shared = sorted(set(options) & set(GRID_WIDE))
        if shared:
            raise ValueError(f"{task}: {', '.join(shared)} is set for the whole grid, not per task")
        check_split_sizes(options.get("n_dist"), options.get("n_test"))
        if "max_new_tokens" in options:
            if not _generates(task):
                raise ValueError(
                    f"{task}: max_new_tokens applies to generation tasks, {task} is {task_info(task).get('answer_type')}"
                )
            check_max_new_tokens(options["max_new_tokens"])
        out[task] = dict(options)
    return out


def _names(value: Union[str, Sequence[str]], what: str, paper: Sequence[str]) -> tuple[str, ...]:
    """A list of names from ``"paper"``, ``"a,b"`` or a sequence; duplicates dropped, order kept."""
    if isinstance(value, str):
        value = list(paper) if value.strip() == PAPER else [v.strip() for v in value.split(",")]
    names = tuple(dict.fromkeys(str(v) for v in value if str(v).strip()))
    if not names:
        raise ValueError(f"the grid needs at least one {what}")
    return names


def _tasks_of(models: tuple[str, ...], tasks: TasksLike) -> dict[str, tuple[str, ...]]:
    """Each model's task names: the same list for every model, or a mapping model -> tasks."""
    if isinstance(tasks, Mapping):
        extra = [m for m in tasks if m not in models]
        missing = [m for m in models if m not in tasks]
        if extra or missing:
            raise ValueError(f"tasks per model must name exactly the grid's models (missing: {missing}, extra: {extra})")
        return {m: _names(tasks[m], "task", PAPER_TASKS) for m in models}
    names = _names(tasks, "task", PAPER_TASKS)
    return {m: names for m in models}


def make_plan(
    models: ModelsLike,
    tasks: TasksLike,
    out: Union[str, Path],
    *,
    config: Optional[SearchConfig] = None,
    settings: Optional[ExecutionSettings] = None,
    options: Optional[Mapping[str, Any]] = None,
    task_overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> GridPlan:
    """A checked :class:`GridPlan`: ``models`` (``"paper"``, ``"a,b"`` or a list), ``tasks`` (the
    same for every model, or a mapping model -> tasks), ``options`` any field of
    :class:`~cel_lens.config.SearchConfig` / :class:`~cel_lens.config.ExecutionSettings` or a task
    option; ``task_overrides`` task -> options of that task alone (:func:`check_task_overrides`).
    Raises before anything is loaded: unknown task, bad option, two pairs in one directory, a
    backend that cannot run."""
    config, settings, task_options = split_options(options or {}, config, settings)
    model_names = _names(models, "model", PAPER_MODEL_NAMES)
    per_model = _tasks_of(model_names, tasks)
    known = set(available_tasks())
    unknown = sorted({t for ts in per_model.values() for t in ts} - known)
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(unknown)}; available: {', '.join(sorted(known))}")
    all_tasks = list(dict.fromkeys(t for ts in per_model.values() for t in ts))
    overrides = check_task_overrides(task_overrides or {}, all_tasks)
    plan = GridPlan(Path(out), model_names, per_model, config, settings, task_options, overrides)
    dirs: dict[str, Pair] = {}
    for pair in plan.pairs:
        if pair.name in dirs:
            raise ValueError(f"{dirs[pair.name]} and {pair} would share the run directory {pair.name}; rename one")
        dirs[pair.name] = pair
    get_backend(settings.backend)  # e.g. Ray missing: one error before any model is loaded
    return plan

"""What a grid loads once and shares: each task (for every model that runs it) and each model (for
all of its tasks and its side effects), with the time loading takes counted in ``grid.json``."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any, Optional

import torch

from cel_lens.backends.base import backend_class
from cel_lens.grids.grid_plan import GridPlan
from cel_lens.grids.state import GridState
from cel_lens.model.load import load_model
from cel_lens.sandbox import check_allowed
from cel_lens.tasks.base import Task
from cel_lens.tasks.registry import load_task, task_info

__all__ = ["TaskCache", "ModelSession", "describe_error", "needs_code_execution"]


def describe_error(err: BaseException) -> str:
    """One line for a table row: the exception's type and the first line of its message."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def needs_code_execution(task_name: str) -> bool:
    """Whether a task is scored by running model-written code (``pass@1``, e.g. MBPP)."""
    return task_info(task_name).get("metric") == "pass@1"


class TaskCache:
    """Loads each task of a plan once, on first use (timed in ``grid.json``); remembers why one
    cannot run."""

    def __init__(self, plan: GridPlan, state: GridState) -> None:
        self.plan = plan
        self.state = state
        self._tasks: dict[str, Task] = {}
        self._problems: dict[str, str] = {}
        self._lock = threading.RLock()  # pairs searched at once share the cache

    def problem(self, name: str) -> Optional[str]:
        """Why ``name`` cannot run (code execution not allowed, a loading error), or ``None``;
        checked before any model is loaded for it."""
        with self._lock:
            if name not in self._problems and name not in self._tasks:
                try:
                    if needs_code_execution(name):
                        check_allowed()
                    self.get(name)
                except Exception as err:  # a task that cannot load fails its pairs, not the grid
                    self._problems[name] = describe_error(err)
            return self._problems.get(name)

    def get(self, name: str) -> Task:
        """The task, loaded with the plan's split sizes, data directory, seed, chat-template choice,
        (for generation tasks) generation budget and the task's own overrides."""
        with self._lock:
            if name not in self._tasks:
                opts = self.plan.options_for(name)
                t0 = time.perf_counter()
                try:
                    self._tasks[name] = load_task(name, seed=self.plan.config.task_seed, **opts)
                finally:
                    self.state.add_time(f"load task/{name}", time.perf_counter() - t0)
            return self._tasks[name]


class ModelSession:
    """One model of the grid, loaded at most once (on first need) for all its pairs and side
    effects. With the local backend the model is loaded here and handed to every search; with Ray
    the name is handed on and each search's actors load their replicas."""

    def __init__(self, name: str, plan: GridPlan, state: GridState) -> None:
        self.name = name
        self.plan = plan
        self.state = state
        self._model: Any = None
        self._error: Optional[BaseException] = None

    @property
    def loaded(self) -> bool:
        """Whether the model object is in memory."""
        return self._model is not None

    def get(self) -> Any:
        """The model (loaded now if needed), or its name for a backend whose workers load it.
        A failed load raises again on every call without retrying."""
        if not backend_class(self.plan.settings.backend).in_process:
            return self.name
        if self._error is not None:
            raise self._error
        if self._model is None:
            s = self.plan.settings
            t0 = time.perf_counter()
            try:
                self._model = load_model(self.name, **s.load_options())
            except Exception as err:
                self._error = err
                raise
            finally:
                self.state.add_time(f"load model/{self.name}", time.perf_counter() - t0)
        return self._model

    def release(self) -> None:
        """Drop the model (and the accelerator's cached memory) before the next model loads."""
        self._model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

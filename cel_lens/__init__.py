"""cel_lens: Capability Enhancement Localization with TransformerLens.

Find a sparse set of attention heads whose zero-ablation raises a model's held-out accuracy
on a task: score single heads on a discovery split, evaluate joint ablations of small subsets
of the best candidates, keep the best on discovery, and report its gain on a disjoint test split
with a paired confidence interval, a McNemar p-value and a random-subset null.

Public names are imported lazily, so ``import cel_lens`` and the CLI start fast. The packages, in
the order data flows through them: :mod:`~cel_lens.model` and :mod:`~cel_lens.tasks` ->
:mod:`~cel_lens.evaluation` -> :mod:`~cel_lens.scoring` -> :mod:`~cel_lens.selection` ->
:mod:`~cel_lens.runs` -> :mod:`~cel_lens.backends` -> :mod:`~cel_lens.pipeline` ->
:mod:`~cel_lens.report` / :mod:`~cel_lens.analysis`.
"""

from __future__ import annotations

import importlib
from typing import Any

from cel_lens.version import __version__  # noqa: F401 - public

# public name -> module that defines it: the front door; everything else lives in its subpackage
# (cl.model.ablation_hooks, cl.analysis.flipped_examples, cl.report.plot_flips, cl.runs.verify_export, ...)
_LAZY: dict[str, str] = {
    "load_model": "cel_lens.model",
    "load_task": "cel_lens.tasks",
    "HeadSet": "cel_lens.heads",
    "ablate": "cel_lens.model",
    "run_variants": "cel_lens.model",
    "evaluate": "cel_lens.evaluation",
    "plan": "cel_lens.pipeline",
    "search": "cel_lens.pipeline",
    "SearchConfig": "cel_lens.pipeline",
    "ExecutionSettings": "cel_lens.pipeline",
    "QUICK": "cel_lens.config",
    "load_run": "cel_lens.runs",
    "grid": "cel_lens.grids",
    "export_model": "cel_lens.runs.export",
    "plot_gain_heatmap": "cel_lens.report",
    "plot_attention": "cel_lens.analysis",
    "explore": "cel_lens.analysis",
}

_SUBMODULES = {
    "heads", "stats", "oracle", "progress", "splits", "model", "sandbox", "tasks", "evaluation", "scoring", "testing",
    "selection", "runs", "backends", "pipeline", "report", "analysis", "organism", "theory", "grids", "cli",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"cel_lens.{name}")
    raise AttributeError(f"module 'cel_lens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)

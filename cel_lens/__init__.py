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

# public name -> module that defines it
_LAZY: dict[str, str] = {
    # heads and models
    "Head": "cel_lens.heads",
    "HeadSet": "cel_lens.heads",
    "load_model": "cel_lens.model",
    "PAPER_MODELS": "cel_lens.model",
    "ablate": "cel_lens.model",
    "ablation_hooks": "cel_lens.model",
    "run_variants": "cel_lens.model",
    # tasks and evaluation
    "load_task": "cel_lens.tasks",
    "Task": "cel_lens.tasks",
    "Example": "cel_lens.tasks",
    "Split": "cel_lens.tasks",
    "evaluate": "cel_lens.evaluation",
    "EvalResult": "cel_lens.evaluation",
    "ActivationStore": "cel_lens.evaluation",
    # the search
    "Oracle": "cel_lens.oracle",
    "score_heads": "cel_lens.scoring",
    "run_search": "cel_lens.selection",
    "Result": "cel_lens.selection",
    "search": "cel_lens.pipeline",
    "plan": "cel_lens.pipeline",
    "QUICK": "cel_lens.config",
    "grid": "cel_lens.grids",
    "Run": "cel_lens.pipeline",
    "SearchConfig": "cel_lens.pipeline",
    "ExecutionSettings": "cel_lens.pipeline",
    "RunDir": "cel_lens.runs",
    "RecordingOracle": "cel_lens.runs",
    "CachedOracle": "cel_lens.runs",
    "load_run": "cel_lens.runs",
    "RunRecord": "cel_lens.runs",
    "export_model": "cel_lens.runs.export",
    "verify_export": "cel_lens.runs.export",
    "RayOracle": "cel_lens.backends.ray",
    "SyntheticOracle": "cel_lens.testing",
    # statistics
    "paired_bootstrap_ci": "cel_lens.stats",
    "mcnemar_exact": "cel_lens.stats",
    # figures and what runs a model for them
    "plot_gain_heatmap": "cel_lens.report",
    "plot_discovery_vs_test": "cel_lens.report",
    "plot_side_effects": "cel_lens.report",
    "plot_flips": "cel_lens.report",
    "plot_compare": "cel_lens.report",
    "compare_runs": "cel_lens.report",
    "plot_attention": "cel_lens.analysis",
    "attention_patterns": "cel_lens.analysis",
    "side_effect_matrix": "cel_lens.analysis",
    "flipped_examples": "cel_lens.analysis",
    # theory and the model organism
    "theory_table": "cel_lens.theory",
    "load_organism": "cel_lens.organism",
}

_SUBMODULES = {
    "heads", "stats", "oracle", "progress", "model", "sandbox", "tasks", "evaluation", "scoring", "testing",
    "selection", "runs", "backends", "pipeline", "report", "analysis", "organism", "theory", "grids", "cli",
}
# old module paths, kept for one release (importing one warns)
_DEPRECATED = {"models", "ablation", "store", "plots", "distributed", "organism_train", "demo", "export"}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES or name in _DEPRECATED:
        return importlib.import_module(f"cel_lens.{name}")
    raise AttributeError(f"module 'cel_lens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)

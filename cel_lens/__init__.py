"""cel_lens: Capability Enhancement Localization with TransformerLens.

Find a sparse set of attention heads whose zero-ablation raises a model's held-out accuracy
on a task: score single heads on a discovery split, evaluate joint ablations of small subsets
of the best candidates, keep the best on discovery, and report its gain on a disjoint test split
with a paired confidence interval, a McNemar p-value and a random-subset null.

Public names are imported lazily, so ``import cel_lens`` and the CLI start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    # heads / ablation
    "Head": "cel_lens.heads",
    "HeadSet": "cel_lens.heads",
    "ablate": "cel_lens.ablation",
    "ablation_hooks": "cel_lens.ablation",
    "run_variants": "cel_lens.ablation",
    # models
    "load_model": "cel_lens.models",
    "PAPER_MODELS": "cel_lens.models",
    # tasks and evaluation
    "load_task": "cel_lens.tasks",
    "Task": "cel_lens.tasks",
    "Example": "cel_lens.tasks",
    "Split": "cel_lens.tasks",
    "evaluate": "cel_lens.evaluate",
    "ActivationStore": "cel_lens.store",
    # search, statistics, runs
    "score_heads": "cel_lens.scoring",
    "Result": "cel_lens.search",
    "Run": "cel_lens.pipeline",
    "load_run": "cel_lens.runs",
    "run_search": "cel_lens.search",
    "Oracle": "cel_lens.search",
    "SyntheticOracle": "cel_lens.search",
    "RunDir": "cel_lens.runs",
    "CachedOracle": "cel_lens.runs",
    "paired_bootstrap_ci": "cel_lens.stats",
    "mcnemar_exact": "cel_lens.stats",
    # figures
    "plot_gain_heatmap": "cel_lens.plots",
    "plot_discovery_vs_test": "cel_lens.plots",
    "plot_attention": "cel_lens.plots",
    "plot_side_effects": "cel_lens.plots",
    "side_effect_matrix": "cel_lens.plots",
    # theory and the model organism
    "theory_table": "cel_lens.theory",
    "load_organism": "cel_lens.organism",
    # distributed scans
    "RayOracle": "cel_lens.distributed",
}

_SUBMODULES = {
    "heads", "ablation", "models", "tasks", "evaluate", "store", "scoring", "stats", "runs",
    "plots", "theory", "organism", "sandbox", "pipeline", "distributed", "demo", "export",
    # ``cel_lens.search`` is the module *and* callable: ``cel_lens.search(model, task, ...)`` runs
    # :func:`cel_lens.pipeline.search` (see the end of cel_lens/search.py).
    "search",
}

__all__ = sorted([*_LAZY, "search"])


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

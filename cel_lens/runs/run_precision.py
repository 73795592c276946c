"""A search's compute precision (:mod:`cel_lens.evaluation.precision`) as its run records it: set
on the oracle's model (or a Ray oracle's replicas) for the search, said in one line, restored
after it, and written into the run directory's manifest with the recompute tally."""

from __future__ import annotations

import json
from typing import Any, Optional

from cel_lens.config import SearchConfig
from cel_lens.evaluation.encode import precision_kind, split_answer_type
from cel_lens.evaluation.precision import precision_line, recompute_summary, resolve_precision, restore_precision, use_precision
from cel_lens.evaluation.precision_probe import probe_record
from cel_lens.progress import info_stream
from cel_lens.runs.journal_io import write_json_atomic
from cel_lens.runs.run_dir import RunDir
from cel_lens.tasks.base import Task

__all__ = ["PRECISION_RECORD", "search_precision_kind", "use_search_precision", "restore_search_precision", "record_precision"]


PRECISION_RECORD = "precision"
"""The manifest's entry, added when the search ends: the precision computed in and, per split, the
decisions made in bf16 and the share recomputed in float32 (this process's; a local backend's)."""


def search_precision_kind(oracle: Any, task: Task) -> str:
    """What ``precision="auto"`` decides by for ``task`` (:func:`~cel_lens.evaluation.encode.precision_kind`;
    without a local model, e.g. a Ray oracle, the answer type)."""
    model = getattr(oracle, "model", None)
    return precision_kind(model, task.dist) if model is not None else split_answer_type(task.dist)


def use_search_precision(oracle: Any, config: SearchConfig, show: bool, kind: Optional[str] = None) -> Optional[str]:
    """Make ``config.precision`` the oracle's model's (a local backend's), and say it in one line;
    the choice it replaced, for :func:`restore_search_precision` when the search ends."""
    model = getattr(oracle, "model", None)
    if model is None:
        if hasattr(oracle, "use_precision"):  # a Ray oracle: every replica evaluates in it
            oracle.use_precision(config.precision)
        return None
    previous = use_precision(model, config.precision)
    if show:
        print(precision_line(model, config.precision, kind), file=info_stream(), flush=True)
    return previous


def restore_search_precision(oracle: Any, previous: Optional[str]) -> None:
    """The model's precision as it was before the search (a later ``evaluate`` is not run in the search's)."""
    model = getattr(oracle, "model", None)
    if model is not None:
        restore_precision(model, previous)


def record_precision(run_dir: RunDir, manifest: dict[str, Any], oracle: Any, config: SearchConfig, task: Task) -> dict[str, Any]:
    """``manifest`` with its :data:`PRECISION_RECORD` entry, also written into the run directory's
    manifest (which a reopened run ignores when it compares manifests)."""
    model = getattr(oracle, "model", None)
    if model is not None:
        record = {"option": config.precision, "compute": resolve_precision(config.precision, model, search_precision_kind(oracle, task)),
                  "recomputed": recompute_summary(model)}
        if probe_record(model) is not None:  # what "auto" chose by
            record["probe"] = probe_record(model)
    elif hasattr(oracle, "precision_record"):  # a Ray oracle: its replicas' summed tally
        record = {"option": config.precision, **oracle.precision_record(split_answer_type(task.dist))}
    else:
        return manifest
    try:
        current = json.loads(run_dir.manifest_path.read_text())
        write_json_atomic(run_dir.manifest_path, {**current, PRECISION_RECORD: record})
    except (OSError, ValueError):
        pass  # a read-only run directory: the returned manifest still says it
    return {**manifest, PRECISION_RECORD: record}

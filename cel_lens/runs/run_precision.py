"""A search's compute precision (:mod:`cel_lens.evaluation.precision`) as its run records it: said
in one line when the search starts, and written into the run directory's manifest with the
recompute tally of the search's own evaluation context when it ends."""

from __future__ import annotations

import json
from typing import Any

from cel_lens.config import SearchConfig
from cel_lens.evaluation.encode import precision_kind, split_answer_type
from cel_lens.evaluation.precision import precision_line
from cel_lens.progress import info_stream
from cel_lens.runs.journal_io import write_json_atomic
from cel_lens.runs.run_dir import RunDir
from cel_lens.tasks.base import Task

__all__ = ["PRECISION_RECORD", "search_precision_kind", "show_search_precision", "record_precision"]


PRECISION_RECORD = "precision"
"""The manifest's entry, added when the search ends: the precision computed in and, per split, the
decisions made in bf16 and the share recomputed in float32 (the search's own evaluations)."""


def search_precision_kind(oracle: Any, task: Task) -> str:
    """What ``precision="auto"`` decides by for ``task`` (:func:`~cel_lens.evaluation.encode.precision_kind`;
    without a local model, e.g. a Ray oracle, the answer type)."""
    model = oracle.local_model()
    return precision_kind(model, task.dist) if model is not None else split_answer_type(task.dist)


def show_search_precision(oracle: Any, task: Task) -> None:
    """Say in one line what precision the oracle's evaluations compute in, and why (a local model's)."""
    model = oracle.local_model()
    if model is not None:
        print(precision_line(model, oracle.context.precision, search_precision_kind(oracle, task)),
              file=info_stream(), flush=True)


def record_precision(run_dir: RunDir, manifest: dict[str, Any], oracle: Any, config: SearchConfig, task: Task) -> dict[str, Any]:
    """``manifest`` with its :data:`PRECISION_RECORD` entry (the option, and the oracle's
    :meth:`precision_record`), also written into the run directory's manifest (which a reopened run
    ignores when it compares manifests)."""
    record = {"option": config.precision, **oracle.precision_record(search_precision_kind(oracle, task))}
    try:
        current = json.loads(run_dir.manifest_path.read_text())
        write_json_atomic(run_dir.manifest_path, {**current, PRECISION_RECORD: record})
    except (OSError, ValueError):
        pass  # a read-only run directory: the returned manifest still says it
    return {**manifest, PRECISION_RECORD: record}

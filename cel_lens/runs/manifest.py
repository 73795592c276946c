"""A run's manifest: what was asked (model, task, splits, options, versions), and where it lives."""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from cel_lens.model.identity import model_manifest
from cel_lens.tasks.base import FORMER_NAMES, Task, current_names
from cel_lens.tasks.registry import load_task, loaded_splits, loader_options
from cel_lens.version import __version__

__all__ = [
    "EXAMPLES", "TASK_RENAMED", "build_manifest", "example_record", "default_run_dir", "package_versions", "rebuild_task",
    "upgrade_manifest", "code_version",
]

EXAMPLES = "examples"
"""The manifest's entry naming the evaluated examples (:func:`example_record`). It is derived from
the splits, whose content hashes a run directory compares, so a reopened run ignores it (runs
recorded before it existed resume)."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "model"


def _version(distribution: str) -> Any:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return None


TASK_RENAMED = FORMER_NAMES
"""Former key -> current key of a manifest's ``task`` entry (:data:`cel_lens.tasks.base.FORMER_NAMES`).
Manifests written before the rename say ``kind``: they are read with the current key
(:func:`upgrade_manifest`, as a run directory and :func:`~cel_lens.runs.load_run` read them), and a
run directory's name is still digested from the former spelling (:func:`default_run_dir`), so a
command maps to the directory it always did."""


def upgrade_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with its ``task`` entry's former keys (:data:`TASK_RENAMED`) under their
    current names; a manifest written with the current names comes back equal."""
    out = dict(manifest)
    if isinstance(out.get("task"), Mapping):
        out["task"] = current_names(out["task"])
    return out


def package_versions() -> dict[str, Any]:
    """Versions of Python and the packages whose behaviour a run's numbers depend on, and the code
    version of cel_lens itself (:func:`code_version`)."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformer_lens": _version("transformer-lens"),
        "transformers": _version("transformers"),
        "cel_lens_code": code_version(),
    }


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """Which code produced a run: ``source_sha256``, SHA-256 over the package's ``.py`` files (path
    and bytes, in path order: the version number alone does not change with each commit), and, in a
    git checkout, ``commit`` (HEAD) and ``dirty`` (uncommitted changes under the package). Once per
    process."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    out: dict[str, Any] = {"source_sha256": digest.hexdigest()}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            status = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=root, capture_output=True, text=True,
                                    timeout=10)
            out.update(commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))
    except (OSError, subprocess.TimeoutExpired):  # pragma: no cover - no git here
        pass
    return out


def _source(record: Mapping[str, Any]) -> dict[str, Any]:
    """Where a task's rows came from, in short: a file's path and sha256, or a hub dataset."""
    keys = ("path", "sha256", "official") if record.get("kind") == "file" else ("hub_id", "config", "hub_split", "fingerprint")
    return {k: record.get(k) for k in keys if k in record}


def example_record(task: Task) -> dict[str, Any]:
    """What a run evaluated, by name: each split's example ids in order (a split may hold fewer
    examples than its loader drew: a Task cut before the search), and the files (path and sha256)
    or hub datasets the rows came from. With the loader's options it rebuilds the splits exactly
    (:func:`rebuild_task`) and finds the rows in the files without cel_lens."""
    return {
        **{name: {"ids": task.split(name).ids} for name in ("dist", "test")},
        "sources": [_source(s) for s in task.options.get("sources") or [] if isinstance(s, Mapping)],
    }


def build_manifest(model: Any, task: Task, options: Mapping[str, Any], *, examples: bool = False) -> dict[str, Any]:
    """The run manifest: versions, model id and weights hash, task and split content hashes,
    and every option (a rerun with a different configuration is refused by
    :class:`~cel_lens.runs.RunDir`). ``model`` is the model, or its
    :func:`~cel_lens.model.model_manifest` entry. ``examples``: add the :data:`EXAMPLES` entry
    (:func:`example_record`), as a search's run directory has."""
    manifest = {
        "cel_lens": __version__,
        "versions": package_versions(),
        "model": dict(model) if isinstance(model, dict) else model_manifest(model),
        "task": {"name": task.name, "answer_type": task.answer_type, "metric": task.metric, "options": dict(task.options)},
        "splits": {
            name: {"n": len(task.split(name)), "content_sha256": task.split(name).content_hash}
            for name in ("dist", "test")
        },
        "options": dict(options),
    }
    if examples:
        manifest[EXAMPLES] = example_record(task)
    return manifest


def default_run_dir(manifest: Mapping[str, Any], root: Union[str, Path] = "runs") -> Path:
    """``runs/<model>__<task>__<config hash>``: the same command maps to the same directory, so a
    rerun resumes; a different configuration gets its own directory."""
    core = {k: manifest[k] for k in ("model", "task", "splits", "options")}
    former = {new: old for old, new in TASK_RENAMED.items()}
    core["task"] = {former.get(k, k): v for k, v in core["task"].items()}  # the digest of the former spelling
    digest = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return Path(root) / f"{_slug(manifest['model']['id'])}__{_slug(manifest['task']['name'])}__{digest}"


def _pick(split: Any, ids: Optional[Sequence[str]], n: Optional[int]) -> Any:
    """``split`` narrowed to what a run evaluated: its examples ``ids`` in that order, else (older
    manifests) its first ``n`` (how a search cuts a Task); ``ValueError`` names a missing id."""
    if ids is not None:
        if list(ids) == split.ids:
            return split
        by_id = {e.id: e for e in split}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"{len(missing)} of the run's {split.name} examples are not in the split loaded again "
                             f"(first: {missing[0]}): give the run's data directory (--data-dir) or task")
        return replace(split, examples=tuple(by_id[i] for i in ids))
    return split.subset(n) if n is not None and n < len(split) else split


def rebuild_task(manifest: Mapping[str, Any], data_dir: Optional[str] = None, splits: Sequence[str] = ("dist", "test")) -> Task:
    """The task a run evaluated, from its manifest: loaded again (from ``data_dir``, else where
    the task finds its files) with every loader option recorded, at the sizes its loader drew
    (``task.options``' ``n_dist``/``n_test``), then each split narrowed to the examples the run
    evaluated (:data:`EXAMPLES`' ids; manifests without them: the first ``splits.<name>.n``). A run
    on a cut Task (48 of 200 examples) rebuilds to those 48, not to a fresh draw of 48."""
    info = manifest.get("task") or {}
    name, recorded = info.get("name"), dict(info.get("options") or {})
    recorded.setdefault("seed", (manifest.get("options") or {}).get("seed", 0))  # manifests that predate it
    sizes = {k: (manifest.get("splits") or {}).get(k[2:], {}).get("n") for k in ("n_dist", "n_test")}
    drawn = {k: recorded.get(k) if isinstance(recorded.get(k), int) else sizes[k] for k in sizes}
    task = load_task(name, **drawn, data_dir=data_dir, splits=splits, **loader_options(name, recorded))
    picked = {}
    for split in loaded_splits(task):
        ids = ((manifest.get(EXAMPLES) or {}).get(split) or {}).get("ids")
        picked[split] = _pick(task.split(split), ids, sizes[f"n_{split}"])
    return replace(task, **picked)

"""A run's manifest: what was asked (model, task, splits, options, versions), and where it lives."""

from __future__ import annotations

import hashlib
import json
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Union

import torch

from cel_lens.model.identity import model_manifest
from cel_lens.tasks.base import Task
from cel_lens.version import __version__

__all__ = ["build_manifest", "default_run_dir", "package_versions"]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "model"


def _version(distribution: str) -> Any:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return None


def package_versions() -> dict[str, Any]:
    """Versions of Python and the packages whose behaviour a run's numbers depend on."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformer_lens": _version("transformer-lens"),
        "transformers": _version("transformers"),
    }


def build_manifest(model: Any, task: Task, options: Mapping[str, Any]) -> dict[str, Any]:
    """The run manifest: versions, model id and weights hash, task and split content hashes,
    and every option (a rerun with a different configuration is refused by
    :class:`~cel_lens.runs.RunDir`). ``model`` is the model, or its
    :func:`~cel_lens.model.model_manifest` entry."""
    return {
        "cel_lens": __version__,
        "versions": package_versions(),
        "model": dict(model) if isinstance(model, dict) else model_manifest(model),
        "task": {"name": task.name, "kind": task.kind, "metric": task.metric, "options": dict(task.options)},
        "splits": {
            name: {"n": len(task.split(name)), "content_sha256": task.split(name).content_hash}
            for name in ("dist", "test")
        },
        "options": dict(options),
    }


def default_run_dir(manifest: Mapping[str, Any], root: Union[str, Path] = "runs") -> Path:
    """``runs/<model>__<task>__<config hash>``: the same command maps to the same directory, so a
    rerun resumes; a different configuration gets its own directory."""
    core = {k: manifest[k] for k in ("model", "task", "splits", "options")}
    digest = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return Path(root) / f"{_slug(manifest['model']['id'])}__{_slug(manifest['task']['name'])}__{digest}"

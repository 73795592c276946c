"""Model sources: where a model name leads, as a table of strings imported only when used.

Each entry of :data:`MODEL_SOURCES` (a :class:`~cel_lens.registry.Registry`) is ``"module:function"``; the function takes the name (text
and the object given) and the hub options, and returns a :class:`Resolved` checkpoint, or ``None``
when the name is not of its kind. They are tried in the table's order: a built-in name, a planted
variant (:mod:`cel_lens.model.planted_cache`), a GGUF file, a local directory, a hub id or TransformerLens alias (with the GGUF fallback of
:mod:`cel_lens.model.gguf` when offline). Short names are rewritten first (the one table of
known names is :data:`~cel_lens.model.registry.MODELS`). Adding a source = one function + one
table line; :func:`resolve_source` and
:func:`source_kinds` read the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from cel_lens.model.registry import known_model
from cel_lens.registry import Registry

__all__ = ["Resolved", "MODEL_SOURCES", "resolve_source", "source_kinds", "canonical_name"]


@dataclass(frozen=True)
class Resolved:
    """A checkpoint directory to load, the id to record (hub id, path or built-in name), the
    TransformerLens official name when it has one, and which source found it."""

    path: Path
    id: str
    official: Optional[str]
    kind: str


MODEL_SOURCES: Registry = Registry("model source", {
    "builtin": "cel_lens.model.hub:builtin_source",
    "planted": "cel_lens.model.planted_cache:planted_source",
    "gguf": "cel_lens.model.gguf:gguf_file_source",
    "directory": "cel_lens.model.hub:directory_source",
    "hub": "cel_lens.model.hub:hub_source",
})
"""Source kind -> ``"module:function"``, tried in this order by :func:`resolve_source`."""

SourceFn = Callable[..., Optional[Resolved]]


def source_kinds() -> list[str]:
    """The source kinds, in the order they are tried."""
    return list(MODEL_SOURCES)


def canonical_name(name_or_path: Union[str, os.PathLike]) -> Union[str, os.PathLike]:
    """``name_or_path`` with a short name (an entry of :data:`~cel_lens.model.registry.MODELS`
    that stands for a hub id, in any case) replaced by that hub id."""
    entry = known_model(name_or_path) if isinstance(name_or_path, str) else None
    return entry.hub_id if entry is not None and entry.hub_id is not None else name_or_path


def resolve_source(name_or_path: Union[str, os.PathLike], **hub: Any) -> Resolved:
    """The checkpoint a model name leads to (see the module docstring); ``hub`` holds ``token``,
    ``local_files_only`` and ``revision``. An unknown name is one line naming what was tried."""
    name_or_path = canonical_name(name_or_path)
    text = os.fspath(name_or_path).strip()
    if not text:
        raise ValueError("empty model name")
    for kind in MODEL_SOURCES:
        found = MODEL_SOURCES.resolve(kind)(text, name_or_path, **hub)
        if found is not None:
            return found
    raise ValueError(
        f"unknown model {text!r}: not a built-in name, a GGUF file, a local checkpoint directory, a name "
        "TransformerLens knows, or a Hugging Face hub id (owner/name); `cel-lens models` lists the known models"
    )

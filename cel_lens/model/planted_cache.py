"""Planted variants of a model: a few heads' own parameters replaced, cached by content hash.

A *planted* model is a checkpoint whose listed tensors differ from a base checkpoint's in named
slices only (a head's query rows, its output-projection columns) and whose every other tensor is the
base's, bit for bit. :func:`write_planted` saves one under ``<cache>/planted/<content hash>/``
(:func:`tensors_hash` over every tensor's name, shape, dtype and bytes, so the same weights built
twice land in the same folder and a different build never overwrites it) and points the model name
``<base id>+plant:<kind>`` at it. :func:`planted_source` (the model source ``"planted"``) resolves
that name, so ``load_model("smollm2-135m+plant:capability")`` loads the cached build; the planted
weights are never committed, only the command that builds them (``cel-lens plant``,
:mod:`cel_lens.plant`). The folder's :data:`PLANT_MARKER` holds the recipe, which run manifests
record under the model's ``plant`` entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import torch

from cel_lens.model.gguf import cache_root
from cel_lens.model.sources import Resolved, canonical_name

__all__ = ["PLANT_SEPARATOR", "PLANT_MARKER", "WEIGHTS_FILE", "planted_name", "split_planted_name", "planted_root",
           "tensors_hash", "read_tensors", "write_planted", "planted_from", "planted_folder", "planted_source"]

PLANT_SEPARATOR = "+plant:"
"""What joins a base model's name and a plant kind: ``"smollm2-135m+plant:capability"``."""
PLANT_MARKER = "cel_lens_plant.json"
"""Written last into a planted folder: base, recipe, content hash and the tensors changed."""
WEIGHTS_FILE = "model.safetensors"
"""The one weights file a planted folder holds (the base's, with the planted slices replaced)."""


def split_planted_name(text: str) -> Optional[tuple[str, str]]:
    """``(base name, kind)`` of a planted model name, ``None`` for any other name."""
    if PLANT_SEPARATOR not in text:
        return None
    base, kind = text.rsplit(PLANT_SEPARATOR, 1)
    if not base.strip() or not re.fullmatch(r"[A-Za-z0-9_.-]+", kind):
        raise ValueError(f"bad planted model name {text!r}: expected '<base model>{PLANT_SEPARATOR}<kind>'")
    return base.strip(), kind


def planted_name(base: str, kind: str) -> str:
    """The name of ``base``'s ``kind`` plant, with the base's short alias replaced by its hub id."""
    return f"{canonical_name(base)}{PLANT_SEPARATOR}{kind}"


def planted_root(cache: Optional[Union[str, os.PathLike]] = None) -> Path:
    """Where planted builds live: ``<cache>/planted`` (``cache`` defaults to :func:`cache_root`)."""
    return (Path(cache).expanduser() if cache is not None else cache_root()) / "planted"


def _index_file(root: Path, name: str) -> Path:
    return root / "names" / (re.sub(r"[^A-Za-z0-9_.+-]+", "_", name) + ".json")


def tensors_hash(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor (sorted by name): name, shape, dtype and bytes; the planted folder's
    name, so equal weights give the same folder whatever built them."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def read_tensors(checkpoint: Union[str, os.PathLike]) -> dict[str, torch.Tensor]:
    """Every tensor of a one-file safetensors checkpoint directory (as stored, on the CPU)."""
    from safetensors.torch import load_file

    path = Path(checkpoint) / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint}: no {WEIGHTS_FILE} (a planted model needs a one-file checkpoint)")
    return load_file(str(path))


def write_planted(base_dir: Union[str, os.PathLike], name: str, tensors: Mapping[str, torch.Tensor],
                  recipe: Mapping[str, Any], cache: Optional[Union[str, os.PathLike]] = None) -> tuple[Path, str]:
    """Save ``tensors`` (the base's, some replaced) with the base folder's other files under
    ``<cache>/planted/<tensors_hash>/`` and point ``name`` at it; ``(folder, hash)``. A folder that
    already holds these weights is kept as it is (the marker's recipe included). Re-pointing a name
    at other weights warns: the seal's ledger matches a model on its name as well as its weights."""
    from safetensors.torch import save_file

    base_dir, root = Path(base_dir), planted_root(cache)
    digest = tensors_hash(tensors)
    target = root / digest
    if not (target / PLANT_MARKER).is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".planting-", dir=root))
        try:
            for f in sorted(base_dir.iterdir()):
                if f.is_file() and f.name not in (WEIGHTS_FILE, PLANT_MARKER):
                    shutil.copyfile(f, tmp / f.name)
            save_file({k: tensors[k].contiguous() for k in sorted(tensors)}, str(tmp / WEIGHTS_FILE),
                      metadata={"format": "pt"})
            marker = {"name": name, "base": str(base_dir), "tensors_sha256": digest, **dict(recipe)}
            (tmp / PLANT_MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
            shutil.rmtree(target, ignore_errors=True)  # an interrupted copy
            try:
                tmp.rename(target)
            except OSError:
                if not (target / PLANT_MARKER).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    index = _index_file(root, name)
    before = json.loads(index.read_text()).get("tensors_sha256") if index.is_file() else None
    if before is not None and before != digest:
        warnings.warn(f"{name} pointed at other weights ({before[:16]}), now at {digest[:16]}: the test-split ledger "
                      "matches a model on its name as well as its weights, so reads made under this name before count "
                      "against the seals of rows run on the new weights (docs/planted.md)", stacklevel=2)
    index.parent.mkdir(parents=True, exist_ok=True)
    own = {"name": name, "base": str(base_dir), "tensors_sha256": digest, **dict(recipe)}
    index.write_text(json.dumps({"name": name, "tensors_sha256": digest, "recipe": own}) + "\n", encoding="utf-8")
    return target, digest


def planted_from(directory: Union[str, os.PathLike], name: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The marker of a planted folder (:data:`PLANT_MARKER`), ``None`` for any other folder. With
    ``name`` (the planted name it was loaded by), the recipe that name was built with, where its
    index records one for these weights: two names can share one build's weights (each sized on its
    own rows), and the folder's marker holds the first build's recipe only."""
    folder = Path(os.fspath(directory))
    marker = folder / PLANT_MARKER
    if not marker.is_file():
        return None
    parts = split_planted_name(name) if name else None
    index = _index_file(folder.parent, planted_name(*parts)) if parts else None
    if index is not None and index.is_file():
        named = json.loads(index.read_text(encoding="utf-8"))
        if named.get("tensors_sha256") == folder.name and "recipe" in named:
            return named["recipe"]
    return json.loads(marker.read_text(encoding="utf-8"))


def planted_folder(name: str, cache: Optional[Union[str, os.PathLike]] = None) -> Optional[Path]:
    """The cached build the planted model ``name`` (``<base>+plant:<kind>``) points at, ``None`` when
    it was never built here (or its folder is incomplete)."""
    parts = split_planted_name(name)
    if parts is None:
        return None
    root = planted_root(cache)
    index = _index_file(root, planted_name(*parts))
    folder = root / json.loads(index.read_text())["tensors_sha256"] if index.is_file() else None
    return folder if folder is not None and (folder / PLANT_MARKER).is_file() else None


def planted_source(text: str, name_or_path: Any, **hub: Any) -> Optional[Resolved]:
    """Model source ``"planted"``: ``<base>+plant:<kind>``, the build its name points at in the
    cache; a name never built here is one line saying how to build it."""
    parts = split_planted_name(text) if isinstance(name_or_path, str) else None
    if parts is None:
        return None
    name = planted_name(*parts)
    folder = planted_folder(name)
    if folder is None:
        raise ValueError(f"{name} is not built in {planted_root()}: `cel-lens plant {parts[1]} --data-dir DIR` builds "
                         "the kinds it knows (docs/planted.md; it needs the base model and the task's data files)")
    return Resolved(folder, name, None, "planted")

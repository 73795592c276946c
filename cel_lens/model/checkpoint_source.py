"""What an export starts from: the checkpoint a model name, directory or loaded model came from.

A hub id exports from its cached snapshot (:func:`~cel_lens.model.hub.resolve_checkpoint`), a
directory from itself, ``"organism"`` from the shipped native checkpoint, and a model loaded by
:func:`~cel_lens.model.load_model` from the checkpoint it was loaded from
(:func:`~cel_lens.model.identity.source_info`), never from TransformerLens's converted weights. A
``HookedTransformer`` with no checkpoint behind it (built in memory) is first written as a native
checkpoint (:func:`~cel_lens.model.native.save_native`).

It also says how cel_lens encoded prompts for the model (``prepend_bos``: its BOS rule,
:mod:`cel_lens.model.bos`, resolved; ``n_ctx``: a TransformerLens config value the checkpoint
itself does not hold), so that an evaluator outside cel_lens can reproduce its decisions: from the
model when one is given, else derived from the checkpoint's tokenizer and ``config.json`` the way
:func:`~cel_lens.model.load_model` derives them, without loading weights.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

from cel_lens.model.bos import bos_rule, read_bos
from cel_lens.model.convert import quiet
from cel_lens.model.gguf import converted_from
from cel_lens.model.identity import source_info
from cel_lens.model.model_types import is_bridge
from cel_lens.model.load import _resolve_source
from cel_lens.model.native import NATIVE_KEY, is_native_checkpoint, save_native

__all__ = ["ExportSource", "export_source", "encoding_settings", "encoding_defaults"]

_SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")


@dataclass(frozen=True)
class ExportSource:
    """A checkpoint to export from: its directory, id (hub id, directory or built-in name), hub
    revision (commit of a cached snapshot, else ``None``), kind, and the prompt ``encoding``
    cel_lens uses for it (``prepend_bos``, ``n_ctx``, and where they came from)."""

    path: Path
    id: str
    revision: Optional[str]
    kind: Literal["hf", "native"]
    encoding: dict[str, Any] = field(default_factory=dict)
    gguf: Optional[dict[str, Any]] = None  # the GGUF file a converted checkpoint came from

    def as_dict(self) -> dict[str, Any]:
        """The provenance's ``source`` entry (with ``gguf``: file, sha256, quantization, when the
        checkpoint is a GGUF file's dequantization)."""
        entry: dict[str, Any] = {"id": self.id, "revision": self.revision}
        if self.gguf:
            entry["gguf"] = {k: self.gguf.get(k) for k in ("file", "sha256", "quantization", "dequantized_to")}
        return entry


def encoding_settings(model: Any) -> dict[str, Any]:
    """``prepend_bos`` (the model's BOS rule, resolved) and ``n_ctx`` (its ``cfg``) of a loaded model."""
    return {"prepend_bos": bool(bos_rule(model)["prepends_bos"]), "n_ctx": int(model.cfg.n_ctx), "from": "model"}


def _tokenizer_prepends_bos(path: Path) -> bool:
    """Whether the checkpoint's own tokenizer puts BOS first (the default BOS rule, ``"tokenizer"``)."""
    from transformers import AutoTokenizer

    folder = path / "tokenizer" if (path / "tokenizer").is_dir() else path
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return bool(read_bos(tokenizer)["tokenizer_adds_bos"])


def encoding_defaults(path: Path, official: Optional[str] = None) -> dict[str, Any]:
    """``prepend_bos`` and ``n_ctx`` as :func:`~cel_lens.model.load_model` would set them for the
    checkpoint at ``path``, without loading weights: BOS by the default rule (the checkpoint's
    tokenizer), ``n_ctx`` from TransformerLens's ``HookedTransformer`` config for a name it supports
    (``official``), its ``TransformerBridge`` architecture adapter otherwise."""
    prepend = _tokenizer_prepends_bos(path)
    if is_native_checkpoint(path):
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))[NATIVE_KEY]
        return {"prepend_bos": prepend, "n_ctx": int(cfg["n_ctx"]), "from": "native config"}
    if official is not None:
        from transformer_lens import loading_from_pretrained as loading

        try:
            with quiet():
                cfg = loading.get_pretrained_model_config(official)
            return {"prepend_bos": prepend, "n_ctx": int(cfg.n_ctx), "from": "HookedTransformer config"}
        except Exception:  # e.g. offline without that config cached: fall back to the bridge's derivation
            pass
    return {**_bridge_defaults(path), "prepend_bos": prepend}


def _bridge_defaults(path: Path) -> dict[str, Any]:
    """The TransformerBridge's encoding settings, from ``config.json`` (no weights are loaded)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.factories.architecture_adapter_factory import ArchitectureAdapterFactory
    from transformer_lens.model_bridge.sources.transformers import (
        determine_architecture_from_hf_config,
        map_default_transformer_lens_config,
    )
    from transformers import AutoConfig

    with quiet():
        hf_config = AutoConfig.from_pretrained(str(path), local_files_only=True)
        tl_config = map_default_transformer_lens_config(hf_config)
        bridge_config = TransformerBridgeConfig.from_dict(dict(tl_config.__dict__))
        bridge_config.architecture = determine_architecture_from_hf_config(hf_config)
        cfg = ArchitectureAdapterFactory.select_architecture_adapter(bridge_config).cfg
    return {"prepend_bos": bool(cfg.default_prepend_bos), "n_ctx": int(cfg.n_ctx), "from": "TransformerBridge config"}


def _revision(path: Path) -> Optional[str]:
    match = _SNAPSHOT.search(path.as_posix())
    return match.group(1) if match else None


def _from_name(name: Any, revision: Optional[str], token: Any, encoding: Optional[dict]) -> ExportSource:
    path, source_id, official = _resolve_source(name, token=token, local_files_only=None, revision=revision)
    kind: Literal["hf", "native"] = "native" if is_native_checkpoint(path) else "hf"
    encoding = encoding or encoding_defaults(path, official)
    return ExportSource(path, source_id, revision or _revision(path), kind, encoding, converted_from(path))


@contextlib.contextmanager
def export_source(source: Any, *, revision: Optional[str] = None, token: Any = None) -> Iterator[ExportSource]:
    """The :class:`ExportSource` of a hub id, a checkpoint directory, ``"organism"``, or a model
    (a context manager: a model built in memory is written to a temporary native checkpoint,
    removed on exit)."""
    if isinstance(source, (str, os.PathLike)):
        yield _from_name(source, revision, token, None)
        return
    info = source_info(source)
    if info is not None:
        yield _from_name(info["id"], revision, token, encoding_settings(source))
        return
    from transformer_lens import HookedTransformer

    if isinstance(source, HookedTransformer):
        with tempfile.TemporaryDirectory(prefix="cel_lens_export_") as tmp:
            path = save_native(source, Path(tmp) / "model")
            name = str(getattr(source.cfg, "model_name", "") or "HookedTransformer")
            yield ExportSource(path, f"{name} (in memory)", None, "native", encoding_settings(source))
        return
    name = getattr(source, "name_or_path", None) or getattr(getattr(source, "config", None), "_name_or_path", None)
    if name and not is_bridge(source):  # a transformers PreTrainedModel: its checkpoint
        yield _from_name(str(name), revision, token, None)
        return
    raise TypeError(
        f"cannot find the checkpoint of a {type(source).__name__}: pass a hub id, a checkpoint directory, "
        "or a model loaded with cel_lens.load_model"
    )

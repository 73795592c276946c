"""The paper's models and cel_lens's built-in model names.

:data:`PAPER_MODELS` holds the shape of each of the paper's three models (from its Hugging Face
``config.json``) and which TransformerLens class :func:`cel_lens.model.load_model` builds for it;
:data:`BUILTIN_MODELS` maps names that need no hub (the model organism) to shipped checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Optional

__all__ = ["ModelSpec", "PAPER_MODELS", "BUILTIN_MODELS", "ORGANISM_DIR", "PAPER_CONFIG_DIR", "paper_config",
           "tl_official_name"]

ORGANISM_DIR = Path(__file__).resolve().parents[1] / "data" / "organism"
"""Where the shipped model organism (weights, config, tokenizer, training log) lives."""

PAPER_CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "paper_configs"
"""The paper's models' published ``config.json`` fields, one file per model (``<name>.json``, the
hub id's second part): data only, no weights (:func:`paper_config`)."""

BUILTIN_MODELS: dict[str, Path] = {"organism": ORGANISM_DIR}
"""Model names :func:`cel_lens.model.load_model` resolves to shipped checkpoints (a local directory
of the same name is reached as ``./organism``)."""


@dataclass(frozen=True)
class ModelSpec:
    """Shape of one of the paper's models (from its Hugging Face ``config.json``) and how
    :func:`load_model` loads it (``"hooked"``: ``HookedTransformer``; ``"bridge"``:
    ``TransformerBridge``)."""

    hub_id: str
    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    total_heads: int
    loader: Literal["hooked", "bridge"]

    def __post_init__(self) -> None:
        if self.total_heads != self.n_layers * self.n_heads:
            raise ValueError(f"{self.hub_id}: total_heads {self.total_heads} != {self.n_layers} x {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.hub_id}: {self.n_heads} query heads not a multiple of {self.n_kv_heads} KV heads")

    @property
    def d_head(self) -> int:
        """Width of one head (``d_model / n_heads`` for these models)."""
        return self.d_model // self.n_heads

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (for JSON and the ``cel-lens models`` table)."""
        return asdict(self)


PAPER_MODELS: dict[str, ModelSpec] = {
    spec.hub_id: spec
    for spec in (
        ModelSpec("meta-llama/Llama-3.2-3B-Instruct", "llama", 28, 24, 8, 3072, 28 * 24, "hooked"),
        ModelSpec("Qwen/Qwen2.5-3B-Instruct", "qwen2", 36, 16, 2, 2048, 36 * 16, "hooked"),
        ModelSpec("HuggingFaceTB/SmolLM3-3B", "smollm3", 36, 16, 4, 2048, 36 * 16, "bridge"),
    )
}
"""The paper's three models by hub id: architecture, layers, heads, key/value heads, width, head count
and the loader used for each (``cel-lens models`` prints them)."""


def paper_config(hub_id: str) -> dict[str, Any]:
    """The published ``config.json`` of one of :data:`PAPER_MODELS` (as a dict, from
    :data:`PAPER_CONFIG_DIR`): what real-width rehearsal checkpoints and memory plans are built from.
    ``KeyError`` for a model that is not one of the paper's."""
    if hub_id not in PAPER_MODELS:
        raise KeyError(f"{hub_id!r} is not one of the paper's models ({', '.join(PAPER_MODELS)})")
    return json.loads((PAPER_CONFIG_DIR / f"{hub_id.split('/')[1]}.json").read_text(encoding="utf-8"))


def tl_official_name(name: str) -> Optional[str]:
    """The TransformerLens official name for ``name`` (a hub id or a TransformerLens alias), or
    ``None`` when ``HookedTransformer.from_pretrained`` does not know it."""
    from transformer_lens import loading_from_pretrained as loading

    return loading.make_model_alias_map().get(name.lower())

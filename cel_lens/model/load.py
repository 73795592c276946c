"""Loading models for head ablation, and the registry of the paper's models.

:func:`load_model` returns a model whose ``blocks.{l}.attn.hook_z`` holds, per query head, the exact
input slice of the attention output projection, so that zeroing it (see :mod:`cel_lens.model.ablation`)
removes that head's whole contribution and nothing else:

* names TransformerLens 3.x supports (``meta-llama/Llama-3.2-3B-Instruct``,
  ``Qwen/Qwen2.5-3B-Instruct``, their aliases, ...) load as a ``HookedTransformer`` through
  ``HookedTransformer.from_pretrained`` (TransformerLens's own config table and weight conversion);
* other Hugging Face hub ids (``HuggingFaceTB/SmolLM3-3B``) and local checkpoint directories load
  as a ``TransformerBridge`` (``TransformerBridge.boot_transformers``: the Hugging Face module runs
  its own forward, with TransformerLens hook names); ``loader="hooked"`` builds a
  ``HookedTransformer`` from a local directory whose architecture TransformerLens converts
  (Llama, Qwen2, ...), the same config derivation and weight conversion as ``from_pretrained``;
* a model object passes through (a Hugging Face ``PreTrainedModel`` is wrapped in a bridge).

Processing flags (``HookedTransformer``), all off by default, as ``from_pretrained_no_processing``:

``fold_value_biases=False`` (refused if True)
    Folding would set ``b_V = 0`` and add ``sum_h b_V[h] @ W_O[h]`` to ``b_O``. Qwen2 has a
    ``v_proj`` bias, so with folding a zeroed ``hook_z`` would leave that part of the head alive.
``refactor_factored_attn_matrices=False`` (refused if True)
    Rewrites ``W_V``/``W_O`` (and moves value biases) per head: ``hook_z`` would no longer be the
    o_proj input of the original model.
``fold_ln=False`` (allowed)
    For RMSNorm models folding only moves the norm gain into ``W_Q/W_K/W_V/W_in/W_gate/W_U``; the
    output projection's input is untouched, so ablation stays exact (the tests check ``fold_ln=True``
    too). Off by default so that every activation equals Hugging Face's, and because TransformerLens
    itself advises against folding in reduced precision.
``center_writing_weights=False`` (allowed)
    A no-op for RMSNorm models (TransformerLens only centers for LayerNorm); for LayerNorm models
    it keeps ablation exact only up to the mean direction, so it stays off.
``center_unembed=False`` (allowed)
    Shifts every logit of a position by the same constant: log-probabilities and argmax are
    unchanged, logits are not. Off so that logits equal Hugging Face's.

A ``TransformerBridge`` keeps the raw Hugging Face weights (``enable_compatibility_mode`` with
``no_processing=True``: TransformerLens hook semantics, no weight rewriting); ``hook_z`` there is
the input of ``o_proj`` reshaped to ``[batch, pos, head, d_head]``. Passing ``fold_ln=True`` or
``center_unembed=True`` to a bridge applies that processing (``fold_value_biases`` stays off).

Hub access happens in one place (:func:`resolve_checkpoint`): the checkpoint is found in the local
Hugging Face cache first, so a cached model loads with no network at all; otherwise it is
downloaded once. Every failure is one clear line: unknown name, gated model without a token,
offline without a cached copy, unreachable hub, a directory that is not a checkpoint.

Loading lives here; ablation hooks are in :mod:`cel_lens.model.ablation`.
"""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from cel_lens.config import LOADERS, canonical_dtype
from cel_lens.model.bos import check_bos_rule, read_bos, set_bos_rule
from cel_lens.model.convert import bridge_from_hf, hooked_from_hf, load_hf, load_tokenizer
from cel_lens.model.gguf import converted_from
from cel_lens.model.identity import tag_source
from cel_lens.model.model_types import is_bridge
from cel_lens.model.native import is_native_checkpoint, load_native
from cel_lens.model.planted_cache import planted_from
from cel_lens.model.processing import warn_if_processed
from cel_lens.model.sources import resolve_source

__all__ = ["Loader", "AUTO_LOADER", "HOOKED_LOADER", "BRIDGE_LOADER", "PROCESSING_DEFAULTS", "load_model",
           "resolve_dtype", "resolve_device"]


@dataclass(frozen=True)
class Loader:
    """How a model given by name is loaded (an entry of :data:`~cel_lens.config.LOADERS`):
    ``bridge``: as a ``TransformerBridge`` (else a ``HookedTransformer``); ``automatic``: chosen per
    model by :meth:`choose`."""

    name: str
    bridge: bool = False
    automatic: bool = False

    def choose(self, official: Optional[str]) -> "Loader":
        """The loader a model is loaded with: this one, or for the automatic one a HookedTransformer
        where TransformerLens supports the model (``official``, its TransformerLens name) and a
        TransformerBridge otherwise."""
        if not self.automatic:
            return self
        return HOOKED_LOADER if official is not None else BRIDGE_LOADER


AUTO_LOADER = Loader("auto", automatic=True)
"""HookedTransformer where TransformerLens supports the model, TransformerBridge otherwise."""
HOOKED_LOADER = Loader("hooked")
"""A ``HookedTransformer``."""
BRIDGE_LOADER = Loader("bridge", bridge=True)
"""A ``TransformerBridge`` (any Hugging Face causal LM)."""

# HookedTransformer processing flags used by load_model (see the module docstring for why).
PROCESSING_DEFAULTS: dict[str, bool] = {
    "fold_ln": False,
    "center_writing_weights": False,
    "center_unembed": False,
    "fold_value_biases": False,
    "refactor_factored_attn_matrices": False,
}
"""HookedTransformer processing flags ``load_model`` uses: none on, so that zeroing ``hook_z`` removes a
head exactly (folded value biases would leave each head's bias term in ``b_O``)."""
_INEXACT_FLAGS = ("fold_value_biases", "refactor_factored_attn_matrices")
def resolve_dtype(dtype: Union[str, torch.dtype, None]) -> torch.dtype:
    """The ``torch.dtype`` of a name (:data:`cel_lens.config.DTYPE_ALIASES`) or dtype; float32 for ``None``."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, canonical_dtype(dtype))


def resolve_device(device: Union[str, torch.device, None]) -> str:
    """``device`` as text; ``None`` means CUDA when available, else the CPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _processing(flags: dict[str, Any]) -> dict[str, bool]:
    """The processing flags with cel_lens's defaults filled in; refuses the inexact ones."""
    unknown = set(flags) - set(PROCESSING_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown processing flag(s): {', '.join(sorted(unknown))}")
    chosen = {**PROCESSING_DEFAULTS, **{k: bool(v) for k, v in flags.items()}}
    for name in _INEXACT_FLAGS:
        if chosen[name]:
            raise ValueError(
                f"{name}=True moves part of a head's output out of hook_z, so zero-ablating hook_z would "
                "no longer remove the whole head; cel_lens keeps it off"
            )
    return chosen


def load_model(
    name_or_path: Any,
    device: Union[str, torch.device, None] = None,
    dtype: Union[str, torch.dtype, None] = None,
    *,
    loader: str = "auto",
    token: Union[str, bool, None] = None,
    local_files_only: Optional[bool] = None,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
    fold_ln: Optional[bool] = None,
    center_writing_weights: Optional[bool] = None,
    center_unembed: Optional[bool] = None,
    fold_value_biases: Optional[bool] = None,
    refactor_factored_attn_matrices: Optional[bool] = None,
    bos: Optional[str] = None,
    **tl_kwargs: Any,
):
    """Load a model for exact ``hook_z`` head ablation (see the module docstring).

    ``name_or_path``: a hub id, a TransformerLens alias, a local checkpoint directory (Hugging Face,
    or TransformerLens-native, see :mod:`cel_lens.model.native`), a built-in name (``"organism"``:
    the shipped model organism), or a model
    object (returned as is, moved to ``device``/``dtype`` when given). ``loader``: ``"auto"``
    (HookedTransformer for names TransformerLens supports, TransformerBridge otherwise),
    ``"hooked"`` or ``"bridge"``. ``device`` defaults to CUDA when available, ``dtype`` to float32.
    ``bos``: whether prompts start with BOS (:mod:`cel_lens.model.bos`): ``"tokenizer"`` (the
    default: where the checkpoint's tokenizer adds it, as lm-eval), ``"always"`` or ``"never"``;
    a model object keeps its rule unless ``bos`` is given.
    Remaining keyword arguments go to ``HookedTransformer.from_pretrained`` /
    ``TransformerBridge.boot_transformers`` (e.g. ``n_ctx``).
    """
    flags = {
        k: v
        for k, v in dict(
            fold_ln=fold_ln,
            center_writing_weights=center_writing_weights,
            center_unembed=center_unembed,
            fold_value_biases=fold_value_biases,
            refactor_factored_attn_matrices=refactor_factored_attn_matrices,
        ).items()
        if v is not None
    }
    how: Loader = LOADERS.resolve(loader)
    processing = _processing(flags)
    rule = check_bos_rule("tokenizer" if bos is None else bos)

    if not isinstance(name_or_path, (str, os.PathLike)):
        model = _pass_through(name_or_path, device, dtype, processing)
        if bos is not None:
            set_bos_rule(model, rule)
        return model
    torch_dtype = resolve_dtype(dtype)
    dev = resolve_device(device)
    source, source_id, official = _resolve_source(
        name_or_path, token=token, local_files_only=local_files_only, revision=revision
    )
    own = None  # the checkpoint tokenizer's BOS behaviour, read before TransformerLens wraps it
    if is_native_checkpoint(source):
        if how.bridge:
            raise ValueError(f"{source_id} is a TransformerLens-native checkpoint: it loads only as a HookedTransformer")
        model, chosen = load_native(source, device=dev, dtype=torch_dtype), HOOKED_LOADER.name
    else:
        built = how.choose(official)
        chosen = built.name
        hf_model, tokenizer = load_hf(source, torch_dtype, trust_remote_code)
        own = read_bos(tokenizer)
        if built.bridge:
            model = bridge_from_hf(source_id, hf_model, tokenizer, dev, torch_dtype, processing, tl_kwargs)
        else:
            model = hooked_from_hf(source, hf_model, tokenizer, official, dev, torch_dtype, processing, tl_kwargs)
            del hf_model
    tag_source(model, source_id, chosen, processing, origin=converted_from(source), plant=planted_from(source, source_id))
    set_bos_rule(model, rule, own)
    model.eval()
    model.requires_grad_(False)  # logits track no gradients (float(logit) warned); attribution needs dm/dz only
    return model


def _resolve_source(
    name_or_path: Union[str, os.PathLike],
    *,
    token: Union[str, bool, None],
    local_files_only: Optional[bool],
    revision: Optional[str],
) -> tuple[Path, str, Optional[str]]:
    """``(checkpoint directory, source id, TransformerLens official name or None)`` of a model
    name, by the model sources of :mod:`cel_lens.model.sources` (built-in name, GGUF file, local
    directory, hub id: downloaded once, see :func:`resolve_checkpoint`)."""
    found = resolve_source(name_or_path, token=token, local_files_only=local_files_only, revision=revision)
    return found.path, found.id, found.official


def _pass_through(model: Any, device, dtype, processing: dict[str, bool]):
    """A model object the user built: TransformerLens models as they are (with a warning when their
    weights were processed so that ablation is inexact, :mod:`cel_lens.model.processing`), HF
    models bridged."""
    from transformer_lens import HookedTransformer

    if isinstance(model, HookedTransformer) or is_bridge(model):
        warn_if_processed(model, stacklevel=4)
        if device is not None:
            model = model.to(resolve_device(device))
        if dtype is not None:
            model = model.to(resolve_dtype(dtype))
        return model
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover - transformers is a dependency of transformer-lens
        PreTrainedModel = ()  # type: ignore[assignment]
    if isinstance(model, PreTrainedModel):
        source_id = str(getattr(model, "name_or_path", "") or "")
        if not source_id:
            raise ValueError("a transformers model without name_or_path: cannot find its tokenizer")
        tokenizer = load_tokenizer(source_id, False)  # local directory or local hub cache only
        dev = resolve_device(device) if device is not None else str(next(model.parameters()).device)
        torch_dtype = resolve_dtype(dtype) if dtype is not None else next(model.parameters()).dtype
        bridge = bridge_from_hf(source_id, model, tokenizer, dev, torch_dtype, processing, {})
        tag_source(bridge, source_id, BRIDGE_LOADER.name, processing)
        return bridge
    raise TypeError(
        f"cannot use a {type(model).__name__} as a model: pass a name, a checkpoint directory, "
        "a HookedTransformer, a TransformerBridge or a transformers PreTrainedModel"
    )

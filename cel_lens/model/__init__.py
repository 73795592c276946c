"""Everything that touches TransformerLens: loading models, ablating heads, forward passes.

* :func:`load_model` (:mod:`~cel_lens.model.load`): a hub id, a local checkpoint, a GGUF file, a
  short name, the built-in ``"organism"``, or a model object, loaded so that zeroing ``hook_z`` is
  exact; names are resolved by the model-source table (:mod:`~cel_lens.model.sources`), GGUF files
  dequantized once into a cache (:mod:`~cel_lens.model.gguf`, also the offline SmolLM2 fallback);
* :func:`ablate`, :func:`ablation_hooks`, :func:`variant_hooks`, :func:`run_variants`
  (:mod:`~cel_lens.model.ablation`): ablation of head sets (kinds: zero, the default, mean and
  resample, :data:`ABLATION_KINDS`), many variants per pass;
* :mod:`~cel_lens.model.forward`: passes that start or stop at any layer, key/value caches, on
  the fused-attention :mod:`~cel_lens.model.stack` where a model has one (:func:`fused_attention`
  turns it off) and its bfloat16 weight copy (a pass's ``bf16`` argument, :func:`bf16_usable`,
  :mod:`~cel_lens.model.stack_bf16`);
* :mod:`~cel_lens.model.registry`: the models known by name (:data:`MODELS`: the organism, short
  names, the paper's models); :mod:`~cel_lens.model.identity`: ids and
  weight hashes for run manifests; :mod:`~cel_lens.model.native`: models without a Hugging Face form;
  :mod:`~cel_lens.model.bos`: whether prompts start with BOS (the tokenizer's own rule, as lm-eval).

This is the only package that imports ``transformer_lens``.
"""

from cel_lens.model.ablation import (
    ABLATION_KINDS,
    Ablation,
    ablate,
    ablation_hooks,
    ablation_kind,
    fit_ablation,
    hook_z_name,
    run_variants,
    variant_hooks,
)
from cel_lens.model.bos import BOS_RULES, bos_rule, set_bos_rule
from cel_lens.model.forward import forward_resid, unembed
from cel_lens.model.gguf import convert_gguf, converted_from, gguf_fallback
from cel_lens.model.identity import model_id, model_manifest, weights_fingerprint, weights_hash
from cel_lens.model.model_types import is_bridge, model_shape, supports_resume
from cel_lens.model.load import PROCESSING_DEFAULTS, load_model
from cel_lens.model.registry import MODELS, PAPER_MODELS, KnownModel, ModelSpec, paper_config
from cel_lens.model.sources import MODEL_SOURCES, resolve_source
from cel_lens.model.stack_bf16 import bf16_copy_bytes, bf16_usable
from cel_lens.model.stack_build import fused_attention

__all__ = [
    "load_model",
    "PROCESSING_DEFAULTS",
    "BOS_RULES",
    "bos_rule",
    "set_bos_rule",
    "PAPER_MODELS",
    "ModelSpec",
    "paper_config",
    "ablate",
    "ablation_hooks",
    "Ablation",
    "ABLATION_KINDS",
    "ablation_kind",
    "fit_ablation",
    "hook_z_name",
    "variant_hooks",
    "run_variants",
    "forward_resid",
    "unembed",
    "model_id",
    "model_manifest",
    "weights_hash",
    "weights_fingerprint",
    "is_bridge",
    "model_shape",
    "supports_resume",
    "fused_attention",
    "bf16_usable",
    "bf16_copy_bytes",
    "convert_gguf",
    "converted_from",
    "gguf_fallback",
    "MODELS",
    "KnownModel",
    "MODEL_SOURCES",
    "resolve_source",
]

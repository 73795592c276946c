"""What TransformerLens's ``HookedTransformer`` conversion reads of a Hugging Face config, field by field.

``loader="hooked"`` builds a ``HookedTransformer`` from TransformerLens's own config derivation
(``convert_hf_model_config``), which reads a fixed list of fields per architecture and ignores the
rest: a Llama checkpoint with ``attention_bias=True`` loaded with its biases silently dropped
(intact logits 0.78 away from ``transformers``). Here every field of every architecture the hooked
loader takes is in one of three tables: fields the conversion reads, fields that cannot change a
forward pass in eval mode, and fields it ignores, each with the value under which ignoring it is
harmless. A checkpoint whose ignored field holds any other value is refused in one line (the
bridge runs the Hugging Face module itself and loses nothing); a field in none of the tables (a newer
``transformers``, a custom config) is named in a warning, so nothing is dropped silently.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

__all__ = ["HOOKED_ARCHITECTURES", "INERT_FIELDS", "UnknownConfigFieldWarning", "ignored_fields", "check_hooked_config"]

INERT_FIELDS = frozenset(
    {
        "transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype", "torch_dtype",
        "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type", "initializer_range",
        "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "_name_or_path", "model_type",
        "output_attentions", "attention_dropout", "pretraining_tp", "tie_word_embeddings", "max_window_layers",
    }
)
"""Fields that change nothing in an eval-mode forward pass (or, ``tie_word_embeddings``, are read
through the weights: the conversion copies ``lm_head`` whatever it is tied to; ``max_window_layers``
only matters with sliding windows, which are checked themselves)."""


def _rope_types(*types: str) -> Callable[[Any, Mapping[str, Any]], bool]:
    def ok(value: Any, config: Mapping[str, Any]) -> bool:
        rope = value or {}
        return (rope.get("rope_type") or rope.get("type") or "default") in types

    return ok


def _head_dim(value: Any, config: Mapping[str, Any]) -> bool:
    return value is None or value == config["hidden_size"] // config["num_attention_heads"]


def _full_attention(value: Any, config: Mapping[str, Any]) -> bool:
    return value is None or all(kind == "full_attention" for kind in value)


_READ = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps",
}

HOOKED_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {
        "read": _READ | {"rope_parameters", "rope_scaling", "rope_theta"},
        "ignored": {
            "attention_bias": (lambda v, c: not v, "False (the conversion drops q/k/v/o biases)"),
            "mlp_bias": (lambda v, c: not v, "False (the conversion drops MLP biases)"),
            "head_dim": (_head_dim, "hidden_size // num_attention_heads (the conversion assumes it)"),
            "rope_parameters": (_rope_types("default", "llama3"), "rope_type 'default' or 'llama3'"),
            "rope_scaling": (_rope_types("default", "llama3"), "rope_type 'default' or 'llama3'"),
        },
    },
    "Qwen2ForCausalLM": {
        "read": _READ | {"rope_parameters", "rope_theta"},
        "ignored": {
            "rope_parameters": (_rope_types("default"), "rope_type 'default' (no scaling is converted)"),
            "rope_scaling": (_rope_types("default"), "rope_type 'default' (no scaling is converted)"),
            "use_sliding_window": (lambda v, c: not v, "False (sliding windows are not converted)"),
            "sliding_window": (lambda v, c: not c.get("use_sliding_window"), "unused (use_sliding_window=False)"),
            "layer_types": (_full_attention, "full_attention in every layer"),
        },
    },
}
"""Per architecture: ``read`` (fields TransformerLens's conversion reads) and ``ignored`` (field ->
(whether its value is harmless to ignore, that value in words)). A field may be in both when the
conversion reads only part of it (``rope_parameters``: the base, and llama3 scaling for Llama)."""


class UnknownConfigFieldWarning(UserWarning):
    """A config field that no table of :mod:`cel_lens.model.hooked_fields` accounts for."""


def ignored_fields(architecture: str, config: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(refused, unknown)``: ``field=value (needs ...)`` for each field the conversion would
    drop with a value that matters, and the names of fields no table accounts for."""
    rules = HOOKED_ARCHITECTURES.get(architecture)
    if rules is None:
        return [], []
    refused, unknown = [], []
    for name, value in config.items():
        check = rules["ignored"].get(name)
        if check is not None and not check[0](value, config):
            refused.append(f"{name}={value!r} (needs {check[1]})")
        elif check is None and name not in rules["read"] and name not in INERT_FIELDS:
            unknown.append(name)
    return refused, sorted(unknown)


def check_hooked_config(architecture: str, config: Mapping[str, Any], source: str) -> None:
    """Refuse in one line a checkpoint whose config holds something the hooked conversion drops
    (``ValueError``: load it with ``loader='bridge'``), and warn once naming fields no table knows."""
    refused, unknown = ignored_fields(architecture, config)
    if refused:
        raise ValueError(
            f"loader='hooked' cannot convert {source}: TransformerLens's {architecture} conversion ignores "
            f"{'; '.join(refused)}; load it with loader='bridge' (the Hugging Face module runs as is)"
        )
    if unknown:
        warnings.warn(
            f"{source}: config field(s) {', '.join(unknown)} are not read by TransformerLens's {architecture} "
            "conversion and not known to be harmless; compare with loader='bridge' if in doubt",
            UnknownConfigFieldWarning,
            stacklevel=3,
        )

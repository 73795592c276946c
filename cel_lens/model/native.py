"""HookedTransformers that have no Hugging Face form: built from a config, saved and loaded natively.

A *native checkpoint* is a directory holding ``config.json`` (with a ``"hooked_transformer"``
entry: the ``HookedTransformerConfig`` fields that define the architecture, plus anything else the
writer wants to keep, e.g. the model organism's training config), ``model.safetensors``
(TransformerLens parameter names) and ``tokenizer/``. :func:`cel_lens.model.load_model` loads one
like any checkpoint directory; :func:`save_native` writes one.

Such a model has learned positions for ``n_ctx`` tokens only (the organism: 12, exactly its
prompt), and TransformerLens's ``generate`` does not check that: a 13th position is an
``IndexError`` deep in the positional embedding. :func:`bound_generate` makes the model's
``generate`` refuse, in one line, what does not fit.
"""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import torch
from torch import Tensor

from cel_lens.model.convert import load_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from transformer_lens import HookedTransformer

__all__ = ["NATIVE_KEY", "build_hooked", "bound_generate", "save_native", "load_native", "is_native_checkpoint"]

NATIVE_KEY = "hooked_transformer"
"""The ``config.json`` entry that marks a native checkpoint."""

_CONFIG_FIELDS = (
    "n_layers", "d_model", "n_heads", "d_head", "n_ctx", "d_vocab", "attn_only", "normalization_type",
    "positional_embedding_type", "model_name", "d_mlp", "act_fn", "gated_mlp", "rotary_dim",
    "n_key_value_heads", "final_rms", "original_architecture", "default_prepend_bos", "tokenizer_prepends_bos",
)


def build_hooked(
    config: Mapping[str, Any],
    *,
    tokenizer: Any = None,
    state: Optional[Mapping[str, Tensor]] = None,
    device: Optional[str] = "cpu",
    padding_side: Optional[str] = "right",
) -> "HookedTransformer":
    """A ``HookedTransformer`` from ``HookedTransformerConfig`` fields, in eval mode.

    With ``state`` (TransformerLens parameter names) the weights are loaded and must cover every
    parameter; without it the model keeps TransformerLens's initialisation (``config`` may set
    ``seed`` and ``init_weights``).
    """
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    fields = dict(config)
    if state is not None:
        fields.setdefault("init_weights", False)
    cfg = HookedTransformerConfig(**fields, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(cfg, tokenizer=tokenizer, default_padding_side=padding_side)
    if state is not None:
        full = model.state_dict()
        missing = [k for k in full if k not in state and not k.endswith(("mask", "IGNORE"))]
        if missing:
            raise ValueError(f"the weights lack {', '.join(missing)}")
        full.update({k: v.to(full[k].dtype) for k, v in state.items()})
        model.load_state_dict(full)  # tensors are copied onto the model's device (cfg.device)
    model.eval()
    return bound_generate(model)


def _input_length(model: "HookedTransformer", value: Any, prepend_bos: Optional[bool]) -> int:
    """Tokens ``generate`` feeds for ``value`` (a string, strings, or token ids / embeddings)."""
    if isinstance(value, Tensor):
        return int(value.shape[1] if value.ndim >= 2 else value.shape[0])
    texts = [value] if isinstance(value, str) else list(value)
    return max(int(model.to_tokens(t, prepend_bos=prepend_bos, truncate=False).shape[1]) for t in texts)


def _bounded_generate(self: "HookedTransformer", input: Any = "", max_new_tokens: int = 10, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    """TransformerLens's ``HookedTransformer.generate``, after checking that the input and
    ``max_new_tokens`` fit the model's ``n_ctx`` learned positions (:func:`bound_generate`)."""
    n_ctx = int(self.cfg.n_ctx)
    n = _input_length(self, input, kwargs.get("prepend_bos"))
    if n + max(int(max_new_tokens), 1) - 1 > n_ctx:
        room = n_ctx - n + 1
        raise ValueError(
            f"generate: {n} input tokens and {max_new_tokens} new ones need {n + max_new_tokens - 1} positions, "
            f"but this model has learned positions for {n_ctx} (n_ctx): "
            + (f"ask for at most {room} new token(s)" if room >= 1 else "shorten the input")
        )
    return type(self).generate(self, input, max_new_tokens, *args, **kwargs)


def bound_generate(model: "HookedTransformer") -> "HookedTransformer":
    """``model`` with a ``generate`` that refuses, before any forward pass, an input plus
    ``max_new_tokens`` that would need more than its ``n_ctx`` learned positions (the last new
    token is predicted, never fed, so ``input + max_new_tokens - 1`` positions must fit).
    Models with rotary or other unbounded positions are returned unchanged."""
    if getattr(model.cfg, "positional_embedding_type", None) == "standard":
        model.generate = types.MethodType(_bounded_generate, model)  # a bound method: deepcopy rebinds it
    return model


def is_native_checkpoint(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a native checkpoint directory (see the module docstring)."""
    config = Path(path) / "config.json"
    if not (config.is_file() and (Path(path) / "model.safetensors").is_file()):
        return False
    try:
        return NATIVE_KEY in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def save_native(model: "HookedTransformer", out_dir: Union[str, Path], extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write ``model`` as a native checkpoint to ``out_dir``: its weights, the architecture fields of
    its config and its tokenizer; ``extra`` entries are added to ``config.json``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().cpu().contiguous()
        for k, v in model.state_dict().items()
        if not k.endswith(("mask", "IGNORE"))
    }
    save_file(state, str(out / "model.safetensors"))
    cfg = {k: getattr(model.cfg, k) for k in _CONFIG_FIELDS if hasattr(model.cfg, k)}
    meta = {**dict(extra or {}), NATIVE_KEY: cfg}
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if model.tokenizer is not None:
        model.tokenizer.save_pretrained(str(out / "tokenizer"))
    return out


def load_native(path: Union[str, Path], device: Optional[str] = "cpu", dtype: Optional[torch.dtype] = None) -> "HookedTransformer":
    """Load a native checkpoint written by :func:`save_native` (its tokenizer from ``tokenizer/``)."""
    from safetensors.torch import load_file

    root = Path(path)
    meta = json.loads((root / "config.json").read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(root / "tokenizer", False) if (root / "tokenizer").is_dir() else None
    model = build_hooked(meta[NATIVE_KEY], tokenizer=tokenizer, state=load_file(str(root / "model.safetensors")), device=device)
    return model if dtype is None or dtype == next(model.parameters()).dtype else model.to(dtype)

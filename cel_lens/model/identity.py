"""Naming a loaded model for run manifests: its source id, a hash of its weights, its dtype."""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import torch
from jaxtyping import Int

from cel_lens.model.bos import bos_rule

__all__ = ["model_id", "weights_hash", "weights_fingerprint", "sample_indices", "model_manifest", "tag_source",
           "source_info", "param_dtype"]


def model_id(model: Any) -> str:
    """A stable name for a loaded model: its hub id or checkpoint directory when it came from
    :func:`load_model`, TransformerLens's ``cfg.model_name`` otherwise."""
    info = source_info(model)
    if info is not None:
        return str(info["id"])
    name = getattr(getattr(model, "cfg", None), "model_name", None)
    return str(name) if name else type(model).__name__


def tag_source(
    model: Any, source_id: str, loader: str, processing: dict[str, bool], origin: Optional[dict] = None,
    plant: Optional[dict] = None,
) -> None:
    """Record where the model came from (read by :func:`model_id`, run manifests and checkpoint
    export); ``origin``: the GGUF file a converted checkpoint came from (:mod:`cel_lens.model.gguf`);
    ``plant``: the recipe of a planted variant (:mod:`cel_lens.model.planted_cache`)."""
    info = {"id": source_id, "loader": loader, "processing": dict(processing)}
    if origin is not None:
        info["gguf"] = dict(origin)
    if plant is not None:
        info["plant"] = dict(plant)
    model.__dict__["_cel_lens_source"] = info


def source_info(model: Any) -> Optional[dict]:
    """What :func:`tag_source` recorded (``id``, ``loader``, ``processing``, and ``gguf`` for a
    model dequantized from a GGUF file), or ``None``."""
    try:
        return model.__dict__.get("_cel_lens_source")
    except AttributeError:  # pragma: no cover
        return None


def sample_indices(n: int, sample: int) -> Int[torch.Tensor, " sample"]:
    """``sample`` evenly spaced indices into ``n`` elements, first ``0`` and last ``n - 1``, each
    rounded to the nearest (half up), computed in int64 integer arithmetic.

    Why integers: float32 holds integers exactly only up to 2^24, so ``torch.linspace(0, n - 1,
    sample)`` rounds its last index up to ``n`` for the embedding matrix of any 3B model (an
    ``IndexError`` before the first evaluation). int64 is exact for every ``n * sample < 2^63``.
    """
    n, sample = int(n), int(sample)
    if n < 1 or sample < 1:
        raise ValueError(f"need n >= 1 and sample >= 1, got n={n}, sample={sample}")
    if sample == 1:
        return torch.zeros(1, dtype=torch.int64)
    steps = sample - 1
    i = torch.arange(sample, dtype=torch.int64)
    return (2 * i * (n - 1) + steps) // (2 * steps)


def weights_hash(model: torch.nn.Module, full_limit_bytes: int = 256 * 2**20, sample: int = 4096) -> str:
    """SHA-256 over the model's parameters (names, shapes, dtypes and values), for run manifests.

    Models up to ``full_limit_bytes`` of parameters are hashed in full (``"sha256:..."``); larger
    ones hash, per parameter, ``sample`` evenly spaced elements plus its shape and dtype
    (``"sha256-sampled:..."``): cheap on a 3B model and still changes with any retraining.
    """
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    total = sum(p.numel() * p.element_size() for _, p in params)
    full = total <= full_limit_bytes
    digest = hashlib.sha256()
    for name, p in params:
        data = p.detach()
        digest.update(f"{name}|{tuple(data.shape)}|{data.dtype}|".encode())
        flat = data.reshape(-1)
        if not full and flat.numel() > sample:
            flat = flat[sample_indices(flat.numel(), sample).to(flat.device)]
        digest.update(flat.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return ("sha256:" if full else "sha256-sampled:") + digest.hexdigest()


def weights_fingerprint(model: torch.nn.Module, sample: int = 4096) -> str:
    """A fingerprint of the model's weights that survives a copy and a change of dtype: per parameter
    (sorted by name) its name, shape and ``sample`` evenly spaced values rounded to bfloat16 (the
    coarsest float dtype a model is loaded in), SHA-256 over all (``"bf16-sampled:..."``). A copied
    checkpoint loaded in bfloat16 and the original in float32 give the same fingerprint (rounding
    float32 to bfloat16 is what loading in bfloat16 does); retraining changes it. What the sealed test
    split keys a model on (:func:`cel_lens.evaluation.seal.weights_key`); two models that differ only
    below bfloat16's precision count as one there, the safe side for a seal."""
    digest = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        flat = p.detach().reshape(-1)
        digest.update(f"{name}|{tuple(p.shape)}|".encode())
        if flat.numel() > sample:
            flat = flat[sample_indices(flat.numel(), sample).to(flat.device)]
        if flat.is_floating_point():
            flat = flat.to(torch.bfloat16)
        digest.update(flat.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return "bf16-sampled:" + digest.hexdigest()


def param_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's (first) parameters (float32 for a model without any)."""
    try:
        return next(model.parameters()).dtype
    except StopIteration:  # pragma: no cover
        return torch.float32


def model_manifest(model: torch.nn.Module) -> dict[str, Any]:
    """The manifest's ``model`` entry: id, weights hash, dtype, GGUF origin (when converted from one), plant recipe (a planted variant) and BOS rule (:mod:`cel_lens.model.bos`:
    the rule and what it resolved to, since it changes every token id). A Ray worker computes it for
    its replica, so the driver of a distributed search needs no copy of the model."""
    entry = {
        "id": model_id(model),
        "weights_sha256": weights_hash(model),
        "dtype": str(param_dtype(model)),
        "bos": bos_rule(model),
    }
    gguf = (source_info(model) or {}).get("gguf")
    if gguf:  # the file's hash and quantization: the float weights above are its dequantization
        entry["gguf"] = {k: gguf.get(k) for k in ("file", "sha256", "quantization", "tensor_types", "dequantized_to")}
    plant = (source_info(model) or {}).get("plant")
    if plant:  # a planted variant: which heads changed, how, and the build's content hash
        entry["plant"] = dict(plant)
    return entry

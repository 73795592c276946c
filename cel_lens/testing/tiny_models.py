"""Tiny random models for tests, benchmarks and examples: TransformerLens-native and Hugging Face.

Nothing here touches the Hugging Face hub: tokenizers are trained locally
(:mod:`~cel_lens.testing.tokenizers`) and weights are random (seeded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

import torch

from cel_lens.model.load import load_model
from cel_lens.model.native import build_hooked
from cel_lens.testing.tokenizers import tiny_tokenizer, train_tokenizer

__all__ = ["TINY_ARCHS", "tiny_hooked_transformer", "tiny_hf_checkpoint", "tiny_hooked_from_hf"]


def tiny_hooked_transformer(
    n_layers: int = 3,
    n_heads: int = 4,
    d_head: int = 8,
    n_key_value_heads: Optional[int] = 2,
    n_ctx: int = 512,
    seed: int = 0,
    tokenizer=None,
    positional_embedding_type: str = "rotary",
    device: Optional[str] = "cpu",
):
    """A random-initialised, Llama-shaped ``HookedTransformer`` (RMSNorm, rotary, gated MLP, GQA).

    ``tokenizer`` defaults to :func:`tiny_tokenizer`. The weights are scaled up from TL's default
    init so that ablating a head changes the logits visibly. ``device`` is CPU unless asked
    (``None``: TransformerLens's default, CUDA when available).
    """
    tokenizer = tokenizer or tiny_tokenizer()
    d_model = n_heads * d_head
    cfg = dict(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=2 * d_model,
        n_ctx=n_ctx,
        d_vocab=len(tokenizer),
        act_fn="silu",
        gated_mlp=True,
        normalization_type="RMS",
        positional_embedding_type=positional_embedding_type,
        rotary_dim=d_head if positional_embedding_type == "rotary" else None,
        n_key_value_heads=n_key_value_heads,
        final_rms=True,
        original_architecture="LlamaForCausalLM",
        default_prepend_bos=True,
        tokenizer_prepends_bos=False,
        seed=seed,
        init_weights=True,
    )
    model = build_hooked(cfg, tokenizer=tokenizer, device=device, padding_side="right")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-2] ** 0.5 if p.ndim == 2 else 0.3))
    model.eval()
    return model


TINY_ARCHS: tuple[str, ...] = ("llama", "qwen2", "smollm3")


def tiny_hf_checkpoint(
    arch: Literal["llama", "qwen2", "smollm3"],
    path: Union[str, Path],
    seed: int = 0,
    n_layers: int = 3,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    d_head: int = 16,
    max_position_embeddings: int = 256,
    tie_word_embeddings: bool = True,
    max_shard_size: Union[int, str, None] = None,
    bos: str = "added",
) -> Path:
    """Write a random tiny Hugging Face checkpoint (``config.json``, weights, tokenizer) to ``path``.

    The three architectures of the paper's models, each with grouped-query attention
    (``n_kv_heads < n_heads``) and the feature that makes ablation easy to get wrong:

    * ``llama``: Llama-3 ``rope_type="llama3"`` frequency scaling (as Llama-3.2-3B);
    * ``qwen2``: q/k/v projection biases, set to non-zero random values (the ``v_proj`` bias is
      what ``fold_value_biases`` would move into the output bias);
    * ``smollm3``: a no-RoPE (NoPE) layer in the middle (``no_rope_layers``).

    Weights are drawn from a seeded normal scaled ``1/sqrt(fan_in)`` (norm gains ``1 + 0.1 N``), so
    every head visibly moves the logits. ``max_shard_size`` (e.g. ``"200KB"``) splits the weights
    into several safetensors shards with an index, as large checkpoints are stored. ``bos``: the
    tokenizer's BOS convention (:data:`~cel_lens.testing.tokenizers.BOS_CONVENTIONS`). Returns ``path``.
    """
    if arch not in TINY_ARCHS:
        raise ValueError(f"unknown tiny architecture {arch!r}: expected one of {', '.join(TINY_ARCHS)}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(bos=bos)
    d_model = n_heads * d_head
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=d_model,
        intermediate_size=2 * d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config, model_cls = _hf_config(arch, common, d_head, n_layers, max_position_embeddings)
    torch.manual_seed(seed)
    model = model_cls(config)
    _randomize(model, seed)
    model.eval()
    model.save_pretrained(path, **({} if max_shard_size is None else {"max_shard_size": max_shard_size}))
    tokenizer.save_pretrained(path)
    return path


def _hf_config(arch: str, common: dict, d_head: int, n_layers: int, max_position_embeddings: int) -> tuple:
    """The ``transformers`` config and model class of a tiny ``arch`` checkpoint."""
    import transformers

    if arch == "llama":
        rope = {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": max_position_embeddings // 4,
        }
        config, model_cls = transformers.LlamaConfig(**common, head_dim=d_head, rope_parameters=rope), transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        model_cls = transformers.Qwen2ForCausalLM
    else:
        no_rope = [1] * n_layers
        no_rope[n_layers // 2] = 0  # 1 = RoPE, 0 = NoPE, as in SmolLM3's config
        config = transformers.SmolLM3Config(
            **common, no_rope_layers=no_rope, rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}
        )
        model_cls = transformers.SmolLM3ForCausalLM
    config.architectures = [model_cls.__name__]
    return config, model_cls


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded normal weights scaled ``1/sqrt(fan_in)``, norm gains ``1 + 0.1 N``, biases ``0.5 N``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif p.ndim == 1:  # Qwen2's q/k/v biases
                p.copy_(0.5 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


def tiny_hooked_from_hf(path: Union[str, Path], **kwargs):
    """A ``HookedTransformer`` built offline from a tiny checkpoint directory (see
    :func:`tiny_hf_checkpoint`): TransformerLens's own config derivation and weight conversion,
    with the processing :func:`cel_lens.model.load_model` uses."""
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("dtype", "float32")
    return load_model(path, loader="hooked", **kwargs)

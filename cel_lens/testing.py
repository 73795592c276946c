"""Tiny, offline models and tokenizers for tests, benchmarks and examples.

Nothing here touches the Hugging Face hub: tokenizers are trained locally with ``tokenizers`` on a
small built-in corpus that covers the prompt formats of the built-in tasks (questions, digits,
Python code), and models are random-initialised.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterable, Literal, Optional, Union

__all__ = [
    "CORPUS",
    "TINY_ARCHS",
    "train_tokenizer",
    "tiny_tokenizer",
    "tiny_hooked_transformer",
    "tiny_hf_checkpoint",
    "tiny_hooked_from_hf",
    "planted_task",
]

CORPUS: tuple[str, ...] = (
    "Question: What is 98 plus 45?\nAnswer: 143",
    "Question: What is 12 minus 70?\nAnswer: -58",
    "Question: What is 7 times 8?\nAnswer: 56",
    "Question: What is (9 + 8) * 2?\nAnswer: 34",
    "Question: is the sky blue?\nAnswer: yes",
    "Question: does water boil at ten degrees?\nAnswer: no",
    "The passage says the river runs through the city. Then the man walks to the store.",
    "A woman is seen speaking to the camera and holding a guitar. She begins playing.",
    "You are an expert Python programmer, and here is your task: Write a function to add two numbers. "
    "Your code should pass these tests:\n\nassert add(1, 2) == 3\n[BEGIN]\ndef add(a, b):\n    return a + b\n[DONE]",
    "def f(x):\n    for i in range(len(x)):\n        if x[i] % 2 == 0:\n            return True\n    return False",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 -1 + - * / ( ) = ? : .",
)


def train_tokenizer(corpus: Iterable[str] = CORPUS, vocab_size: int = 300):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``corpus``, with BOS/EOS/PAD tokens.

    Byte-level BPE encodes any text, so prompts outside the corpus still tokenize.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|bos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )


@functools.lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 300):
    """The shared tiny tokenizer, saved to and reloaded from a temporary directory (TransformerLens
    re-reads tokenizers by ``name_or_path``), cached per process."""
    import tempfile

    from transformers import AutoTokenizer

    path = tempfile.mkdtemp(prefix="cel_lens_tok_")
    train_tokenizer(CORPUS, vocab_size).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


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
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    tokenizer = tokenizer or tiny_tokenizer()
    d_model = n_heads * d_head
    cfg = HookedTransformerConfig(
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
        device=device,
    )
    model = HookedTransformer(cfg, tokenizer=tokenizer, default_padding_side="right")
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
) -> Path:
    """Write a random tiny Hugging Face checkpoint (``config.json``, weights, tokenizer) to ``path``.

    The three architectures of the paper's models, each with grouped-query attention
    (``n_kv_heads < n_heads``) and the feature that makes ablation easy to get wrong:

    * ``llama``: Llama-3 ``rope_type="llama3"`` frequency scaling (as Llama-3.2-3B);
    * ``qwen2``: q/k/v projection biases, set to non-zero random values (the ``v_proj`` bias is
      what ``fold_value_biases`` would move into the output bias);
    * ``smollm3``: a no-RoPE (NoPE) layer in the middle (``no_rope_layers``).

    Weights are drawn from a seeded normal scaled ``1/sqrt(fan_in)`` (norm gains ``1 + 0.1 N``), so
    every head visibly moves the logits. Returns ``path``.
    """
    import torch
    import transformers

    if arch not in TINY_ARCHS:
        raise ValueError(f"unknown tiny architecture {arch!r}: expected one of {', '.join(TINY_ARCHS)}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
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
    if arch == "llama":
        config = transformers.LlamaConfig(
            **common,
            head_dim=d_head,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": max_position_embeddings // 4,
            },
        )
        model_cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        model_cls = transformers.Qwen2ForCausalLM
    else:
        no_rope = [1] * n_layers
        no_rope[n_layers // 2] = 0  # 1 = RoPE, 0 = NoPE, as in SmolLM3's config
        config = transformers.SmolLM3Config(
            **common,
            no_rope_layers=no_rope,
            rope_parameters={"rope_type": "default", "rope_theta": 2000000.0},
        )
        model_cls = transformers.SmolLM3ForCausalLM
    config.architectures = [model_cls.__name__]
    torch.manual_seed(seed)
    model = model_cls(config)
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
    model.eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_hooked_from_hf(path: Union[str, Path], **kwargs):
    """A ``HookedTransformer`` built offline from a tiny checkpoint directory (see
    :func:`tiny_hf_checkpoint`): TransformerLens's own config derivation and weight conversion,
    with the processing :func:`cel_lens.models.load_model` uses."""
    from cel_lens.models import load_model

    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("dtype", "float32")
    return load_model(path, loader="hooked", **kwargs)


def planted_task(model, n: int = 24, heads: str = "intact", name: str = "planted"):
    """A task whose best ablation is known by construction: exact-match examples (``n`` discovery,
    ``n`` test) whose target is the next token ``model`` predicts with ``heads`` ablated, so ablating
    exactly those heads scores 100%. Only prompts whose target re-encodes to that very token (no BPE
    merge across the boundary) are kept. With ``heads="intact"`` the targets are the intact model's
    own answers."""
    from cel_lens.ablation import ablate
    from cel_lens.evaluate import encode_pair
    from cel_lens.tasks import Example, Task

    examples = []
    with ablate(model, heads):
        for i in range(20 * n):
            prompt = f"Question: What is {i} plus {3 * i + 7}?\nAnswer:"
            toks = model.to_tokens(prompt)
            nxt = int(model(toks)[0, -1].argmax())
            target = model.tokenizer.decode([nxt])
            ctx, cont = encode_pair(model, prompt, target)
            if cont == [nxt] and ctx == toks[0].tolist():
                examples.append(Example(f"{name}/{i}", prompt, target=target))
            if len(examples) == 2 * n:
                break
    if len(examples) < 2 * n:
        raise ValueError(f"only {len(examples)} of {2 * n} prompts give a target that re-encodes to one token")
    return Task(name, "exact_match", tuple(examples[:n]), tuple(examples[n:]))

"""Real-width rehearsal checkpoints: the paper's models at full width and vocabulary, few layers.

:func:`paper_width_checkpoint` writes a random-weight Hugging Face checkpoint of one of the paper's
models (:data:`~cel_lens.model.registry.PAPER_MODELS`) from its published ``config.json``
(:func:`~cel_lens.model.registry.paper_config`): every field as published (Llama-3 rope scaling,
tied embeddings, GQA, SmolLM3's layers without rope, the 128k-152k vocabulary) except the layer
count, cut to ``n_layers`` (per-layer lists cut with it). The ``config.json`` written is the
published form (``rope_scaling``/``rope_theta``, as a download from the hub has it), not the form
this ``transformers`` would write. Its tokenizer (:func:`width_tokenizer`) is a byte-level BPE
trained here, padded to the real tokenizer's length with its special tokens at their real ids, so
every id-range and vocabulary-size path runs as it would on the real model. Nothing touches the hub.

Such a checkpoint is several GB (Llama-3.2-3B at 4 layers: 0.80 B parameters, 3.2 GB in float32):
what a CPU rehearsal of a paper-scale run needs, not a unit-test fixture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import torch

from cel_lens.model.registry import PAPER_MODELS, paper_config
from cel_lens.testing.tokenizers import CORPUS

__all__ = ["TOKENIZER_LAYOUTS", "width_tokenizer", "rehearsal_config", "paper_width_checkpoint"]

_LLAMA3_SPECIALS = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
                    128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>"}
_SMOLLM3_SPECIALS = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
                     128011: "<|im_start|>", 128012: "<|im_end|>"}
_QWEN_SPECIALS = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}

TOKENIZER_LAYOUTS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.2-3B-Instruct": dict(regular=128000, length=128256, specials=_LLAMA3_SPECIALS,
                                             bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>"),
    "Qwen/Qwen2.5-3B-Instruct": dict(regular=151643, length=151665, specials=_QWEN_SPECIALS,
                                     bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
    "HuggingFaceTB/SmolLM3-3B": dict(regular=128000, length=128256, specials=_SMOLLM3_SPECIALS,
                                     bos=None, eos="<|im_end|>", pad="<|finetune_right_pad_id|>"),
}
"""Per paper model: regular (BPE) tokens, the tokenizer's length (Qwen2.5's embedding has 151,936
rows for 151,665 tokens), the named special tokens at their real ids (the other ids up to the length
are reserved special tokens), and BOS/EOS/PAD. BOS: Llama-3 adds ``<|begin_of_text|>`` to every
encoding; Qwen2.5 and SmolLM3 (``bos_token_id`` null in its config) add none."""


def width_tokenizer(hub_id: str):
    """A ``PreTrainedTokenizerFast`` of the real length of ``hub_id``'s tokenizer
    (:data:`TOKENIZER_LAYOUTS`): a byte-level BPE trained on :data:`~cel_lens.testing.tokenizers.CORPUS`
    (so task prompts encode to few tokens), regular filler tokens up to the real regular count (no
    merge reaches them), then the special tokens at their real ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    layout = TOKENIZER_LAYOUTS[hub_id]
    base = Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    base.train_from_iterator(list(CORPUS), trainers.BpeTrainer(
        vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    spec = json.loads(base.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    for i in range(len(vocab), layout["regular"]):
        vocab[f"<filler_{i}>"] = i
    spec["added_tokens"] = [
        dict(id=i, content=layout["specials"].get(i, f"<|reserved_special_token_{i - layout['regular']}|>"),
             single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
        for i in range(layout["regular"], layout["length"])
    ]
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.ByteLevel()
    if layout["bos"] is not None:
        bos_id = tok.token_to_id(layout["bos"])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{layout['bos']} $A", pair=f"{layout['bos']} $A {layout['bos']} $B",
            special_tokens=[(layout["bos"], bos_id)])
    named = {"bos_token": layout["bos"]} if layout["bos"] else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=layout["eos"], pad_token=layout["pad"], **named)


def rehearsal_config(hub_id: str, n_layers: int) -> dict[str, Any]:
    """``hub_id``'s published ``config.json`` with ``num_hidden_layers`` cut to ``n_layers`` and
    its per-layer lists (``layer_types``, SmolLM3's ``no_rope_layers``) cut with it; with 4 layers
    SmolLM3 keeps its rope pattern's first period (three rope layers, then one without)."""
    config = paper_config(hub_id)
    full = int(config["num_hidden_layers"])
    if not 1 <= n_layers <= full:
        raise ValueError(f"n_layers must be in 1..{full} for {hub_id}, got {n_layers}")
    config["num_hidden_layers"] = int(n_layers)
    for key in ("layer_types", "no_rope_layers"):
        if isinstance(config.get(key), list):
            config[key] = config[key][:n_layers]
    if "max_window_layers" in config:
        config["max_window_layers"] = min(int(config["max_window_layers"]), n_layers)
    return config


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded normal weights scaled ``1/sqrt(fan_in)``, embeddings ``N(0, 1)``, norm gains
    ``1 + 0.1 N``, biases ``0.5 N`` (Qwen2's q/k/v), drawn one parameter at a time."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                noise.mul_(0.1).add_(1.0)
            elif p.ndim == 1:
                noise.mul_(0.5)
            elif "embed_tokens" not in name:
                noise.div_(p.shape[-1] ** 0.5)
            p.copy_(noise)
            del noise


def paper_width_checkpoint(
    hub_id: str, path: Union[str, Path], n_layers: int = 4, seed: int = 0, dtype: Optional[torch.dtype] = None,
) -> Path:
    """Write a random-weight rehearsal checkpoint of ``hub_id`` (module docstring) to ``path``:
    ``config.json`` (published form, ``n_layers`` layers), ``model.safetensors`` (``dtype``, default
    float32) and the tokenizer. Returns ``path``; nothing is kept in memory after it returns."""
    import transformers

    if hub_id not in PAPER_MODELS:
        raise KeyError(f"{hub_id!r} is not one of the paper's models ({', '.join(PAPER_MODELS)})")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    published = rehearsal_config(hub_id, n_layers)
    (path / "config.json").write_text(json.dumps(published, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    model_cls = getattr(transformers, published["architectures"][0])
    torch.manual_seed(seed)
    model = model_cls(config)
    _randomize(model, seed)
    if dtype is not None:
        model = model.to(dtype)
    model.eval()
    model.save_pretrained(path)
    del model
    (path / "config.json").write_text(json.dumps(published, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    width_tokenizer(hub_id).save_pretrained(path)
    return path

"""A tiny byte-level BPE tokenizer trained locally on prompts of the built-in tasks (no hub)."""

from __future__ import annotations

import functools
from typing import Iterable

__all__ = ["CORPUS", "BOS_CONVENTIONS", "train_tokenizer", "tiny_tokenizer"]

BOS_CONVENTIONS: tuple[str, ...] = ("added", "not_added", "absent")
"""How a tokenizer treats BOS: ``"added"`` (defines ``<|bos|>`` and its encode puts it first, as
Llama-3's), ``"not_added"`` (defines it but never adds it, as GPT-2's or Pythia's), ``"absent"``
(no BOS token, as Qwen2.5's)."""

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


def train_tokenizer(corpus: Iterable[str] = CORPUS, vocab_size: int = 300, bos: str = "added"):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``corpus``, with EOS/PAD tokens and
    BOS as ``bos`` says (:data:`BOS_CONVENTIONS`; default ``"added"``).

    Byte-level BPE encodes any text, so prompts outside the corpus still tokenize.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if bos not in BOS_CONVENTIONS:
        raise ValueError(f"unknown bos convention {bos!r}: expected one of {', '.join(BOS_CONVENTIONS)}")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|bos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus), trainer)
    if bos == "added":
        bos_id = tok.token_to_id("<|bos|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos_id)]
        )
    named = {} if bos == "absent" else {"bos_token": "<|bos|>"}
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>", **named)


@functools.lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 300, bos: str = "added"):
    """The shared tiny tokenizer, saved to and reloaded from a temporary directory (TransformerLens
    re-reads tokenizers by ``name_or_path``), cached per process."""
    import tempfile

    from transformers import AutoTokenizer

    path = tempfile.mkdtemp(prefix="cel_lens_tok_")
    train_tokenizer(CORPUS, vocab_size, bos).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)

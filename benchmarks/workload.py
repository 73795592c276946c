"""The benchmark workloads: an offline tokenizer, a random small-Llama-shaped model and the tasks.

Everything is built locally (no hub): the tokenizer is a byte-level BPE trained on the offline task
files themselves, with digits split one per token as Qwen2.5's tokenizer does (so an Arithmetic
answer is several tokens, as with the paper's models), that prepends BOS (as Llama's does); the
model is a random Llama checkpoint in Hugging Face's format (:func:`bench_checkpoint`), which every
implementation reads: TransformerLens's HookedTransformer, a TransformerBridge, ``transformers``
itself (the floor) and lm-evaluation-harness.
"""

from __future__ import annotations

import functools
import json
import os
import random
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator, Optional

from cel_lens.tasks import Example, Split, Task, sample_disjoint

__all__ = [
    "REPO",
    "default_data_dir",
    "task_corpus",
    "train_bench_tokenizer",
    "bench_tokenizer",
    "bench_model",
    "arithmetic_task",
    "boolq_task",
    "self_labelled",
    "synthetic_arithmetic",
    "bench_checkpoint",
    "hellaswag_shaped_task",
    "mbpp_task",
]

REPO = Path(__file__).resolve().parents[1]


def default_data_dir() -> Optional[Path]:
    """The offline data directory: ``$CEL_LENS_DATA_DIR``, else ``shared/data`` next to or inside
    the repository (None when none exists)."""
    candidates = [os.environ.get("CEL_LENS_DATA_DIR"), REPO / "shared" / "data", REPO.parent / "shared" / "data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def task_corpus(data_dir: Path, max_boolq: int = 3270) -> Iterator[str]:
    """Texts to train the benchmark tokenizer on: every Arithmetic context and completion, the MBPP
    problems and solutions, and the BoolQ validation passages and questions (files under
    ``data_dir``)."""
    for path in sorted((data_dir / "arithmetic").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                yield row["context"] + row["completion"]
    mbpp = data_dir / "mbpp" / "mbpp.jsonl"
    if mbpp.is_file():
        for line in mbpp.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                yield row["text"] + "\n" + "\n".join(row["test_list"]) + "\n" + row["code"]
    boolq = data_dir / "boolq" / "dev.jsonl"
    if boolq.is_file():
        for i, line in enumerate(boolq.read_text(encoding="utf-8").splitlines()):
            if i >= max_boolq:
                break
            if line.strip():
                row = json.loads(line)
                yield f"{row['passage']}\nQuestion: {row['question']}?\nAnswer: yes no"


def train_bench_tokenizer(corpus: Iterable[str], vocab_size: int = 4096):
    """A byte-level BPE tokenizer of at most ``vocab_size`` tokens trained on ``corpus``, digits one
    per token (Qwen2.5's convention), BOS/EOS/PAD specials, BOS prepended on encoding with special
    tokens (as Llama's); saved and reloaded from a temporary directory (TransformerLens re-reads
    tokenizers by path)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|bos|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    path = tempfile.mkdtemp(prefix="cel_lens_bench_tok_")
    fast.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=4)
def bench_tokenizer(vocab_size: int = 4096, data_dir: Optional[str] = None):
    """:func:`train_bench_tokenizer` on :func:`task_corpus` (on :data:`cel_lens.testing.CORPUS`
    when there is no data directory), cached per process."""
    from cel_lens.testing import CORPUS

    root = Path(data_dir) if data_dir else default_data_dir()
    corpus = list(task_corpus(root)) if root is not None else list(CORPUS)
    return train_bench_tokenizer(corpus, vocab_size)


def bench_model(
    n_layers: int = 8,
    n_heads: int = 8,
    d_head: int = 64,
    n_key_value_heads: int = 4,
    n_ctx: int = 2048,
    seed: int = 0,
    tokenizer=None,
):
    """A random-initialised Llama-shaped HookedTransformer (RMSNorm, rotary, gated MLP with
    ``d_mlp = 2 d_model``, grouped-query attention), default 8 layers x 8 heads, d_model 512,
    4 key/value heads, with the benchmark tokenizer's vocabulary."""
    from cel_lens.testing import tiny_hooked_transformer

    return tiny_hooked_transformer(
        n_layers=n_layers,
        n_heads=n_heads,
        d_head=d_head,
        n_key_value_heads=n_key_value_heads,
        n_ctx=n_ctx,
        seed=seed,
        tokenizer=tokenizer if tokenizer is not None else bench_tokenizer(),
    )


def arithmetic_task(n_dist: int, n_test: int = 16, seed: int = 0, data_dir: Optional[Path] = None) -> Task:
    """Arithmetic from the offline files (:func:`cel_lens.tasks.load_task`), ``n_dist`` discovery
    examples."""
    from cel_lens.tasks import load_task

    root = data_dir or default_data_dir()
    if root is None:
        raise FileNotFoundError("no offline data directory: set CEL_LENS_DATA_DIR to a folder with arithmetic/")
    return load_task("arithmetic", n_dist=n_dist, n_test=n_test, seed=seed, data_dir=str(root))


def boolq_task(
    n_dist: int,
    n_test: int = 16,
    seed: int = 0,
    data_dir: Optional[Path] = None,
    max_tokens: Optional[int] = None,
    tokenizer=None,
) -> Task:
    """BoolQ with *both* splits drawn (disjoint, seeded) from the real validation file
    ``boolq/dev.jsonl``: the train file (BoolQ's proper D_dist source) is not available offline, and
    a benchmark only needs real passages of real lengths. ``max_tokens`` (with ``tokenizer``) keeps
    only rows whose prompt is at most that many tokens (to fit a CPU time budget)."""
    from cel_lens.tasks.boolq import make_example

    root = data_dir or default_data_dir()
    path = None if root is None else root / "boolq" / "dev.jsonl"
    if path is None or not path.is_file():
        raise FileNotFoundError("no offline BoolQ validation file: set CEL_LENS_DATA_DIR to a folder with boolq/dev.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    pool = [make_example(r, "validation", i) for i, r in enumerate(rows)]
    if max_tokens is not None:
        if tokenizer is None:
            raise ValueError("max_tokens needs the tokenizer that counts the tokens")
        pool = [e for e in pool if len(tokenizer(e.prompt, add_special_tokens=False)["input_ids"]) <= max_tokens]
    dist, test = sample_disjoint(pool, n_dist, n_test, seed)
    return Task(
        name="boolq",
        answer_type="multiple_choice",
        dist=Split("dist", tuple(dist)),
        test=Split("test", tuple(test)),
        metric="acc",
        options={
            "seed": seed, "n_dist": n_dist, "n_test": n_test, "max_tokens": max_tokens,
            "source": "boolq/dev.jsonl (both splits)",
        },
    )


def self_labelled(model, task: Task, batch_size: int = 32) -> tuple[Task, int]:
    """``task`` with each D_dist target replaced by the model's own intact greedy continuation of the
    same number of tokens (kept only where that text re-encodes to the same tokens).

    A random model answers no Arithmetic question, so every head's gain would be exactly 0 and the
    naive/cel_lens comparison would be trivially equal; self-labelled targets make intact accuracy
    high and single-head ablations move it. Returns the task and how many targets were replaced.
    """
    from cel_lens.evaluation import encode_pair, greedy_generate

    tok = model.tokenizer
    pairs = [encode_pair(model, ex.prompt, ex.target or "") for ex in task.dist]
    new: list[Example] = []
    replaced = 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        width = max(len(c) for _, c in chunk)
        outs = greedy_generate(model, [ctx for ctx, _ in chunk], max_new_tokens=width, stop=(), stop_at_eos=False)
        for (ctx, cont), out, ex in zip(chunk, outs, task.dist.examples[start : start + batch_size]):
            gen = out[: len(cont)]
            text = tok.decode(gen)
            ok = len(gen) == len(cont) and text.strip() != "" and encode_pair(model, ex.prompt, text)[1] == gen
            if ok:
                new.append(replace(ex, target=text))
                replaced += 1
            else:
                new.append(ex)
    dist = Split("dist", tuple(new))
    return replace(task, dist=dist, test=task.test), replaced


# GPT-3 arithmetic formats (openai/gpt-3 data/, as lm-eval normalises them): config -> (digits, op)
_FORMATS = {
    "2da": (2, "plus"), "2ds": (2, "minus"), "3da": (3, "plus"), "3ds": (3, "minus"),
    "4da": (4, "plus"), "4ds": (4, "minus"), "5da": (5, "plus"), "5ds": (5, "minus"),
    "2dm": (2, "times"),
}
_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}


def synthetic_arithmetic(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (prompt, answer) pairs in the ten GPT-3 arithmetic formats, round robin, seeded."""
    rng = random.Random(seed)
    configs = [*_FORMATS, "1dc"]
    out = []
    for i in range(n):
        cfg = configs[i % len(configs)]
        if cfg == "1dc":
            a, b, c = (rng.randint(0, 9) for _ in range(3))
            op1, op2 = rng.choice("+-*"), rng.choice("+-*")
            inner = _OPS[op1](a, b)
            question, answer = f"({a} {op1} {b}) {op2} {c}", _OPS[op2](inner, c)
        else:
            digits, op = _FORMATS[cfg]
            lo, hi = 10 ** (digits - 1), 10**digits - 1
            a, b = rng.randint(lo, hi), rng.randint(lo, hi)
            answer = a + b if op == "plus" else a - b if op == "minus" else a * b
            question = f"{a} {op} {b}"
        out.append((f"Question: What is {question}?\nAnswer:", f" {answer}"))
    return out


def bench_checkpoint(
    root: Path,
    tokenizer,
    *,
    n_layers: int = 8,
    n_heads: int = 8,
    d_head: int = 64,
    n_kv_heads: int = 4,
    n_ctx: int = 2048,
    seed: int = 0,
) -> Path:
    """A random Llama checkpoint (``d_mlp = 2 d_model``, grouped-query attention, untied
    embeddings) with ``tokenizer``, written under ``root`` once per shape: weights N(0, 1/fan_in),
    embeddings N(0, 1), norm gains 1 + 0.1 N(0, 1), so that single heads move decisions."""
    import torch
    import transformers

    name = f"llama_{n_layers}x{n_heads}_d{d_head}_kv{n_kv_heads}_v{len(tokenizer)}_s{seed}"
    path = Path(root) / name
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    d_model = n_heads * d_head
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=d_model, intermediate_size=2 * d_model, num_hidden_layers=n_layers,
        num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, head_dim=d_head, max_position_embeddings=n_ctx,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in pname:
                p.copy_(noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def hellaswag_shaped_task(n_dist: int, n_test: int = 8, seed: int = 0, data_dir: Optional[Path] = None) -> Task:
    """Multiple choice with HellaSwag's shape: a context of 25 to 110 words, four endings of 8 to 35
    words each, one labelled, scored by ``acc_norm``. Real HellaSwag is not available offline, so
    the words are runs of real English text from BoolQ validation passages (seeded), the label is
    drawn at random: the workload's lengths and protocol are HellaSwag's, its content is not."""
    root = data_dir or default_data_dir()
    path = None if root is None else root / "boolq" / "dev.jsonl"
    if path is None or not path.is_file():
        raise FileNotFoundError("no offline BoolQ validation file to draw text from (boolq/dev.jsonl)")
    words = []
    for line in path.read_text(encoding="utf-8").splitlines()[:600]:
        if line.strip():
            words.extend(json.loads(line)["passage"].split())
    rng = random.Random(seed)

    def run(lo: int, hi: int) -> str:
        n = rng.randint(lo, hi)
        start = rng.randrange(0, len(words) - n)
        return " ".join(words[start : start + n])

    examples = []
    for i in range(n_dist + n_test):
        endings = [" " + run(8, 35) for _ in range(4)]
        examples.append(
            Example(id=f"hellaswag_shaped/{i}", prompt=run(25, 110), choices=tuple(endings), label=rng.randrange(4),
                    meta={"choice_chars": tuple(len(e) - 1 for e in endings)})
        )
    return Task(
        name="hellaswag", answer_type="multiple_choice", dist=Split("dist", tuple(examples[:n_dist])),
        test=Split("test", tuple(examples[n_dist:])), metric="acc_norm",
        options={"seed": seed, "source": "HellaSwag-shaped: words from boolq/dev.jsonl passages"},
    )


def mbpp_task(n_dist: int, max_new_tokens: int, seed: int = 0, data_dir: Optional[Path] = None) -> Task:
    """MBPP (3-shot, judged in the sandbox) with ``n_dist`` discovery problems and a smaller token
    budget (a CPU benchmark); the judge needs ``CEL_LENS_ALLOW_CODE_EXECUTION=1``."""
    from cel_lens.tasks import load_task

    root = data_dir or default_data_dir()
    if root is None or not (root / "mbpp").is_dir():
        raise FileNotFoundError("no offline MBPP files (mbpp/)")
    task = load_task("mbpp", n_dist=n_dist, n_test=4, seed=seed, data_dir=str(root))
    return replace(task, options={**task.options, "max_new_tokens": int(max_new_tokens)})

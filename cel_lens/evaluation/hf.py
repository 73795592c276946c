"""Evaluating a plain Hugging Face model: no hooks, no TransformerLens, the model's own forward.

This is the independent check of an exported checkpoint (:mod:`cel_lens.model.checkpoint_edit`): prompts
are encoded by cel_lens's encoder (:func:`~cel_lens.evaluation.encode.encode_split`, lm-eval's
rules, one row per scored continuation) and decided by its rules
(:func:`~cel_lens.evaluation.choices.aggregate`: exact match = every target token is the argmax;
multiple choice = argmax of summed log-likelihoods; generation = greedy decoding cut at the task's
stop strings and judged by the split's judge), but every logit comes from ``transformers``.

Two encoding settings are cel_lens's, not a checkpoint's: whether a BOS token is prepended
(``prepend_bos``: the run's BOS rule, resolved, :mod:`cel_lens.model.bos`) and the context length
prompts are cut to (``n_ctx``); they are given here (an export records them in
``cel_lens_export.json``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import canonical_dtype
from cel_lens.evaluation.batch import EncodedBatch
from cel_lens.evaluation.choices import aggregate
from cel_lens.evaluation.encode import as_split, chat_choice, encode_split, pad_id, split_answer_entry
from cel_lens.evaluation.generation import _accept, _cut, generation_prompts
from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.heads import HeadSet
from cel_lens.model.bos import read_bos, set_bos_rule
from cel_lens.model.convert import quiet
from cel_lens.progress import progress_bar
from cel_lens.tasks.base import Example, Split

__all__ = ["PlainModel", "plain_model", "load_plain_model", "evaluate_plain"]


@dataclass
class PlainModel:
    """A ``transformers`` causal LM with its tokenizer, and the two settings cel_lens's encoder reads
    (``cfg.default_prepend_bos``, ``cfg.n_ctx``)."""

    hf: Any
    tokenizer: Any
    cfg: SimpleNamespace

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self.hf.parameters()).device


def plain_model(hf: Any, tokenizer: Any, *, prepend_bos: bool, n_ctx: Optional[int] = None) -> PlainModel:
    """Wrap a loaded ``transformers`` model; ``n_ctx`` defaults to its ``max_position_embeddings``."""
    if n_ctx is None:
        n_ctx = int(getattr(hf.config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", 2048))
    model = PlainModel(hf, tokenizer, SimpleNamespace(default_prepend_bos=bool(prepend_bos), n_ctx=int(n_ctx)))
    set_bos_rule(model, "always" if prepend_bos else "never", own=read_bos(tokenizer))
    return model


def load_plain_model(
    path: Union[str, Path],
    *,
    prepend_bos: bool,
    n_ctx: Optional[int] = None,
    device: Optional[str] = None,
    dtype: Union[str, torch.dtype, None] = None,
    attn_implementation: str = "eager",
) -> PlainModel:
    """Load a checkpoint directory with ``AutoModelForCausalLM`` and ``AutoTokenizer`` (local files
    only). ``dtype`` defaults to float32 and ``device`` to CUDA when available; eager attention by
    default, the implementation cel_lens's own models run."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, canonical_dtype(dtype or "float32"))
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with quiet():
        hf = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch_dtype, attn_implementation=attn_implementation, local_files_only=True
        ).to(dev)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    hf.eval()
    return plain_model(hf, tokenizer, prepend_bos=prepend_bos, n_ctx=n_ctx)


def _row_scores(model: PlainModel, batch: EncodedBatch) -> tuple[Float[Tensor, " row"], Bool[Tensor, " row"]]:
    """Summed target log-prob and all-tokens-greedy flag of every row of a ``"rows"``-layout batch."""
    assert batch.rows is not None
    rows = batch.rows.to(model.device)
    logits = model.hf(input_ids=rows.tokens, attention_mask=rows.attention_mask).logits
    picked = logits.gather(1, rows.positions[..., None].expand(-1, -1, logits.shape[-1])).float()  # [row, k, vocab]
    del logits
    token_lp = picked.gather(-1, rows.targets[..., None])[..., 0] - picked.logsumexp(-1)
    hit = picked.argmax(-1) == rows.targets
    mask = rows.target_mask
    return token_lp.masked_fill(~mask, 0.0).sum(-1).cpu(), (hit | ~mask).all(-1).cpu()


def _cache_argument(hf: Any) -> str:
    """The name of the key/value cache in the model's forward (``cache`` since transformers 5.x
    renamed ``past_key_values``); the output field has the same name."""
    return "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"


def _greedy(model: PlainModel, prompts: Sequence[Sequence[int]], budget: int, stops: Sequence[Sequence[str]]) -> list[list[int]]:
    """Greedy continuations of left-padded ``prompts`` with the model's key/value cache; a row stops
    at EOS or once its text contains one of its stop strings (as cel_lens's generation does)."""
    tok, n = model.tokenizer, len(prompts)
    width = max(len(p) for p in prompts)
    tokens = torch.full((n, width), pad_id(model), dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        tokens[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        attn[i, width - len(p):] = 1
    x, attn = tokens.to(model.device), attn.to(model.device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)  # rotary positions count real tokens only
    eos = getattr(tok, "eos_token_id", None)
    out: list[list[int]] = [[] for _ in range(n)]
    finished = [False] * n
    cache, cache_arg = None, _cache_argument(model.hf)
    for _ in range(budget):
        res = model.hf(input_ids=x, attention_mask=attn, position_ids=positions, use_cache=True, **{cache_arg: cache})
        cache, nxt = getattr(res, cache_arg), res.logits[:, -1].argmax(-1)
        _accept(tok, range(n), nxt.tolist(), out, finished, eos, stops)
        if all(finished):
            break
        x, positions = nxt[:, None], positions[:, -1:] + 1
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
    return out


def _generation(model: PlainModel, split: Split, budget: int, chat: bool, batch_size: int, progress: bool) -> list[str]:
    prompts = generation_prompts(model, split, chat, budget)
    stops = [list(split.stop_strings(ex)) for ex in split]
    order = sorted(range(len(split)), key=lambda i: -len(prompts[i]))
    completions = [""] * len(split)
    bar = progress_bar(-(-len(split) // batch_size), progress, f"generate {split.task}/{split.name} (plain HF)", unit="batch")
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        outs = _greedy(model, [prompts[i] for i in idx], budget, [stops[i] for i in idx])
        for j, i in enumerate(idx):
            completions[i] = _cut(model.tokenizer.decode(outs[j], skip_special_tokens=True), stops[i])
        bar.update(1)
    bar.close()
    return completions


def evaluate_plain(
    model: PlainModel,
    split: Union[Split, Sequence[Example]],
    *,
    batch_size: int = 8,
    chat_template: Optional[bool] = None,
    max_new_tokens: Optional[int] = None,
    progress: bool = False,
) -> EvalResult:
    """Per-example results of the plain model on ``split`` (one variant: the model as it is), in the
    form :func:`~cel_lens.evaluation.evaluate` returns; see the module docstring."""
    split = as_split(split)
    answer = split_answer_entry(split)
    answer_type = answer.name
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    chat = chat_choice(split, chat_template)
    metric = split.metric or "acc"
    common = dict(head_sets=[HeadSet()], ids=split.ids, answer_type=answer_type, metric=metric, task=split.task,
                  split=split.name, chat_template=chat)
    if answer.generates:
        budget = max_new_tokens if max_new_tokens is not None else split.max_new_tokens
        if split.judge is None or budget is None:
            raise ValueError(f"generation split {split.task}/{split.name} needs a judge and a max_new_tokens budget")
        with torch.inference_mode():
            completions = _generation(model, split, int(budget), chat, batch_size, progress)
        correct = torch.tensor([[bool(split.judge(ex, c)) for ex, c in zip(split, completions)]], dtype=torch.bool)
        return EvalResult(correct=correct, scores=correct.float(), completions=[completions], **common)
    batches = encode_split(model, split, batch_size, chat_template=chat, share_context=False)
    lp, greedy = [], []
    with torch.inference_mode():
        desc = f"evaluate {split.task}/{split.name} (plain HF)"
        for batch in progress_bar(len(batches), progress, desc, unit="batch", iterable=batches):
            row_lp, row_greedy = _row_scores(model, batch)
            lp.append(row_lp)
            greedy.append(row_greedy)
    lp_all = torch.cat(lp)[None] if lp else torch.zeros(1, 0)
    greedy_all = torch.cat(greedy)[None] if greedy else torch.zeros(1, 0, dtype=torch.bool)
    correct, scores, extra = aggregate(answer_type, metric, batches, len(split), lp_all, greedy_all)
    return EvalResult(correct=correct, scores=scores, extra=extra, **common)

"""``evaluate(model, split, head_sets)``: per-example results, intact and under each head set.

Three protocols, chosen by the split's ``kind`` (lm-evaluation-harness conventions):

* ``exact_match`` (Arithmetic): one teacher-forced forward pass over ``prompt + target[:-1]``
  (right padded: causal attention keeps pads out of real positions and rotary positions stay
  natural); correct iff every target token is the argmax at its position, which equals greedy
  decoding (``tests/evaluation``).
* ``multiple_choice`` (BoolQ, HellaSwag): summed log-likelihood of each choice given the shared
  prompt (:mod:`~cel_lens.evaluation.choices`). The prompt is run once per example: its last
  position scores every choice's first token, and the remaining choice tokens run as continuations
  of a key/value cache of the prompt (one-token choices, as BoolQ's, need no second pass at all).
  Models without a key/value cache (the fused-attention stack's or TransformerLens's) fall back to
  one row per choice.
* ``generation`` (MBPP): batched greedy decoding (:mod:`~cel_lens.evaluation.generation`), judged
  by ``split.judge``.

Teacher-forced protocols run many variants per forward pass and resume ablated passes from the
intact residual stream (:mod:`~cel_lens.evaluation.teacher_forced`), in length-sorted batches of a
token budget (:func:`~cel_lens.evaluation.encode.encode_split`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import einops
import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.evaluation.batch import EncodedBatch
from cel_lens.evaluation.choices import aggregate
from cel_lens.evaluation.encode import as_split, chat_choice, default_max_tokens, encode_split, split_kind
from cel_lens.evaluation.generation import evaluate_generation
from cel_lens.evaluation.result import EvalResult
from cel_lens.evaluation.store import ActivationStore
from cel_lens.evaluation.teacher_forced import score_batches
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.forward import forward_resid, param_device, unembed
from cel_lens.model.kinds import model_name, model_shape
from cel_lens.tasks.base import Example, Split

__all__ = ["evaluate", "logprob_metric", "default_max_rows"]

ROWS_PER_EXAMPLE = 16
"""Rows (variants x sequences) of one forward pass per example of a batch, unless ``max_rows`` is given."""


def default_max_rows(batch_size: int) -> int:
    """The rows of one forward pass :func:`evaluate` uses when no ``max_rows`` is given."""
    return ROWS_PER_EXAMPLE * batch_size


def evaluate(
    model,
    split: Split | Sequence[Example],
    head_sets: Optional[Sequence[HeadsLike]] = None,
    *,
    batch_size: int = 8,
    store: Optional[ActivationStore] = None,
    progress: bool = True,
    max_new_tokens: Optional[int] = None,
    chat_template: Optional[bool] = None,
    max_rows: Optional[int] = None,
    max_tokens: Optional[int] = None,
) -> EvalResult:
    """Evaluate ``model`` on ``split`` intact (``head_sets=None``) or under each head set.

    Results are per example, ``[V, n_examples]`` in the split's order. ``store`` (an
    :class:`~cel_lens.evaluation.store.ActivationStore` built for this model and split) supplies the intact
    results and the residual streams ablated passes resume from; its batching then replaces
    ``batch_size``. ``max_tokens`` bounds the padded positions of one teacher-forced forward pass
    (variants x rows x width; default :func:`~cel_lens.evaluation.encode.default_max_tokens`) and of
    one encoded batch; ``max_rows`` bounds its rows (variants x sequences; for generation, default
    :func:`default_max_rows`). ``chat_template`` wraps each prompt in the tokenizer's chat
    template (default: the split's ``options["chat_template"]`` if it has one, else off).
    ``max_new_tokens`` (generation) defaults to the task's own budget
    (:attr:`~cel_lens.tasks.Split.max_new_tokens`).
    """
    split = as_split(split)
    kind = split_kind(split)
    n_layers, n_heads = model_shape(model)
    name = model_name(model)
    sets = [HeadSet()] if head_sets is None else [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("evaluate needs at least one head set (pass head_sets=None for the intact model)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    chat = chat_choice(split, chat_template)
    rows_budget = int(max_rows) if max_rows else default_max_rows(batch_size)
    tokens_budget = int(max_tokens) if max_tokens else default_max_tokens(batch_size)
    metric = split.metric or "acc"
    common = dict(head_sets=list(sets), ids=split.ids, kind=kind, metric=metric, task=split.task, split=split.name, chat_template=chat)
    if kind == "generation":
        if split.judge is None:
            raise ValueError(f"generation split {split.task}/{split.name} has no judge to score completions")
        budget = max_new_tokens if max_new_tokens is not None else split.max_new_tokens
        if budget is None:
            raise ValueError(
                f"generation split {split.task}/{split.name} sets no options['max_new_tokens']; pass max_new_tokens="
            )
        correct, scores, completions = evaluate_generation(
            model, split, sets, batch_size=batch_size, max_rows=rows_budget,
            max_new_tokens=budget, chat=chat, progress=progress,
        )
        return EvalResult(correct=correct, scores=scores, completions=completions, **common)
    if kind == "multiple_choice" and metric not in ("acc", "acc_norm"):
        raise ValueError(f"multiple-choice metric must be 'acc' or 'acc_norm', got {metric!r}")
    if store is not None:
        store.check(model, split, chat)
        batches = store.batches
    else:
        batches = encode_split(model, split, batch_size, chat_template=chat, max_tokens=tokens_budget)
    with torch.inference_mode():
        lp, greedy = score_batches(
            model, batches, sets, store=store, max_tokens=tokens_budget, max_rows=max_rows, progress=progress,
            desc=f"evaluate {split.task}/{split.name} x{len(sets)}",
        )
    correct, scores, extra = aggregate(kind, metric, batches, len(split), lp, greedy)
    return EvalResult(correct=correct, scores=scores, extra=extra, **common)


def logprob_metric(model, batch: EncodedBatch, fwd_hooks: Sequence = ()) -> Float[Tensor, " batch"]:
    """Differentiable log-prob of each example's correct answer (exact match: the target's tokens;
    multiple choice: the labelled choice's tokens), summed over its tokens, in one forward pass
    over ``batch.answer`` with ``fwd_hooks`` active (e.g. attribution patching at ``hook_z``).
    Order: ``batch.example_index``."""
    answer = batch.answer.to(param_device(model))
    resid = forward_resid(model, answer.tokens, fwd_hooks=fwd_hooks, attention_mask=answer.attention_mask)
    idx = einops.repeat(answer.positions, "b k -> b k d", d=resid.shape[-1])
    picked = resid.gather(1, idx)[answer.target_mask]  # [n, d]: real target positions only
    logits = unembed(model, picked).float()
    tgt = answer.targets[answer.target_mask]
    lp = logits.gather(-1, tgt[:, None])[:, 0] - logits.logsumexp(-1)
    out = torch.zeros(answer.target_mask.shape, dtype=lp.dtype, device=lp.device)
    out = out.masked_scatter(answer.target_mask, lp)
    return out.sum(-1)

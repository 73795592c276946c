"""Cutting a split into shards along the local backend's batches, one per Ray actor.

The local evaluator orders a split longest first and cuts it into batches of ``batch_size``
(:func:`cel_lens.evaluation.encode_split`; generation does the same with prompts).
:func:`plan_shards` hands each actor a contiguous run of those batches (balanced by their token
count), so every actor encodes exactly the batches the local backend would, and evaluates every
head set of each call on them with the same variant chunks and the same stored layers. The forward
passes are therefore the local ones, shape for shape, and the per-example results are identical to
the local backend's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence, Union

import torch

from cel_lens.evaluation.encode import chat_choice, encode_split, split_answer_entry
from cel_lens.evaluation.evaluator import default_max_rows
from cel_lens.evaluation.generation import generation_prompts
from cel_lens.evaluation.store import store_layers
from cel_lens.model.model_types import model_shape, supports_resume
from cel_lens.tasks.base import Split

__all__ = ["Shard", "plan_shards", "shard_split"]



@dataclass(frozen=True)
class Shard:
    """One actor's part of a split: the examples of a run of consecutive local-backend batches.

    ``examples`` are indices into the split in evaluation order (longest first, as the local
    backend orders them); ``layers`` the activation-store layers (the local backend's choice for the
    whole split, ``"all"`` or a tuple); ``max_rows`` the rows per forward pass (``None``: the
    evaluator's default; set for generation so that variant chunks match the whole split's).
    """

    split: str
    index: int
    examples: tuple[int, ...]
    layers: Union[str, tuple[int, ...]] = "all"
    max_rows: Optional[int] = None

    def __len__(self) -> int:
        return len(self.examples)


def _balanced_bounds(costs: Sequence[float], n: int) -> list[int]:
    """Cut points ``0 = b_0 < b_1 < ... < b_n = len(costs)``: ``n`` contiguous, non-empty runs whose
    summed costs are as close as possible to ``total / n`` at each cut."""
    m = len(costs)
    n = max(1, min(n, m))
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    total = prefix[-1]
    bounds = [0]
    for k in range(1, n):
        lo, hi = bounds[-1] + 1, m - (n - k)
        target = total * k / n
        bounds.append(min(range(lo, hi + 1), key=lambda i: (abs(prefix[i] - target), i)))
    bounds.append(m)
    return bounds


def plan_shards(
    model: Any,
    split: Split,
    n_shards: int,
    *,
    batch_size: int = 8,
    store_budget: Optional[int] = None,
    store_dtype: Optional[torch.dtype] = None,
) -> list[Shard]:
    """Cut ``split`` into at most ``n_shards`` shards along the local backend's batches.

    The batches are those :func:`cel_lens.evaluation.evaluate` forms for the whole split (teacher
    forced: :func:`~cel_lens.evaluation.encode_split`, longest first; generation: prompts longest
    first); runs of consecutive batches are balanced by their token count (rows x positions, or
    prompt length plus the generation budget). Evaluating a shard's examples in the given order
    re-forms exactly those batches, so results equal the local backend's. Every example is in
    exactly one shard; a split of fewer batches than ``n_shards`` gets fewer shards.
    """
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(split)
    if n == 0:
        return []
    chat = chat_choice(split, None)
    if split_answer_entry(split).generates:
        batches, costs, per_chunk = _generation_batches(model, split, chat, batch_size)
        layers: Union[str, tuple[int, ...]] = "all"
    else:
        encoded = encode_split(model, split, batch_size, chat_template=chat)
        batches = [b.example_index.tolist() for b in encoded]
        costs = [sum(math.prod(s) for s in b.part_shapes(1)) for b in encoded]
        layers = _store_layers(model, encoded, store_budget, store_dtype)
        per_chunk = None
    bounds = _balanced_bounds(costs, n_shards)
    shards = []
    for k, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
        examples = tuple(i for b in batches[a:z] for i in b)
        max_rows = None if per_chunk is None else per_chunk * max(1, min(batch_size, len(examples)))
        shards.append(Shard(split.name, k, examples, layers, max_rows))
    return shards


def _generation_batches(model: Any, split: Split, chat: bool, batch_size: int) -> tuple[list[list[int]], list[int], int]:
    """Generation batches (prompts longest first), their costs (rows x (prompt + budget)), and the
    variants per batch that :func:`~cel_lens.evaluation.evaluate` runs for the whole split
    (``max(1, max_rows // min(batch_size, n))``): every shard gets that count."""
    budget = split.max_new_tokens
    if budget is None:
        raise ValueError(f"generation split {split.task}/{split.name} sets no options['max_new_tokens']")
    n = len(split)
    prompts = generation_prompts(model, split, chat, budget)
    order = sorted(range(n), key=lambda i: -len(prompts[i]))
    batches = [order[s : s + batch_size] for s in range(0, n, batch_size)]
    costs = [len(b) * (max(len(prompts[i]) for i in b) + budget) for b in batches]
    per_chunk = max(1, default_max_rows(batch_size) // max(1, min(batch_size, n)))
    return batches, costs, per_chunk


def _store_layers(
    model: Any, batches: Sequence[Any], store_budget: Optional[int], store_dtype: Optional[torch.dtype]
) -> Union[str, tuple[int, ...]]:
    """The layers the local store of the whole split keeps (``"all"`` without a budget), so that
    every shard's store resumes passes at the layers the local store would."""
    if store_budget is None:
        return "all"
    n_layers, _ = model_shape(model)
    candidates = list(range(1, n_layers)) if supports_resume(model) else []
    itemsize = torch.empty((), dtype=store_dtype or next(model.parameters()).dtype).element_size()
    return tuple(store_layers(batches, candidates, int(model.cfg.d_model), itemsize, store_budget))


def shard_split(split: Split, shard: Shard) -> Split:
    """The sub-split of ``split`` holding ``shard``'s examples, in the shard's order."""
    return replace(split, examples=tuple(split.examples[i] for i in shard.examples))

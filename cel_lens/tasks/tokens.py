"""Token-level tasks: a :class:`~cel_lens.tasks.Task` from token tensors and answer ids, no tokenizer.

Toy models (a TransformerLens ``HookedTransformer`` built from a config, a model trained on
synthetic sequences) often have no tokenizer at all. :func:`token_task` builds a task from what such
a user already has: a ``[batch, pos]`` tensor of prompts and the id of each answer (or ``[batch, k]``
answer ids, all of which must be predicted). Each example carries its ids in ``meta["prompt_ids"]``
/ ``meta["target_ids"]``, which evaluation uses as they are (no BOS added, nothing re-encoded), so
:func:`cel_lens.evaluate` and :func:`cel_lens.search` run on it like on any exact-match task.
The prompt and target strings are the ids written out, so disjointness and deduplication work.
"""

from __future__ import annotations

import random
from typing import Optional, Sequence, Union

import torch
from jaxtyping import Int
from torch import Tensor

from cel_lens.tasks.base import Example, Task

__all__ = ["token_task", "ids_text"]

TokenRows = Union[Int[Tensor, "batch pos"], Sequence[Sequence[int]]]
AnswerIds = Union[Int[Tensor, "batch"], Int[Tensor, "batch k"], Sequence[int], Sequence[Sequence[int]]]


def ids_text(ids: Sequence[int]) -> str:
    """The stand-in text of a token-id sequence (``"<ids 3 14 15>"``): what the example's prompt
    and target strings hold, so content hashes and the split-overlap check see the ids."""
    return "<ids " + " ".join(str(int(i)) for i in ids) + ">"


def _rows(values: Union[Tensor, Sequence], what: str) -> list[list[int]]:
    if isinstance(values, Tensor):
        if values.dtype.is_floating_point or values.dtype == torch.bool:
            raise TypeError(f"{what} must hold integer token ids, got a {values.dtype} tensor")
        values = values.tolist()
    rows = [[int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)] for v in values]
    if any(len(r) == 0 for r in rows):
        raise ValueError(f"{what}: every row needs at least one token id")
    return rows


def token_task(
    tokens: TokenRows,
    answers: AnswerIds,
    *,
    name: str = "tokens",
    n_test: Optional[int] = None,
    seed: int = 0,
) -> Task:
    """An exact-match task from ``tokens`` (``[batch, pos]`` prompt ids, or a list of id lists of
    any lengths) and ``answers`` (``[batch]`` answer ids, or ``[batch, k]`` ids of a k-token answer):
    an example is correct when the model's argmax after its prompt is its answer (every answer token,
    teacher-forced). The rows are shuffled with ``seed`` and the first ``n_test`` (default: half)
    form D_test, the rest D_dist; rows that repeat an earlier prompt are dropped, so no prompt sits
    in both splits (the task's ``options["dropped_duplicates"]`` counts them)."""
    prompts, targets = _rows(tokens, "tokens"), _rows(answers, "answers")
    if len(prompts) != len(targets):
        raise ValueError(f"tokens has {len(prompts)} rows but answers has {len(targets)}")
    seen: set[tuple[int, ...]] = set()
    examples = []
    for i, (prompt, target) in enumerate(zip(prompts, targets)):
        if tuple(prompt) in seen:
            continue
        seen.add(tuple(prompt))
        examples.append(Example(id=f"{name}/{i}", prompt=ids_text(prompt), target=ids_text(target),
                                meta={"prompt_ids": tuple(prompt), "target_ids": tuple(target)}))
    random.Random(seed).shuffle(examples)
    n_t = len(examples) // 2 if n_test is None else int(n_test)
    if not 1 <= n_t < len(examples):
        raise ValueError(f"n_test must leave at least one example in each split: {n_t} of {len(examples)} distinct prompts")
    options = {"seed": seed, "n_dist": len(examples) - n_t, "n_test": n_t, "source": "token ids",
               "dropped_duplicates": len(prompts) - len(examples)}
    return Task(name=name, answer_type="exact_match", dist=examples[n_t:], test=examples[:n_t], options=options)

"""What an answer prior can act on in a split: :func:`answer_key`.

A model can gain accuracy without gaining capability by moving its *answer prior*: answering one of
a task's fixed answers more often. That needs a fixed set of answers. Multiple choice has one (the
choice positions; BoolQ's `` no``/`` yes``); exact match has one only when the targets repeat from a
small set (the organism's `` pos``/`` neg``), not for free-form answers (Arithmetic's numbers);
generation (MBPP) has none: a program is judged by its tests.
"""

from __future__ import annotations

import torch

from cel_lens.evaluation.encode import as_split, split_answer_entry
from cel_lens.oracle import AnswerKey
from cel_lens.tasks.base import Split

__all__ = ["answer_key", "MAX_CLOSED_ANSWERS"]

MAX_CLOSED_ANSWERS = 16
"""An exact-match task whose targets take at most this many distinct values has a closed answer set."""


def answer_key(split: Split) -> AnswerKey:
    """The split's :class:`~cel_lens.oracle.AnswerKey`: its answer type, each example's gold answer as an
    index into the answer names (multiple choice: the choice position, named by its text when every
    example has the same choices; exact match: the target, when at most :data:`MAX_CLOSED_ANSWERS`
    distinct targets occur), or no labels where answers form no closed set."""
    split = as_split(split)
    answer = split_answer_entry(split)
    answer_type = answer.name
    if answer.scores_choices:
        labels = torch.tensor([int(e.label) for e in split], dtype=torch.long)
        n_choices = max((len(e.choices) for e in split), default=0)
        same = len({tuple(e.choices) for e in split}) == 1
        names = tuple(split[0].choices) if same and len(split) else tuple(f"choice {j}" for j in range(n_choices))
        return AnswerKey(answer_type, labels, names)
    if answer.argmax_target:
        targets = [e.target or "" for e in split]
        distinct = sorted(set(targets))
        if 0 < len(distinct) <= MAX_CLOSED_ANSWERS and len(distinct) < len(targets):
            index = {t: i for i, t in enumerate(distinct)}
            return AnswerKey(answer_type, torch.tensor([index[t] for t in targets], dtype=torch.long), tuple(distinct))
    return AnswerKey(answer_type, None, ())


"""Encoded batches for teacher-forced scoring: what one forward pass over a batch needs."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.tasks.answer_types import answer_type_entry

__all__ = ["TeacherForced", "EncodedBatch", "right_pad", "teacher_forced_rows", "build_batch", "length_groups", "MAX_PADDING"]

MAX_PADDING = 0.02
"""Largest share of a batch's (or a continuation group's) positions that may be padding.

Small, because a pad costs what a token costs and a scan gains nothing from wide batches: its
forward passes fill up with variants (heads) instead of examples. On the benchmarks' 16 real BoolQ
prompts 0.1 let 6.8 % of the computed positions be padding (5 batches) and 0.02 lets 0.5 % (13
batches); at 400 prompts it is 2.3 % against 1.2 % (52 and 63 batches)."""

Encoded = tuple[list[int], list[list[int]], int, list[int]]
"""One encoded example: context ids, continuation ids per choice, label, choice lengths in characters."""


@dataclass
class TeacherForced:
    """Right-padded rows ``prompt + continuation[:-1]`` scored in one forward pass.

    ``positions[r, j]`` is the position whose logits predict ``targets[r, j]``; entries where
    ``target_mask`` is False are padding (position 0, target 0) and are never unembedded.
    """

    tokens: Int[Tensor, "row pos"]
    attention_mask: Int[Tensor, "row pos"]
    positions: Int[Tensor, "row k"]
    targets: Int[Tensor, "row k"]
    target_mask: Bool[Tensor, "row k"]

    def to(self, device: torch.device | str) -> "TeacherForced":
        """The same rows on ``device``."""
        return TeacherForced(*(getattr(self, f.name).to(device) for f in fields(self)))


@dataclass
class EncodedBatch:
    """A batch of examples encoded for teacher-forced scoring (exact match or multiple choice).

    Every scored continuation is a *row* (one per example for exact match, one per choice for
    multiple choice); ``row_example`` maps rows to examples of the batch, ``example_index``
    examples to their index in the split. Two layouts hold the model inputs:

    * ``"rows"``: :class:`TeacherForced` ``rows``, one right-padded sequence per row;
    * ``"shared"`` (multiple choice): each prompt once, right padded (``context_tokens``), and each
      choice's tokens but its last as a right-padded continuation (``cont_tokens``, zero width when
      every choice is one token) that follows its prompt's last real token. ``targets[r, 0]`` is
      scored at the prompt's last position (``context_last``) and ``targets[r, j]`` at continuation
      position ``j - 1``.

    ``answer`` holds one :class:`TeacherForced` row per example for the correct continuation (the
    target, or the labelled choice): what :func:`logprob_metric` differentiates.
    """

    answer_type: str
    example_index: Int[Tensor, " example"]
    row_example: Int[Tensor, " row"]
    row_choice: Int[Tensor, " row"]
    labels: Int[Tensor, " example"]
    choice_chars: Float[Tensor, " row"]
    targets: Int[Tensor, "row k"]
    target_mask: Bool[Tensor, "row k"]
    answer: TeacherForced
    rows: Optional[TeacherForced] = None
    context_tokens: Optional[Int[Tensor, "example ctx"]] = None
    context_mask: Optional[Int[Tensor, "example ctx"]] = None
    cont_tokens: Optional[Int[Tensor, "row cont"]] = None
    cont_mask: Optional[Int[Tensor, "row cont"]] = None
    prefix: int = 0
    """``"rows"`` layout: the first ``prefix`` tokens every row shares, computed once per variant
    (:mod:`~cel_lens.evaluation.prefix`); 0: none."""

    @property
    def layout(self) -> str:
        """``"rows"`` or ``"shared"`` (see the class docstring)."""
        return "rows" if self.rows is not None else "shared"

    @property
    def context_last(self) -> Int[Tensor, " example"]:
        """Position of each prompt's last real token (``"shared"`` layout)."""
        assert self.context_mask is not None
        return self.context_mask.sum(-1) - 1

    @property
    def padded_tokens(self) -> int:
        """Positions one intact pass over the batch computes (padding included)."""
        if self.rows is not None:
            return int(self.rows.tokens.numel()) - (self.rows.tokens.shape[0] - 1) * self.prefix
        assert self.context_tokens is not None and self.cont_tokens is not None
        return int(self.context_tokens.numel() + self.cont_tokens.numel())

    @property
    def computed_tokens(self) -> int:
        """Positions one intact pass computes: :attr:`padded_tokens`, less the continuation padding
        that running continuations in groups of like length (:func:`length_groups`) skips."""
        if self.rows is not None:
            return self.padded_tokens
        assert self.context_tokens is not None and self.cont_mask is not None
        lengths = self.cont_mask.sum(1).tolist()
        return int(self.context_tokens.numel()) + sum(len(g) * int(lengths[g[0]]) for g in length_groups(lengths))

    @property
    def real_tokens(self) -> int:
        """Positions of real tokens among :attr:`padded_tokens`."""
        if self.rows is not None:
            return int(self.rows.attention_mask.sum()) - (self.rows.tokens.shape[0] - 1) * self.prefix
        assert self.context_mask is not None and self.cont_mask is not None
        return int(self.context_mask.sum() + self.cont_mask.sum())

    @property
    def n_examples(self) -> int:
        """Examples in the batch."""
        return int(self.example_index.shape[0])

    @property
    def n_rows(self) -> int:
        """Scored continuations in the batch."""
        return int(self.row_example.shape[0])

    def select(self, local: Sequence[int], index: Sequence[int]) -> tuple["EncodedBatch", list[Tensor]]:
        """The batch restricted to its examples ``local`` (positions in this batch, ascending),
        renumbered ``index`` in their new split, at the same padded widths; and, per part of
        :meth:`part_shapes`, the indices along its first dimension that the restricted batch keeps
        (a stored residual stream of this batch, sliced by them, is the restricted batch's). Not
        for a batch with a shared prefix."""
        if self.prefix:
            raise ValueError("a batch with a shared prefix cannot be restricted to some of its examples")
        ex = torch.as_tensor(list(local), dtype=torch.long)
        keep = torch.isin(self.row_example, ex).nonzero()[:, 0]
        renumber = torch.full((self.n_examples,), -1, dtype=torch.long)
        renumber[ex] = torch.arange(len(ex))
        sub = replace(
            self, example_index=torch.as_tensor(list(index), dtype=torch.long), row_example=renumber[self.row_example[keep]],
            row_choice=self.row_choice[keep], labels=self.labels[ex], choice_chars=self.choice_chars[keep],
            targets=self.targets[keep], target_mask=self.target_mask[keep], answer=_pick(self.answer, ex),
            rows=_pick(self.rows, keep), context_tokens=_pick(self.context_tokens, ex),
            context_mask=_pick(self.context_mask, ex), cont_tokens=_pick(self.cont_tokens, keep),
            cont_mask=_pick(self.cont_mask, keep),
        )
        return sub, [keep] if self.rows is not None else [ex, keep]

    def part_shapes(self, d_model: int) -> list[tuple[int, int, int]]:
        """Shapes of the residual-stream tensors one layer of this batch has: ``[rows, pos, d]``
        for the ``"rows"`` layout (a shared prefix's ``[1, prefix, d]`` first, then the rows after it),
        the contexts' and the continuations' for ``"shared"``."""
        if self.rows is not None and self.prefix:
            n, width = self.rows.tokens.shape
            return [(1, self.prefix, d_model), (n, width - self.prefix, d_model)]
        if self.rows is not None:
            return [(*self.rows.tokens.shape, d_model)]
        assert self.context_tokens is not None and self.cont_tokens is not None
        return [(*self.context_tokens.shape, d_model), (*self.cont_tokens.shape, d_model)]


def _pick(value, index: Tensor):
    """``value``'s entries ``index`` along its first dimension (every field of a
    :class:`TeacherForced`); ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, TeacherForced):
        return TeacherForced(*(getattr(value, f.name)[index] for f in fields(value)))
    return value[index]


def length_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of the non-zero ``lengths``, longest first, cut into groups padded at most
    :data:`MAX_PADDING` (a group closes before the row that would
    push it over)."""
    order = [i for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]) if lengths[i] > 0]
    groups: list[list[int]] = []
    real = 0
    for i in order:
        if groups:
            cur = groups[-1]
            padded = lengths[cur[0]] * (len(cur) + 1)
            if padded - real - lengths[i] <= MAX_PADDING * padded:
                cur.append(i)
                real += lengths[i]
                continue
        groups.append([i])
        real = lengths[i]
    return groups


def right_pad(
    seqs: Sequence[Sequence[int]], pad: int, width: Optional[int] = None
) -> tuple[Int[Tensor, "row pos"], Int[Tensor, "row pos"]]:
    """Token ids of ``seqs`` right padded with ``pad`` to the longest (or to ``width``), and their
    attention mask (1 on real tokens). Right padding keeps each sequence at its own positions, so
    causal attention alone keeps the pads out of every real position."""
    if width is None:
        width = max((len(s) for s in seqs), default=0)
    tokens = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return tokens, mask


def teacher_forced_rows(pairs: Sequence[tuple[list[int], list[int]]], pad: int) -> TeacherForced:
    """Right-padded rows ``context + continuation[:-1]`` of (context, continuation) id pairs."""
    tokens, mask = right_pad([ctx + cont[:-1] for ctx, cont in pairs], pad)
    targets, target_mask = right_pad([cont for _, cont in pairs], 0)
    positions = torch.zeros_like(targets)
    for r, (ctx, cont) in enumerate(pairs):
        positions[r, : len(cont)] = torch.arange(len(ctx) - 1, len(ctx) - 1 + len(cont))
    return TeacherForced(tokens, mask, positions, targets, target_mask.bool())


def build_batch(
    answer_type: str, index: list[int], encoded: list[tuple[list[int], list[list[int]], int, list[int]]], pad: int, shared: bool,
    prefix: int = 0,
) -> EncodedBatch:
    """The :class:`EncodedBatch` of encoded examples (``index``: their positions in the split), in
    the ``"shared"`` layout when ``shared`` (multiple choice), else ``"rows"`` (``prefix``: tokens
    every row shares, see :attr:`EncodedBatch.prefix`)."""
    row_example, row_choice, chars, pairs = [], [], [], []
    for b, (ctx, conts, _, lens) in enumerate(encoded):
        for c, cont in enumerate(conts):
            row_example.append(b)
            row_choice.append(c)
            chars.append(float(lens[c]))
            pairs.append((ctx, cont))
    labels = [lab for _, _, lab, _ in encoded]
    answer = teacher_forced_rows([(ctx, conts[lab]) for ctx, conts, lab, _ in encoded], pad)
    common = dict(
        answer_type=answer_type,
        example_index=torch.tensor(index, dtype=torch.long),
        row_example=torch.tensor(row_example, dtype=torch.long),
        row_choice=torch.tensor(row_choice, dtype=torch.long),
        labels=torch.tensor(labels, dtype=torch.long),
        choice_chars=torch.tensor(chars, dtype=torch.float32),
        answer=answer,
    )
    if not shared:
        rows = answer if answer_type_entry(answer_type).argmax_target else teacher_forced_rows(pairs, pad)
        return EncodedBatch(targets=rows.targets, target_mask=rows.target_mask, rows=rows, prefix=int(prefix), **common)
    context, context_mask = right_pad([ctx for ctx, *_ in encoded], pad)
    k = max(len(cont) for _, cont in pairs)
    cont_tokens, cont_mask = right_pad([cont[:-1] for _, cont in pairs], pad, width=k - 1)
    targets, target_mask = right_pad([cont for _, cont in pairs], 0)
    return EncodedBatch(
        targets=targets,
        target_mask=target_mask.bool(),
        context_tokens=context,
        context_mask=context_mask,
        cont_tokens=cont_tokens,
        cont_mask=cont_mask,
        **common,
    )

"""From per-row scores to per-example results: exact match, and multiple choice's acc/acc_norm.

A *row* is one scored continuation (the target, or one choice). Exact match: the example is correct
iff every target token is the greedy argmax. Multiple choice: ``acc`` = argmax of the summed
log-likelihoods, ``acc_norm`` = argmax of the sums divided by each choice's length in characters
(lm-eval's rule: without the delimiting space); the score is the margin of the correct choice over
the best other one (> 0 iff correct). ``choice_score`` is each choice's score on the scale the
metric compares (what a calibration of the answer prior is fitted on).
"""

from __future__ import annotations

from typing import Sequence

import einops
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.evaluation.batch import EncodedBatch
from cel_lens.evaluation.precision import Margins
from cel_lens.tasks.answer_types import answer_type_entry

__all__ = ["aggregate", "decision_margins"]


def aggregate(
    answer_type: str,
    metric: str,
    batches: Sequence[EncodedBatch],
    n_examples: int,
    lp: Float[Tensor, "variant row"],
    greedy: Bool[Tensor, "variant row"],
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Per-example correct/scores/extra from row scores (rows in batch order)."""
    n_var = lp.shape[0]
    ex = torch.cat([b.example_index[b.row_example] for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    if answer_type_entry(answer_type).argmax_target:
        correct = torch.zeros(n_var, n_examples, dtype=torch.bool)
        scores = torch.full((n_var, n_examples), float("nan"))
        correct[:, ex] = greedy
        scores[:, ex] = lp
        return correct, scores, {}
    choice = torch.cat([b.row_choice for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    chars = torch.cat([b.choice_chars for b in batches]) if batches else torch.zeros(0)
    labels = torch.zeros(n_examples, dtype=torch.long)
    for b in batches:
        labels[b.example_index] = b.labels
    n_choices = int(choice.max()) + 1 if choice.numel() else 1
    ll = torch.full((n_var, n_examples, n_choices), float("-inf"))
    norm = torch.full((n_var, n_examples, n_choices), float("-inf"))
    ll[:, ex, choice] = lp
    norm[:, ex, choice] = lp / chars.clamp_min(1.0)
    acc = ll.argmax(-1) == labels
    acc_norm = norm.argmax(-1) == labels
    headline = norm if metric == "acc_norm" else ll
    gold = headline.gather(-1, einops.repeat(labels, "n -> v n 1", v=n_var))[..., 0]
    others = headline.scatter(-1, einops.repeat(labels, "n -> v n 1", v=n_var), float("-inf")).amax(-1)
    choice_ll = torch.where(torch.isinf(ll) & (ll < 0), torch.full_like(ll, float("nan")), ll)
    # the scale the metric compares (acc: choice_ll, acc_norm: per character): what a calibration fits
    choice_score = torch.where(torch.isnan(choice_ll), choice_ll, headline)
    correct = acc_norm if metric == "acc_norm" else acc
    return correct, gold - others, {"acc": acc, "acc_norm": acc_norm, "choice_ll": choice_ll, "choice_score": choice_score}


def decision_margins(
    answer_type: str,
    batches: Sequence[EncodedBatch],
    n_examples: int,
    lp: Float[Tensor, "variant row"],
    row_margin: Float[Tensor, "variant row"],
) -> Margins:
    """What each (variant, example) decision was made by, for :func:`~cel_lens.evaluation.precision.recompute_mask`:
    exact match, the row's smallest target margin; multiple choice, each choice's summed
    log-likelihood, tokens and characters (missing choices: ``-inf``, 0 tokens)."""
    n_var = lp.shape[0]
    ex = torch.cat([b.example_index[b.row_example] for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    if answer_type_entry(answer_type).argmax_target:
        token = torch.full((n_var, n_examples), float("inf"))
        token[:, ex] = row_margin
        return Margins(token=token)
    choice = torch.cat([b.row_choice for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    n_choices = int(choice.max()) + 1 if choice.numel() else 1
    ll = torch.full((n_var, n_examples, n_choices), float("-inf"))
    ll[:, ex, choice] = lp
    tokens = torch.zeros(n_examples, n_choices)
    chars = torch.ones(n_examples, n_choices)
    if batches:
        tokens[ex, choice] = torch.cat([b.target_mask.sum(1).float() for b in batches])
        chars[ex, choice] = torch.cat([b.choice_chars for b in batches])
    return Margins(choice_ll=ll, choice_tokens=tokens, choice_chars=chars)

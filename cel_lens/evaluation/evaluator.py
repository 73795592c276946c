"""``evaluate(model, split, head_sets)``: per-example results, intact and under each head set.

Three protocols, chosen by the split's ``answer_type`` (lm-evaluation-harness conventions):

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

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.evaluation.batch import EncodedBatch, TeacherForced, teacher_forced_rows
from cel_lens.evaluation.choices import aggregate, decision_margins
from cel_lens.evaluation.encode import as_split, chat_choice, default_max_tokens, encode_split, precision_kind, split_answer_entry
from cel_lens.evaluation.generation import evaluate_generation
from cel_lens.evaluation.context import EvalContext, RecomputeTally
from cel_lens.evaluation.prefix import PREFIX_BOUND, can_share_prefix
from cel_lens.evaluation.precision import (
    Margins, check_precision, compute_precision, float32_model, pair_check, precision_entry, recompute_groups,
    recompute_mask, resolve_precision, split_key,
)
from cel_lens.evaluation.precision_probe import note_rechecks
from cel_lens.evaluation.precision_tight import tight_check, tight_first
from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.evaluation.seal import record_test_read
from cel_lens.evaluation.store import ActivationStore
from cel_lens.evaluation.teacher_forced import score_batches
from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.model.forward import forward_resid, param_device, unembed
from cel_lens.model.model_types import model_name, model_shape
from cel_lens.model.processing import warn_if_processed
from cel_lens.tasks.answer_types import AnswerTypeEntry, answer_type_entry
from cel_lens.tasks.base import Example, Split, Task
from cel_lens.threads import configure_threads

__all__ = ["evaluate", "logprob_metric", "choice_margin", "default_max_rows"]

ROWS_PER_EXAMPLE = 16
"""Rows (variants x sequences) of one forward pass per example of a batch, unless ``max_rows`` is given."""


def default_max_rows(batch_size: int) -> int:
    """The rows of one forward pass :func:`evaluate` uses when no ``max_rows`` is given."""
    return ROWS_PER_EXAMPLE * batch_size


def evaluate(
    model,
    split: Split | Task | str | Sequence[Example],
    head_sets: Optional[Sequence[HeadsLike]] = None,
    *,
    batch_size: int = 8,
    store: Optional[ActivationStore] = None,
    progress: bool = True,
    max_new_tokens: Optional[int] = None,
    chat_template: Optional[bool] = None,
    max_rows: Optional[int] = None,
    max_tokens: Optional[int] = None,
    precision: Optional[str] = None,
    context: Optional[EvalContext] = None,
) -> EvalResult:
    """Evaluate ``model`` on ``split`` intact (``head_sets=None``) or under each head set.

    ``split`` is a :class:`~cel_lens.tasks.Split`, a list of examples, or a task (a
    :class:`~cel_lens.tasks.Task` or a name such as ``"organism_a"``), which means its test split.

    Results are per example, ``[V, n_examples]`` in the split's order. ``store`` (an
    :class:`~cel_lens.evaluation.store.ActivationStore` built for this model and split) supplies the intact
    results and the residual streams ablated passes resume from; its batching then replaces
    ``batch_size``. ``max_tokens`` bounds the padded positions of one teacher-forced forward pass
    (variants x rows x width; default :func:`~cel_lens.evaluation.encode.default_max_tokens`) and of
    one encoded batch; ``max_rows`` bounds its rows (variants x sequences; for generation, default
    :func:`default_max_rows`). ``chat_template`` wraps each prompt in the tokenizer's chat
    template (default: the split's ``options["chat_template"]`` if it has one, else off).
    ``max_new_tokens`` (generation) defaults to the task's own budget
    (:attr:`~cel_lens.tasks.Split.max_new_tokens`). ``context``: the evaluation's settings
    (:class:`~cel_lens.evaluation.context.EvalContext`: precision, ablation kind, prefix sharing,
    who reads D_test, the recompute tally; default: built here from the environment, with zero
    ablation). ``precision`` (replaces the context's): ``"float32"`` (the model as it is),
    ``"bf16"`` (bfloat16 compute, every decision within the bf16 error bound recomputed in float32,
    so the bits equal float32's: :mod:`~cel_lens.evaluation.precision`) or ``"auto"`` (bf16 where
    the hardware computes it natively and it was measured to pay). A single head set (``"L0H0+L1H2"``, a
    :class:`~cel_lens.heads.Head` or :class:`~cel_lens.heads.HeadSet`) counts as a list of one.
    """
    warn_if_processed(model)
    configure_threads(model)  # one thread for a tiny model (cel_lens.threads)
    split = as_split(split)
    answer = split_answer_entry(split)
    answer_type = answer.name
    sets = _head_sets(model, head_sets)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ctx = context if context is not None else EvalContext.from_environment(precision)
    if precision is not None and context is not None:
        ctx = ctx.with_(precision=check_precision(precision))
    kind = precision_kind(model, split, chat_template)
    prec = resolve_precision(ctx.precision, model, kind)
    chat = chat_choice(split, chat_template)
    record_test_read(model, split, sets, reader=ctx.reader)  # the sealed test split: every D_test read is recorded (by content)
    metric = split.metric or "acc"
    budget = _generation_budget(split, answer, max_new_tokens)
    answer.check_metric(metric)
    if store is not None and answer.uses_store:
        store.check(model, split, chat)
    share = ctx.share_prefix and can_share_prefix(model)
    plan = _Plan(answer, metric, chat, batch_size, max_rows, max_tokens, budget, progress, ctx.ablation, share)
    common = dict(head_sets=list(sets), ids=split.ids, answer_type=answer_type, metric=metric, task=split.task, split=split.name, chat_template=chat)
    if not precision_entry(prec).reduced:
        if share:  # a shared prefix: the decisions within its bound are recomputed unshared
            out = _run(model, split, sets, plan, store, margins=Margins())
            near = recompute_mask(answer_type, out.pop("margins"), PREFIX_BOUND, PREFIX_BOUND, pair_bound=PREFIX_BOUND)
            _recompute(out, near, model, split, sets, plan)
        else:
            out = _run(model, split, sets, plan, store)
        ctx.tally.add(split_key(split), torch.zeros_like(out["correct"]))
        return EvalResult(**out, **common)
    out, redo = _bf16_run(model, split, sets, plan, store, prec, ctx.tally)
    ctx.tally.add(split_key(split), redo)
    if precision_entry(ctx.precision).automatic:  # auto's choice, checked against what it cost (resolve_precision reads it)
        note_rechecks(model, kind, int(redo.sum()), int(redo.numel()))
    return EvalResult(**out, **common, precision=prec, recomputed=redo)


def _head_sets(model, head_sets: Optional[Sequence[HeadsLike]] | HeadsLike) -> list[HeadSet]:
    """The head sets to evaluate, checked against ``model`` (``None``: the intact model; one head
    set counts as a list of one)."""
    if isinstance(head_sets, (str, Head, HeadSet)):
        head_sets = [head_sets]
    n_layers, n_heads = model_shape(model)
    name = model_name(model)
    sets = [HeadSet()] if head_sets is None else [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("evaluate needs at least one head set (pass head_sets=None for the intact model)")
    return sets


@dataclass(frozen=True)
class _Plan:
    """How :func:`evaluate` runs a split (the same for its bf16 pass and its float32 recompute)."""

    answer: AnswerTypeEntry
    metric: str
    chat: bool
    batch_size: int
    max_rows: Optional[int]
    max_tokens: Optional[int]
    max_new_tokens: Optional[int]
    progress: bool
    ablation: Ablation = ZERO
    share_prefix: bool = False
    bf16: bool = False
    """Every pass on the model's bfloat16 weight copy (:mod:`~cel_lens.model.stack_bf16`): set for
    the bf16 run where the model has one, never for a float32 recompute."""

    @property
    def answer_type(self) -> str:
        """The answer type's name (what results record)."""
        return self.answer.name


def _bf16_run(model, split: Split, sets: list[HeadSet], plan: _Plan, store: Optional[ActivationStore],
              prec: str, tally: RecomputeTally) -> tuple[dict, Bool[Tensor, "variant example"]]:
    """The bf16 evaluation and its float32 re-checks: the results (float32's decisions) and which
    decisions were recomputed (:mod:`~cel_lens.evaluation.precision`; ``tally``: the context's, where
    the one-token-choice check keeps its evidence)."""
    answer, answer_type, metric = plan.answer, plan.answer_type, plan.metric
    with compute_precision(model, prec) as resident:
        out = _run(model, split, sets, replace(plan, bf16=resident), store, margins=Margins())
    margins = out.pop("margins")
    if resident and answer.argmax_target:  # the tight bound first, checked on its own recomputes
        redo = tight_first(margins.token)
        _, seen = _recompute(out, redo, float32_model(model), split, sets, plan, store, observe=True)
        wider, _ = tight_check(margins.token, seen, redo)
        _recompute(out, wider, float32_model(model), split, sets, plan, store)
        redo = redo | wider
    else:
        redo = recompute_mask(answer_type, margins, metric=metric)
        computed, _ = _recompute(out, redo, float32_model(model), split, sets, plan, store)
    if answer.scores_choices:  # the one-token bound holds only where this run's recomputes confirm it
        wider = pair_check(tally, split, margins, out["extra"]["choice_ll"], redo, metric, computed=computed)
        _recompute(out, wider, float32_model(model), split, sets, plan, store)
        redo = redo | wider
    return out, redo


def _generation_budget(split: Split, answer: AnswerTypeEntry, max_new_tokens: Optional[int]) -> Optional[int]:
    """The generation budget (``None`` for teacher-forced kinds); ``ValueError`` if there is none."""
    if not answer.generates:
        return None
    if split.judge is None:
        raise ValueError(f"generation split {split.task}/{split.name} has no judge to score completions")
    budget = max_new_tokens if max_new_tokens is not None else split.max_new_tokens
    if budget is None:
        raise ValueError(f"generation split {split.task}/{split.name} sets no options['max_new_tokens']; pass max_new_tokens=")
    return budget


def _run(model, split: Split, sets: list[HeadSet], plan: _Plan, store: Optional[ActivationStore],
         margins: Optional[Margins] = None) -> dict:
    """One evaluation of ``split`` under ``sets`` as it stands (no precision logic): the fields of
    its :class:`EvalResult`, and with ``margins`` what each decision was decided by (``"margins"``)."""
    n_var = len(sets)
    rows_budget = int(plan.max_rows) if plan.max_rows else default_max_rows(plan.batch_size)
    tokens_budget = int(plan.max_tokens) if plan.max_tokens else default_max_tokens(plan.batch_size)
    out: dict = {}
    if plan.answer.generates:
        gaps = None if margins is None else torch.full((n_var, len(split)), float("inf"))
        correct, scores, completions = evaluate_generation(
            model, split, sets, batch_size=plan.batch_size, max_rows=rows_budget,
            max_new_tokens=plan.max_new_tokens, chat=plan.chat, progress=plan.progress, gaps=gaps,
            ablation=plan.ablation, share_prefix=plan.share_prefix, bf16=plan.bf16,
        )
        out = dict(correct=correct, scores=scores, completions=completions)
        if margins is not None:
            out["margins"] = Margins(token=gaps)
        return out
    batches = store.batches if store is not None else encode_split(
        model, split, plan.batch_size, chat_template=plan.chat, max_tokens=tokens_budget,
        share_prefix=plan.share_prefix or None)
    row_margin = None if margins is None else torch.full((n_var, sum(b.n_rows for b in batches)), float("inf"))
    with torch.inference_mode():
        lp, greedy = score_batches(
            model, batches, sets, store=store, max_tokens=tokens_budget, max_rows=plan.max_rows, progress=plan.progress,
            desc=f"evaluate {split.task}/{split.name} x{n_var}", margin=row_margin, ablation=plan.ablation,
            bf16=plan.bf16,
        )
    correct, scores, extra = aggregate(plan.answer_type, plan.metric, batches, len(split), lp, greedy)
    out = dict(correct=correct, scores=scores, extra=extra)
    if margins is not None:
        out["margins"] = decision_margins(plan.answer_type, batches, len(split), lp, row_margin)
    return out


def _recompute(out: dict, redo: Bool[Tensor, "variant example"], model32, split: Split, sets: list[HeadSet],
               plan: _Plan, store: Optional[ActivationStore] = None,
               observe: bool = False) -> tuple[Bool[Tensor, "variant example"], Optional[Float[Tensor, "variant example"]]]:
    """Replace the results ``redo`` marks with float32 ones: one float32 evaluation per group of
    variants (:func:`~cel_lens.evaluation.precision.recompute_groups`) on the examples any of them
    marks; every result it returns is float32's, so all are copied. With a ``store`` the model
    itself computes in float32 from (a float32 run resumes from it too), each variant resumes from
    it at its layer (:meth:`ActivationStore.view`), as the float32 run does; else from the tokens.
    Returns which decisions were recomputed (a superset of ``redo``: each group's union of examples)
    and, with ``observe``, their float32 token margins (NaN elsewhere)."""
    quiet = replace(plan, progress=False, share_prefix=False, bf16=False)  # unshared float32 prompts: the reference path
    seen = torch.full(tuple(redo.shape), float("nan")) if observe else None
    computed = torch.zeros_like(redo)
    resume = (store is not None and model32 is store.model and plan.answer.uses_store
              and not any(b.prefix for b in store.batches))
    for group, examples in recompute_groups(redo):
        sub = replace(split, examples=tuple(split.examples[i] for i in examples))
        fixed = _run(model32, sub, [sets[v] for v in group], quiet, store.view(examples) if resume else None,
                     margins=Margins() if observe else None)
        rows, cols = torch.tensor(group)[:, None], torch.tensor(examples)[None, :]
        computed[rows, cols] = True
        if seen is not None:
            seen[rows, cols] = fixed.pop("margins").token
        out["correct"][rows, cols] = fixed["correct"]
        out["scores"][rows, cols] = fixed["scores"]
        for key, value in fixed.get("extra", {}).items():  # per choice: the subset may have fewer choices
            if value.ndim == 3:
                out["extra"][key][rows, cols, : value.shape[-1]] = value
            else:
                out["extra"][key][rows, cols] = value
        if fixed.get("completions") is not None:
            for k, v in enumerate(group):
                for j, i in enumerate(examples):
                    out["completions"][v][i] = fixed["completions"][k][j]
    return computed, seen


def _summed_logprob(model, rows: TeacherForced, fwd_hooks: Sequence) -> Float[Tensor, " row"]:
    """Differentiable summed log-prob of each row's target tokens, one forward pass over ``rows``."""
    rows = rows.to(param_device(model))
    resid = forward_resid(model, rows.tokens, fwd_hooks=fwd_hooks, attention_mask=rows.attention_mask)
    idx = einops.repeat(rows.positions, "b k -> b k d", d=resid.shape[-1])
    picked = resid.gather(1, idx)[rows.target_mask]  # [n, d]: real target positions only
    logits = unembed(model, picked).float()
    tgt = rows.targets[rows.target_mask]
    lp = logits.gather(-1, tgt[:, None])[:, 0] - logits.logsumexp(-1)
    out = torch.zeros(rows.target_mask.shape, dtype=lp.dtype, device=lp.device)
    out = out.masked_scatter(rows.target_mask, lp)
    return out.sum(-1)


def _choice_rows(batch: EncodedBatch) -> TeacherForced:
    """Every choice as one right-padded row ``prompt + choice[:-1]``: the ``"rows"`` layout as it
    is, the ``"shared"`` layout's prompt and continuation put back together (pads are masked)."""
    if batch.rows is not None:
        return batch.rows
    assert batch.context_tokens is not None and batch.context_mask is not None
    pairs = []
    for r in range(batch.n_rows):
        e = int(batch.row_example[r])
        context = batch.context_tokens[e][batch.context_mask[e].bool()].tolist()
        pairs.append((context, batch.targets[r][batch.target_mask[r]].tolist()))
    return teacher_forced_rows(pairs, pad=0)


def choice_margin(
    row_ll: Float[Tensor, " row"], batch: EncodedBatch, metric: str = "acc"
) -> Float[Tensor, " example"]:
    """The smooth margin of each example's correct choice: ``s_c - logsumexp_{j != c} s_j``, where
    ``s_j`` is choice ``j``'s summed log-likelihood (``acc``) or that divided by its length in
    characters (``acc_norm``, lm-eval's rule). It is positive only if the correct choice wins, and it
    differs from the hard margin ``s_c - max_{j != c} s_j`` by at most ``log(choices - 1)``.
    Examples with a single choice get 0 (nothing to decide). Order: ``batch.example_index``."""
    s = row_ll / batch.choice_chars.to(row_ll.device).clamp_min(1.0) if metric == "acc_norm" else row_ll
    n_choices = int(batch.row_choice.max()) + 1 if batch.n_rows else 1
    table = torch.full((batch.n_examples, n_choices), float("-inf"), dtype=s.dtype, device=s.device)
    table = table.index_put((batch.row_example.to(s.device), batch.row_choice.to(s.device)), s)
    labels = batch.labels.to(s.device)[:, None]
    gold = table.gather(1, labels)[:, 0]
    others = torch.logsumexp(table.scatter(1, labels, float("-inf")), dim=1)
    return torch.where(torch.isfinite(others), gold - others, torch.zeros_like(gold))


def logprob_metric(
    model, batch: EncodedBatch, fwd_hooks: Sequence = (), *, metric: str = "acc"
) -> Float[Tensor, " batch"]:
    """A differentiable per-example metric of what decides correctness, from one forward pass with
    ``fwd_hooks`` active (e.g. attribution patching at ``hook_z``). Order: ``batch.example_index``.

    Exact match: the summed log-prob of the target's tokens. Multiple choice: the log-probability of
    the labelled choice under the model's own choice rule, ``log_softmax_j(s_j)[c] =
    -softplus(-m)``, where ``s_j`` are the choices' scores on the scale ``metric`` compares (``acc``:
    summed log-likelihoods, ``acc_norm``: per character) and ``m`` is :func:`choice_margin`. It is a
    smooth version of ``min(margin, 0)``: its derivative is the margin's, weighted by
    ``sigmoid(-m)`` (about 1 for an example answered wrong, 1/2 at the decision boundary, near 0 for
    one answered right by a wide margin, which no small change flips), so it follows the examples
    whose correctness an ablation can change, as accuracy does; the log-prob of the correct choice
    alone ignores the other choices, and the plain margin counts every example alike.
    """
    if not answer_type_entry(batch.answer_type).scores_choices:
        return _summed_logprob(model, batch.answer, fwd_hooks)
    margin = choice_margin(_summed_logprob(model, _choice_rows(batch), fwd_hooks), batch, metric)
    return -torch.nn.functional.softplus(-margin)

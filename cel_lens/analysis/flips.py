"""Why does the ablation help? Find the examples it fixes and breaks, and look at them in the model.

:func:`flipped_examples` compares the intact and ablated model example by example on a split (a
run's recorded D_test answers, or a fresh evaluation), keeps a few examples of each kind, and runs
the model on them: the intact and ablated answers (greedy continuation for exact match, the chosen
choice for multiple choice, the completion for generation), each selected head's attention from
the answer position, and each selected head's direct logit effect on the correct answer and its
rival (:func:`~cel_lens.analysis.attention.direct_logit_effects`). The result is a
:class:`~cel_lens.report.flips.Flips`, which :func:`cel_lens.report.plot_flips` draws.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import BOS_RULES
from cel_lens.analysis.attention import attention_patterns, direct_logit_effects, example_tokens
from cel_lens.evaluation.encode import encode_pair, format_prompt
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.ablation import ablation_hooks
from cel_lens.model.model_types import model_shape
from cel_lens.model.load import load_model
from cel_lens.report.flips import FlippedExample, Flips, HeadView
from cel_lens.runs.export import run_task, selected_heads
from cel_lens.runs.reader import RunRecord, load_run
from cel_lens.tasks.answer_types import answer_type_entry
from cel_lens.tasks.base import Example, Split, Task

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["flipped_examples", "load_run_model"]


def _recorded_bits(record: RunRecord, heads: HeadSet, split: str) -> Optional[tuple[Tensor, Tensor]]:
    """The run's recorded answers of the intact model and of ``heads`` on ``split``, if it has both."""
    found = {e.heads: e.correct for e in record.evaluations if e.split == split and e.heads in (HeadSet(), heads)}
    return (found[HeadSet()], found[heads]) if len(found) == 2 else None


def _greedy(model: "Model", example: Example, hooks: list, n_new: int, chat: bool) -> tuple[str, Optional[int]]:
    """Greedy continuation of ``n_new`` tokens (the target's length), within the model's context:
    its text and its first token."""
    tokens = example_tokens(model, example, include_target=False, chat_template=chat)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    new: list[int] = []
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        for _ in range(n_new):
            nxt = int(model(tokens)[0, -1].argmax())
            new.append(nxt)
            if n_ctx is not None and tokens.shape[1] >= n_ctx:
                break
            tokens = torch.cat([tokens, torch.tensor([[nxt]], device=tokens.device)], dim=1)
    return model.tokenizer.decode(new), (new[0] if new else None)


Answer = tuple[str, Optional[int]]
"""An answer's text and its first token id (``None``: find it by encoding the text after the prompt)."""


def _answers(model: "Model", split: Split, res: EvalResult, heads: HeadSet, chat: bool) -> list[tuple[Answer, Answer]]:
    """``(intact, ablated)`` answers of every example of ``split`` (as evaluated in ``res``)."""
    answer = answer_type_entry(res.answer_type)
    if answer.generates:
        return [((a, None), (b, None)) for a, b in zip(res.completions[0], res.completions[1])]
    if answer.scores_choices:
        ll = res.extra["choice_ll"].double()
        out = []
        for i, e in enumerate(split):
            size = torch.tensor([float(c) for c in e.meta.get("choice_chars", [len(c) for c in e.choices])])
            picks = []
            for v in (0, 1):
                s = ll[v, i, : len(e.choices)]
                picks.append((e.choices[int((s / size.clamp_min(1.0) if res.metric == "acc_norm" else s).argmax())], None))
            out.append((picks[0], picks[1]))
        return out
    n_heads = model_shape(model)[1]
    hooks = ablation_hooks(heads, n_heads=n_heads)
    lengths = [len(encode_pair(model, format_prompt(model, e.prompt, chat), e.target or "")[1]) for e in split]
    return [(_greedy(model, e, [], n, chat), _greedy(model, e, hooks, n, chat)) for e, n in zip(split, lengths)]


def _first_token(model: "Model", example: Example, answer: Answer, chat: bool) -> Optional[int]:
    """The first token of an answer continuing the example's prompt (``None`` when it has none)."""
    text, token = answer
    if token is not None or not text:
        return token
    try:
        cont = encode_pair(model, format_prompt(model, example.prompt, chat), text)[1]
    except ValueError:  # encodes to no tokens
        return None
    return int(cont[0]) if cont else None


def _head_views(model: "Model", example: Example, heads: HeadSet, rival: Answer, chat: bool, top: int) -> tuple[HeadView, ...]:
    """Each selected head's attention from the answer position and its direct logit effects."""
    patterns = attention_patterns(model, example, heads, include_target=False, chat_template=chat)
    pos = patterns.logit_position
    tokens = example_tokens(model, example, include_target=False, chat_template=chat)
    answer_id = patterns.logit_token_ids[0] if patterns.answer_index is not None else None
    rival_id = _first_token(model, example, rival, chat)
    effects = {}
    for tid in {answer_id, rival_id} - {None}:
        ids, eff = direct_logit_effects(model, tokens, heads, pos, answer=tid)
        effects[tid] = eff[:, ids.index(tid)]
    views = []
    for i, h in enumerate(heads):
        row = patterns.intact[h.layer, h.head, pos]
        order = row.argsort(descending=True)[:top].tolist()
        on_answer = float(effects[answer_id][i]) if answer_id in effects else math.nan
        on_rival = float(effects[rival_id][i]) if rival_id in effects and rival_id != answer_id else 0.0
        views.append(HeadView(str(h), tuple((f"{patterns.tokens[j]}@{j}", float(row[j])) for j in order),
                              on_answer, on_answer - on_rival))
    return tuple(views)


def load_run_model(run: Any, model: Optional[str] = None, *, device: Optional[str] = None) -> "Model":
    """The model a run searched, loaded again: its manifest's model id (a hub id, a checkpoint
    directory or ``"organism"``; ``model`` overrides it, e.g. for a checkpoint that moved), with the
    run's dtype and BOS rule, on ``device``."""
    record = run if isinstance(run, RunRecord) else load_run(getattr(run, "path", run))
    entry = record.manifest.get("model") or {}
    name = model or entry.get("id")
    if not name:
        raise ValueError(f"{record.path}: the manifest names no model; give one (--model)")
    rule = (entry.get("bos") or {}).get("rule")
    dtype = str(entry.get("dtype") or "float32").removeprefix("torch.")
    return load_model(name, device=device, dtype=dtype, bos=rule if rule in BOS_RULES else None)


def _source(obj: Any, heads: HeadsLike, split: str, data_dir: Optional[str]) -> tuple[Split, HeadSet, Optional[RunRecord]]:
    """The split, the heads and (for a run) its record, from a run (``Run``, record or path), a task or a split."""
    if isinstance(obj, (Task, Split)):
        if heads is None:
            raise ValueError("give the heads to ablate (heads=...) with a task or split; a run knows its own")
        chosen = obj.split(split) if isinstance(obj, Task) else obj
        return chosen, HeadSet.parse(heads), None
    record = obj if isinstance(obj, RunRecord) else load_run(getattr(obj, "path", obj))
    chosen_heads = HeadSet.parse(heads) if heads is not None else selected_heads(record)
    return run_task(record, data_dir=data_dir).split(split), chosen_heads, record


def flipped_examples(
    model: "Model",
    source: Union[Task, Split, RunRecord, Any],
    heads: HeadsLike = None,
    *,
    split: str = "test",
    n: int = 4,
    top_tokens: int = 3,
    data_dir: Optional[str] = None,
    batch_size: int = 8,
    progress: bool = False,
) -> Flips:
    """The examples of ``split`` that ablating ``heads`` fixes and breaks, and up to ``n`` of each
    looked at in ``model`` (see the module docstring).

    ``source`` is a run (a :class:`~cel_lens.pipeline.Run`, a :func:`~cel_lens.runs.load_run` record
    or a run directory: its task is loaded again and checked against the manifest, ``heads``
    defaults to its S-hat, and its recorded answers say which examples flip, checked against the
    model's), or a task or split with ``heads``: then the whole split is evaluated first."""
    split_obj, hs, record = _source(source, heads, split, data_dir)
    if not hs:
        raise ValueError("no heads to ablate: the flips of the intact model are empty")
    recorded = _recorded_bits(record, hs, split) if record is not None else None
    if recorded is None:
        full = evaluate(model, split_obj, [HeadSet(), hs], batch_size=batch_size, progress=progress)
        recorded = (full.correct[0], full.correct[1])
    intact, ablated = recorded
    fixed = ((~intact) & ablated).nonzero()[:, 0].tolist()
    broken = (intact & ~ablated).nonzero()[:, 0].tolist()
    chosen = [(i, "fixed") for i in fixed[:n]] + [(i, "broken") for i in broken[:n]]
    examples: list[FlippedExample] = []
    if chosen:
        sub = replace(split_obj, examples=tuple(split_obj.examples[i] for i, _ in chosen))
        res = evaluate(model, sub, [HeadSet(), hs], batch_size=batch_size, progress=False)
        _check_same(res.correct, intact, ablated, [i for i, _ in chosen])
        chat = bool(res.chat_template)
        for (i, kind), e, (a_intact, a_ablated) in zip(chosen, sub, _answers(model, sub, res, hs, chat)):
            answer = e.target if e.target is not None else (e.choices[e.label] if e.choices else "")
            rival = a_intact if kind == "fixed" else a_ablated
            examples.append(FlippedExample(e.id, kind, e.prompt, answer, a_intact[0], a_ablated[0], rival[0],
                                           _head_views(model, e, hs, rival, chat, top_tokens)))
    return Flips(str(hs), split_obj.task, split, len(split_obj), len(fixed), len(broken), tuple(examples))


def _check_same(correct: Bool[Tensor, "2 example"], intact: Tensor, ablated: Tensor, idx: list[int]) -> None:
    """The model must reproduce the run's recorded answers on the examples shown."""
    want = torch.stack([intact[idx], ablated[idx]])
    if not torch.equal(correct.cpu(), want):
        raise ValueError(
            "the model does not reproduce the run's recorded answers on these examples: is it the run's model "
            "(same weights, dtype and BOS rule)?"
        )

"""lm-eval documents as cel_lens examples, and lm-eval's own metric as a generation task's judge.

Everything a model sees or is judged by comes from lm-eval's task object: the context is
``task.fewshot_context(doc, ...)`` (description, few-shot examples, the document's
``doc_to_text``) exactly as lm-eval's ``build_all_requests`` calls it, and the continuations are the
arguments of the requests ``task.construct_requests`` makes (``target_delimiter`` + each
``doc_to_choice``; ``doc_to_target`` of a loglikelihood task). A generated completion is judged by
lm-eval's request, its filter pipeline (``filter_list``) and ``process_results``: the decision is
the chosen metric's value for that document (1 or 0).

Few-shot examples are drawn by lm-eval's sampler from one generator seeded once per evaluation
(``fewshot_random_seed``, 1234 by default), so a document's few-shot context depends on which
documents came before it. :func:`build_examples` therefore builds each split as lm-eval builds the
requests of ``simple_evaluate(..., samples={task: the split's document ids})``: seed set, then the
split's documents in document order.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.answer_types import known_answer_type
from cel_lens.tasks.base import Example

__all__ = ["ANSWER_TYPES", "build_examples", "LmEvalJudge", "gold_index"]

ANSWER_TYPES: dict[str, str] = {
    "multiple_choice": "multiple_choice",
    "loglikelihood": "exact_match",
    "generate_until": "generation",
}
"""lm-eval output type -> cel_lens answer type (loglikelihood's ``acc`` is lm-eval's is-greedy, which is
cel_lens's exact match: every target token the greedy argmax)."""


def gold_index(task: Any, doc: Mapping[str, Any], choices: Sequence[str]) -> int:
    """The correct choice's index, as lm-eval reads ``doc_to_target`` (an index, or a choice's text);
    ValueError for a target that names no choice (lm-eval scores such a document 0 whatever the
    model does, which is no decision)."""
    gold = task.doc_to_target(doc)
    if isinstance(gold, str) and gold in choices:
        gold = list(choices).index(gold)
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise ValueError(f"{task.config.task}: target {gold!r} names none of the {len(choices)} choices of {doc!r:.120}")
    return gold


def _requests(task: Any, doc: Mapping[str, Any], doc_id: int) -> tuple[str, list[Any]]:
    """lm-eval's context and requests for ``doc`` (as ``Task.build_all_requests`` makes them, no chat template)."""
    num_fewshot = task.config.num_fewshot or 0
    ctx = task.fewshot_context(doc, num_fewshot=num_fewshot, system_instruction=None, apply_chat_template=False,
                               fewshot_as_multiturn=False, chat_template=None, gen_prefix=task.doc_to_prefix(doc))
    inst = task.construct_requests(doc=doc, ctx=ctx, metadata=(task.config.task, doc_id, task.config.repeats))
    return ctx, inst if isinstance(inst, list) else [inst]


def _example(task: Any, doc: Mapping[str, Any], doc_id: int, split: str) -> Example:
    ctx, requests = _requests(task, doc, doc_id)
    if not isinstance(ctx, str):
        raise ValueError(f"{task.config.task}: a context per choice (multiple inputs) is not supported")
    meta: dict[str, Any] = {"doc_id": doc_id, "lm_eval_split": split, "text": str(task.doc_to_text(doc))}
    ex_id = f"{task.config.task}/{split}/{doc_id}"
    answer = known_answer_type(ANSWER_TYPES.get(task.OUTPUT_TYPE))  # how the example is scored
    if answer is not None and answer.scores_choices:
        raw = [str(c) for c in task.doc_to_choice(doc)]
        conts = tuple(str(r.arguments[1]) for r in requests)
        meta["choice_chars"] = tuple(len(c) for c in raw)  # lm-eval's acc_norm: doc_to_choice's characters
        return Example(ex_id, ctx, choices=conts, label=gold_index(task, doc, raw), meta=meta)
    if answer is not None and answer.argmax_target:
        return Example(ex_id, ctx, target=str(requests[0].arguments[1]), meta=meta)
    gen_kwargs = dict(requests[0].arguments[1])
    until = gen_kwargs.get("until") or []
    meta["stop"] = tuple([until] if isinstance(until, str) else until)
    return Example(ex_id, ctx, target=str(task.doc_to_target(doc)), meta=meta)


def build_examples(task: Any, docs: Sequence[Mapping[str, Any]], doc_ids: Sequence[int], split: str,
                   fewshot_seed: Optional[int]) -> list[Example]:
    """The examples of documents ``doc_ids`` (of ``docs``, lm-eval's ``split``), built in document
    order after seeding lm-eval's few-shot sampler with ``fewshot_seed``: the prompts lm-eval's
    evaluator builds when asked for exactly these documents."""
    task.set_fewshot_seed(seed=fewshot_seed)
    return [_example(task, docs[i], i, split) for i in sorted(doc_ids)]


class LmEvalJudge:
    """A generation task's judge: lm-eval's request for the document, the completion as its
    response, the task's filter pipeline ``filter_name`` (default its first) and ``process_results``; correct iff the
    ``metric`` (e.g. ``exact_match``) is 1. The same code lm-eval's evaluator runs per document."""

    def __init__(self, task: Any, docs: Mapping[str, Mapping[str, Any]], metric: str, filter_name: Optional[str]) -> None:
        self.task, self.docs, self.metric = task, dict(docs), metric
        ensembles = {f.name: f for f in getattr(task, "_filters", [])}  # lm-eval keeps its pipelines there
        filter_name = next(iter(ensembles), "") if filter_name is None else filter_name
        if filter_name not in ensembles:
            raise ValueError(f"{task.config.task}: no filter {filter_name!r}; the task's filters: {', '.join(ensembles)}")
        self.filter_name, self.ensemble = filter_name, ensembles[filter_name]

    def __call__(self, example: Example, completion: str) -> bool:
        """Whether lm-eval's metric scores ``completion`` of ``example`` as correct (1)."""
        doc = self.docs[example.id]
        inst = self.task.construct_requests(doc=doc, ctx=example.prompt, metadata=(self.task.config.task, example.meta["doc_id"], 1))
        inst = inst[0] if isinstance(inst, list) else inst
        inst.resps = [completion]
        self.ensemble.apply([inst])
        value = self.task.process_results(doc, [inst.filtered_resps[self.filter_name]])[self.metric]
        if value not in (0, 1):
            raise ValueError(f"{self.task.config.task}: metric {self.metric} gave {value!r} for {example.id}, not a 0/1 decision")
        return bool(value)

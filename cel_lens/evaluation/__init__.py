"""Running a model on a split, intact and under many head ablations at once, per example.

* :func:`evaluate` (:mod:`~cel_lens.evaluation.evaluator`): the entry point, ``EvalResult`` out;
* :class:`EvalContext` (:mod:`~cel_lens.evaluation.context`): an evaluation's settings, one argument;
* :mod:`~cel_lens.evaluation.encode` / :mod:`~cel_lens.evaluation.batch`: lm-eval's encoding;
* :mod:`~cel_lens.evaluation.teacher_forced`: batched variant passes that resume at the first
  ablated layer; :mod:`~cel_lens.evaluation.choices`: per-example decisions;
* :mod:`~cel_lens.evaluation.generation`: batched greedy generation, judged;
* :class:`ActivationStore` (:mod:`~cel_lens.evaluation.store`): the intact residual stream of a split.
* :mod:`~cel_lens.evaluation.precision`: bf16 compute whose decisions equal float32's (decisions
  within the bf16 error bound are recomputed in float32).
"""

from cel_lens.evaluation.answers import MAX_CLOSED_ANSWERS, answer_key
from cel_lens.evaluation.batch import EncodedBatch, TeacherForced
from cel_lens.evaluation.context import EvalContext, RecomputeTally
from cel_lens.evaluation.encode import as_split, encode_pair, encode_prompt, encode_split, format_prompt
from cel_lens.evaluation.evaluator import evaluate, logprob_metric
from cel_lens.evaluation.generation import greedy_generate
from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.evaluation.store import ActivationStore, select_layers, store_layers

__all__ = [
    "evaluate",
    "EvalContext",
    "RecomputeTally",
    "EvalResult",
    "ActivationStore",
    "select_layers",
    "store_layers",
    "EncodedBatch",
    "TeacherForced",
    "as_split",
    "encode_pair",
    "encode_prompt",
    "encode_split",
    "format_prompt",
    "logprob_metric",
    "greedy_generate",
    "answer_key",
    "MAX_CLOSED_ANSWERS",
]

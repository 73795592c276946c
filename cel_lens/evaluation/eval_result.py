"""Per-example results of an evaluation: :class:`EvalResult`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.tasks.base import current_names

__all__ = ["EvalResult"]


@dataclass
class EvalResult:
    """Per-example results of V head sets on one split.

    ``correct[v, i]`` is the headline metric of example ``ids[i]`` under ``head_sets[v]`` (acc for
    exact match and BoolQ, acc_norm for HellaSwag, pass@1 for generation); ``scores[v, i]`` the
    number that decided it (exact match: log-prob of the target; multiple choice: margin of the
    correct choice's (normalised) log-likelihood over the best other choice, > 0 iff correct;
    generation: 1.0/0.0; with ``precision="bf16"`` the scores of decisions not recomputed are
    bf16's, within its error bound of float32's). ``precision`` is the compute precision and
    ``recomputed`` marks the decisions recomputed in float32 (:mod:`~cel_lens.evaluation.precision`).
    ``extra`` holds the other metric and per-choice log-likelihoods
    (``"acc"``, ``"acc_norm"``, ``"choice_ll"`` ``[V, n, max_choices]``, NaN-padded, and
    ``"choice_score"``, the same on the scale the metric compares). ``answer_type`` is the split's
    (:data:`~cel_lens.tasks.base.AnswerType`).
    """

    head_sets: list[HeadSet]
    ids: list[str]
    correct: Bool[Tensor, "variant example"]
    scores: Float[Tensor, "variant example"]
    extra: dict[str, Tensor] = field(default_factory=dict)
    completions: Optional[list[list[str]]] = None
    answer_type: str = "exact_match"
    metric: str = "acc"
    task: str = ""
    split: str = ""
    chat_template: bool = False
    precision: str = "float32"
    recomputed: Optional[Bool[Tensor, "variant example"]] = None

    @property
    def recomputed_share(self) -> float:
        """Share of the decisions made in bf16 that were recomputed in float32 (0 in float32)."""
        if self.recomputed is None or self.recomputed.numel() == 0:
            return 0.0
        return float(self.recomputed.float().mean())

    @property
    def accuracy(self) -> Float[Tensor, " variant"]:
        """Mean of ``correct`` per variant."""
        if self.correct.shape[1] == 0:
            return torch.full((self.correct.shape[0],), float("nan"))
        return self.correct.float().mean(dim=1)

    def __repr__(self) -> str:
        """One line: what was evaluated and each head set's accuracy (not the per-example tensors)."""
        where = "/".join(p for p in (self.task, self.split) if p) or "examples"
        accs = ", ".join(f"{s}: {a:.3f}" for s, a in zip(self.head_sets[:4], self.accuracy.tolist()))
        more = f", ... ({len(self.head_sets)} head sets)" if len(self.head_sets) > 4 else ""
        return f"<EvalResult {where}, {len(self.ids)} examples, {self.metric}: {accs}{more}>"

    def _repr_html_(self) -> str:
        """A table for notebooks: each head set's accuracy, correct count and change from the
        first row (the intact model when it was evaluated)."""
        import html

        n = len(self.ids)
        acc = self.accuracy.tolist()
        right = self.correct.sum(1).tolist() if n else [0] * len(acc)
        rows = "".join(
            f"<tr><td>{html.escape(str(s))}</td><td>{a:.4f}</td><td>{c} / {n}</td>"
            f"<td>{'' if i == 0 else f'{100 * (a - acc[0]):+.1f} pp'}</td></tr>"
            for i, (s, a, c) in enumerate(zip(self.head_sets[:20], acc, right))
        )
        more = f"<p><small>... and {len(self.head_sets) - 20} more head sets</small></p>" if len(self.head_sets) > 20 else ""
        where = html.escape("/".join(p for p in (self.task, self.split) if p) or "examples")
        return (
            f"<p><b>EvalResult</b> {where}: {n} examples, {html.escape(self.answer_type)}, metric {html.escape(self.metric)}"
            f"{', chat template' if self.chat_template else ''}</p>"
            f"<table><tr><th>head set</th><th>{html.escape(self.metric)}</th><th>correct</th>"
            f"<th>vs {html.escape(str(self.head_sets[0])) if self.head_sets else ''}</th></tr>{rows}</table>{more}"
        )

    def index(self, head_set: HeadsLike) -> int:
        """Row of ``head_set`` in this result (``ValueError`` if it was not evaluated)."""
        target = HeadSet.parse(head_set)
        for i, s in enumerate(self.head_sets):
            if s == target:
                return i
        raise ValueError(f"head set {target} was not evaluated here")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (head sets as canonical text, tensors as lists, non-finite floats as None)."""
        return {
            "task": self.task,
            "split": self.split,
            "answer_type": self.answer_type,
            "metric": self.metric,
            "chat_template": self.chat_template,
            "head_sets": [str(s) for s in self.head_sets],
            "ids": list(self.ids),
            "accuracy": _jsonable(self.accuracy),
            "correct": self.correct.to(torch.int8).tolist(),
            "scores": _jsonable(self.scores),
            "extra": {k: _jsonable(v) for k, v in self.extra.items()},
            "completions": self.completions,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvalResult":
        """Inverse of :meth:`to_dict`."""

        def tensor(x: Any, dtype: torch.dtype) -> Tensor:
            return torch.tensor(_unjson(x), dtype=dtype)

        extra = {
            k: tensor(v, torch.bool if k in ("acc", "acc_norm") else torch.float32)
            for k, v in (data.get("extra") or {}).items()
        }
        n_var = len(data["head_sets"])
        n_ex = len(data["ids"])
        return cls(
            head_sets=[HeadSet.parse(s) for s in data["head_sets"]],
            ids=list(data["ids"]),
            correct=tensor(data["correct"], torch.bool).reshape(n_var, n_ex),
            scores=tensor(data["scores"], torch.float32).reshape(n_var, n_ex),
            extra=extra,
            completions=data.get("completions"),
            answer_type=current_names(data).get("answer_type", "exact_match"),  # older files say "kind"
            metric=data.get("metric", "acc"),
            task=data.get("task", ""),
            split=data.get("split", ""),
            chat_template=bool(data.get("chat_template", False)),
        )


def _jsonable(t: Tensor) -> Any:
    if t.dtype == torch.bool:
        return t.to(torch.int8).tolist()
    values = t.double().tolist()

    def fix(x: Any) -> Any:
        if isinstance(x, list):
            return [fix(y) for y in x]
        return x if math.isfinite(x) else None

    return fix(values)


def _unjson(x: Any) -> Any:
    if isinstance(x, list):
        return [_unjson(y) for y in x]
    return float("nan") if x is None else x

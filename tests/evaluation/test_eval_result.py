"""EvalResult in a notebook: a one-line repr and an accuracy table, not 26k characters of tensors."""

from __future__ import annotations

import torch

from cel_lens.evaluation.eval_result import EvalResult
from cel_lens.heads import HeadSet


def _result(n: int = 1000, n_sets: int = 2) -> EvalResult:
    correct = torch.zeros(n_sets, n, dtype=torch.bool)
    correct[0, :600] = True
    correct[1:, :650] = True
    return EvalResult(
        head_sets=[HeadSet(), *[HeadSet.parse(f"L{i}H1") for i in range(n_sets - 1)]], ids=[f"x/{i}" for i in range(n)],
        correct=correct, scores=torch.randn(n_sets, n), task="arithmetic", split="test",
    )


def test_repr_is_one_line_with_each_accuracy():
    res = _result()
    assert repr(res) == "<EvalResult arithmetic/test, 1000 examples, acc: intact: 0.600, L0H1: 0.650>"
    many = repr(_result(n_sets=10))
    assert many.endswith(", ... (10 head sets)>") and len(many) < 200


def test_html_table_has_accuracy_counts_and_change():
    page = _result()._repr_html_()
    assert "600 / 1000" in page and "650 / 1000" in page and "+5.0 pp" in page and "vs intact" in page
    assert len(_result(n_sets=50)._repr_html_()) < 4000

"""Attribution patching on multiple-choice splits: the differentiated metric is the log-probability of
the correct choice among the choices (on acc_norm's per-character scale when the task says so),
checked against the evaluator's own choice log-likelihoods, and the scores are its derivative along
the ablation path (central finite differences)."""

from __future__ import annotations

import pytest
import torch

from cel_lens.evaluation import encode_split, evaluate, logprob_metric
from cel_lens.heads import HeadSet
from cel_lens.scoring import attribution_scores
from cel_lens.tasks import Example, Split

CHOICES = (" yes", " no", " 143", " the river", " 7 times", " water")


def planted_choice_split(model, n: int = 12, heads: str | None = "L1H2", metric: str = "acc") -> Split:
    """Four-choice questions (choices of 2 to 9 characters) labelled with the choice the model
    prefers with ``heads`` ablated (on the ``metric`` scale), so that ablation is the right answer;
    ``heads=None``: the intact model's preference for even examples, another choice for odd ones."""
    examples = [
        Example(f"mc/{i}", f"Question: What is {i} plus {2 * i + 5}?\nAnswer:",
                choices=tuple(CHOICES[(i + j) % len(CHOICES)] for j in range(4)), label=0)
        for i in range(n)
    ]
    split = Split("dist", tuple(examples), "mc", answer_type="multiple_choice", metric=metric)
    ll = evaluate(model, split, [HeadSet.parse(heads or "intact")], progress=False).extra["choice_ll"][0]
    chars = torch.tensor([[len(c) - 1 for c in e.choices] for e in examples], dtype=ll.dtype)
    labels = (ll / chars if metric == "acc_norm" else ll).argmax(-1).tolist()
    if heads is None:
        labels = [y if i % 2 == 0 else (y + 1) % 4 for i, y in enumerate(labels)]
    relabelled = tuple(Example(e.id, e.prompt, choices=e.choices, label=y) for e, y in zip(examples, labels))
    return Split("dist", relabelled, "mc", answer_type="multiple_choice", metric=metric)


@pytest.mark.parametrize("metric", ["acc", "acc_norm"])
def test_choice_metric_is_the_log_softmax_of_the_evaluators_choice_scores(tiny_model, metric):
    split = planted_choice_split(tiny_model, heads=None, metric=metric)
    res = evaluate(tiny_model, split, progress=False)  # the non-differentiable path: shared prompt, KV cache
    ll = res.extra["choice_ll"][0].double()
    chars = torch.tensor([[len(c) - 1 for c in e.choices] for e in split], dtype=torch.float64)
    scale = ll / chars if metric == "acc_norm" else ll
    labels = torch.tensor([e.label for e in split])
    want = scale.log_softmax(-1).gather(1, labels[:, None])[:, 0]
    got = torch.zeros(len(split), dtype=torch.float64)
    with torch.no_grad():
        for batch in encode_split(tiny_model, split, 5):
            got[batch.example_index] = logprob_metric(tiny_model, batch, metric=metric).double()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    # it tracks correctness: above log(1/2) only if the labelled choice wins; at least log(1/4) if it does
    right = scale.argmax(-1) == labels
    assert right.any() and (~right).any()  # both kinds are there: the check is not vacuous
    assert bool((right | (got < torch.log(torch.tensor(0.5)))).all())
    assert bool((got[right] >= torch.log(torch.tensor(0.25)) - 1e-6).all())


def test_choice_attribution_is_the_derivative_of_the_metric_along_the_ablation_path(tiny_model, assert_finite_differences):
    """acc_norm scale: attribution[h] = -(z_h . dm/dz_h), checked against central finite
    differences of the real metric, m(z_h * (1 - eps)), head by head."""
    split = planted_choice_split(tiny_model, metric="acc_norm")
    scores = attribution_scores(tiny_model, split, batch_size=5, progress=False)
    assert_finite_differences(tiny_model, split, scores, [(0, 1), (1, 2), (2, 3)], batch_size=5, metric="acc_norm")

"""Side effects match separately computed ablations on tasks built from the model's own answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cel_lens.analysis.side_effects import side_effect_matrix
from cel_lens.evaluation.encode import encode_pair
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.heads import HeadSet
from cel_lens.model.ablation import ablate
from cel_lens.report.side_effects import plot_side_effects
from cel_lens.tasks.base import Example, Split, Task


def _greedy_next(model, contexts: list[list[int]], heads: HeadSet) -> list[int]:
    """Greedy next token after each context, under ``ablate`` (right padding: causal attention
    keeps the pads out of the real positions)."""
    width = max(map(len, contexts))
    tokens = torch.tensor([c + [0] * (width - len(c)) for c in contexts])
    with torch.no_grad(), ablate(model, heads):
        logits = model(tokens)
    return [int(logits[i, len(c) - 1].argmax()) for i, c in enumerate(contexts)]


def test_side_effect_matrix_matches_hand_built_tasks(tiny_model):
    """Tasks built from the model's own greedy answers: on "up" the answer is the ablated model's
    (intact wrong, ablated right: gain +1), on "down" the intact model's (gain -1)."""
    S, S2 = HeadSet.parse("L1H0+L2H1"), HeadSet.parse("L0H3")
    tok = tiny_model.tokenizer
    prompts = [f"Question: What is {a} plus {a % 7}?\nAnswer:" for a in range(40)]
    contexts = [encode_pair(tiny_model, p, " 1")[0] for p in prompts]
    intact, ablated = _greedy_next(tiny_model, contexts, HeadSet()), _greedy_next(tiny_model, contexts, S)
    up, down = [], []
    for prompt, ctx, i, a in zip(prompts, contexts, intact, ablated):
        if i == a:
            continue
        for target_id, bucket in ((a, up), (i, down)):
            target = tok.decode([target_id])
            if target.strip() and encode_pair(tiny_model, prompt, target) == (ctx, [target_id]):
                bucket.append(Example(id=f"{len(bucket)}", prompt=prompt, target=target))
    assert len(up) >= 4 and len(down) >= 4, (len(up), len(down))

    def task(name: str, examples: list) -> Task:
        half = len(examples) // 2
        return Task(name, "exact_match", Split("dist", tuple(examples[:half])), Split("test", tuple(examples[half:])))

    tasks = {"up": task("up", up), "down": task("down", down), "other": task("other", up[:2] + down[:2])}
    matrix, labels = side_effect_matrix(tiny_model, tasks, {"up": S, "other": S2})
    assert labels == ["up", "down", "other"] and matrix.shape == (3, 3)
    assert matrix[0, 0] == pytest.approx(1.0) and matrix[0, 1] == pytest.approx(-1.0)
    assert all(math.isnan(v) for v in matrix[1])  # "down" has no selection
    for j, name in enumerate(labels):  # row "other": one evaluation per head set
        split = tasks[name].test
        gain = float(evaluate(tiny_model, split, [S2], progress=False).accuracy[0]) - float(
            evaluate(tiny_model, split, None, progress=False).accuracy[0]
        )
        assert matrix[2, j] == pytest.approx(gain)
    fig = plot_side_effects(matrix, labels)
    heat = fig.data[0]
    assert list(heat.y) == ["Ŝ(up)", "Ŝ(other)"]  # the row without a selection is left out
    assert np.allclose(np.asarray(heat.z, dtype=float), matrix[[0, 2]]) and heat.zmid == 0
    assert heat.text[0][1] == "-100.0"
    outlined = sorted((shape.x0 + 0.5, shape.y0 + 0.5) for shape in fig.layout.shapes)
    assert outlined == [(0, 0), (2, 1)]  # each row's own task
    with pytest.raises(ValueError, match="unknown task"):
        side_effect_matrix(tiny_model, tasks, {"nope": S})

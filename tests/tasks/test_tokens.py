"""A token-level task (``cel_lens.tasks.token_task``): built from token tensors and answer ids in a
few lines, and evaluated and searched on a model without a tokenizer."""

from __future__ import annotations

import pytest
import torch

import cel_lens as cl
from cel_lens.tasks import token_task


@pytest.fixture(scope="module")
def toy():
    """A tokenizer-less 2-layer attention-only model and 40 prompts of 6 random ids each."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=2, d_model=32, n_heads=4, d_head=8, n_ctx=16, d_vocab=20,
                                  attn_only=True, act_fn="relu", seed=0)
    model = HookedTransformer(cfg).eval()
    tokens = torch.randint(0, 20, (40, 6), generator=torch.Generator().manual_seed(0))
    return model, tokens


def test_evaluate_scores_the_argmax_against_the_answer_ids(toy):
    model, tokens = toy
    with torch.no_grad():
        logits = model(tokens)[:, -1]
    answers = logits.argmax(-1)
    answers[::3] = (answers[::3] + 1) % 20  # every third answer is not the argmax: wrong
    task = token_task(tokens, answers, n_test=20)
    assert len(task.dist) == len(task.test) == 20 and task.answer_type == "exact_match"
    res = cl.evaluate(model, task.test, ["intact", "L0H1"], progress=False)
    index = {f"tokens/{i}": i for i in range(40)}
    expected = torch.tensor([i % 3 != 0 for i in (index[e] for e in res.ids)])
    assert torch.equal(res.correct[0].bool(), expected)  # hand-computed: argmax == answer id
    with torch.no_grad(), cl.ablate(model, "L0H1"):
        ablated = model(tokens)[:, -1].argmax(-1)
    rows = [index[e] for e in res.ids]
    assert torch.equal(res.correct[1].bool(), ablated[rows] == answers[rows])


def test_search_runs_on_a_token_task(toy, tmp_path):
    model, tokens = toy
    with torch.no_grad(), cl.ablate(model, "L1H2"):
        answers = model(tokens)[:, -1].argmax(-1)  # what the model says with L1H2 zeroed: ablating it helps
    run = cl.search(model, token_task(tokens, answers), k=1, pool_size=3, n_null=3, n_boot=50,
                    out=tmp_path / "run", progress=False)
    assert run.result.heads == "L1H2" and run.result.gain > 0 and run.result.test_acc_ablated == 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="tokens has 3 rows but answers has 2"):
        token_task([[1, 2], [3, 4], [5, 6]], [1, 2])
    with pytest.raises(TypeError, match="integer token ids"):
        token_task(torch.rand(4, 3), [1, 2, 3, 4])
    with pytest.raises(ValueError, match="at least one example in each split"):
        token_task([[1], [2]], [1, 2], n_test=2)
    task = token_task([[1, 2], [1, 2], [3, 4], [5, 6]], [[7, 8], [7, 8], [9, 9], [0, 1]])  # a repeated prompt
    assert task.options["dropped_duplicates"] == 1 and len(task.dist) + len(task.test) == 3

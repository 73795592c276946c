"""Length-sorted, token-budgeted batches, shared multiple-choice contexts, and batched generation.

References: the same evaluation with other batch shapes (one example per batch, or one large
batch), the one-row-per-choice layout, and one-by-one greedy generation (TransformerLens's
``generate`` is the reference of that in ``test_evaluator.py``).
"""

from __future__ import annotations

import random

import pytest
import torch

from cel_lens.evaluation import encode_split, evaluate, greedy_generate
from cel_lens.evaluation.encode import MAX_PADDING
from cel_lens.evaluation.generation import generate_variants
from cel_lens.heads import masks_from_head_sets
from cel_lens.model import fused_attention, load_model
from cel_lens.tasks import Example, Split

SETS = ["intact", "L0H1", "L1H2+L2H0", "L2H3"]


@pytest.fixture(scope="module")
def models(tiny_model, tiny_checkpoints):
    return {"hooked": tiny_model, "bridge": load_model(str(tiny_checkpoints["llama"]), loader="bridge", device="cpu")}


def _words(rng: random.Random, n: int) -> str:
    vocab = ["the", "river", "runs", "through", "a", "city", "and", "she", "plays", "guitar", "then", "walks"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def _splits() -> dict[str, Split]:
    rng = random.Random(3)
    em = [Example(f"em/{i}", f"Q: {_words(rng, rng.randint(2, 30))}\nA:", target=" " + _words(rng, rng.randint(1, 3)))
          for i in range(18)]
    mc1 = [Example(f"b/{i}", _words(rng, rng.randint(3, 40)) + "\nAnswer:", choices=(" no", " yes"), label=i % 2)
           for i in range(14)]
    mc = [Example(f"h/{i}", _words(rng, rng.randint(3, 30)), choices=tuple(" " + _words(rng, rng.randint(1, 8)) for _ in range(4)),
                  label=rng.randrange(4)) for i in range(14)]
    return {
        "exact_match": Split("dist", tuple(em), task="arith", answer_type="exact_match", metric="acc"),
        "one_token": Split("dist", tuple(mc1), task="boolq", answer_type="multiple_choice", metric="acc"),
        "multi_token": Split("dist", tuple(mc), task="hellaswag", answer_type="multiple_choice", metric="acc_norm"),
    }


@pytest.mark.parametrize("name", ["exact_match", "one_token", "multi_token"])
def test_batches_are_sorted_budgeted_and_padded_at_most_max_padding(models, name):
    split = _splits()[name]
    for batch_size, max_tokens in ((4, None), (16, 200), (64, 10_000)):
        batches = encode_split(models["hooked"], split, batch_size, max_tokens=max_tokens)
        order = torch.cat([b.example_index for b in batches]).tolist()
        assert sorted(order) == list(range(len(split)))
        budget = max_tokens or 512 * batch_size
        for b in batches:
            assert b.n_examples <= batch_size
            assert b.computed_tokens - b.real_tokens <= MAX_PADDING * b.computed_tokens
            if b.n_examples > 1:
                assert b.computed_tokens <= budget
        # a run of whole batches re-cuts the same way (what the Ray backend's shards rely on)
        run = batches[1:3]
        sub = Split("dist", tuple(split.examples[i] for b in run for i in b.example_index.tolist()),
                    task=split.task, answer_type=split.answer_type, metric=split.metric)
        again = encode_split(models["hooked"], sub, batch_size, max_tokens=max_tokens)
        assert [b.n_examples for b in again] == [b.n_examples for b in run]


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
@pytest.mark.parametrize("name", ["exact_match", "one_token", "multi_token"])
def test_bucketed_batches_equal_unbucketed_results(models, kind, name):
    """One example per batch, small token budgets, one large batch: the same decisions and scores."""
    model, split = models[kind], _splits()[name]
    runs = [
        evaluate(model, split, SETS, batch_size=1, progress=False),
        evaluate(model, split, SETS, batch_size=4, max_tokens=120, progress=False),
        evaluate(model, split, SETS, batch_size=64, max_tokens=100_000, progress=False),
    ]
    for other in runs[1:]:
        assert torch.equal(runs[0].correct, other.correct)
        torch.testing.assert_close(runs[0].scores, other.scores, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
def test_shared_contexts_equal_one_row_per_choice(models, kind):
    """HellaSwag-shaped: four multi-token endings after one context pass (the stack's cache) equal
    four full rows, on both model types."""
    model, split = models[kind], _splits()["multi_token"]
    assert all(b.layout == "shared" for b in encode_split(model, split, 4))
    shared = evaluate(model, split, SETS, batch_size=4, progress=False)
    with fused_attention(False):
        rows = evaluate(model, split, SETS, batch_size=4, progress=False)
    assert torch.equal(shared.correct, rows.correct)
    torch.testing.assert_close(shared.extra["choice_ll"], rows.extra["choice_ll"], atol=1e-4, rtol=1e-5, equal_nan=True)


def test_length_groups_hand_computed(monkeypatch):
    from cel_lens.evaluation import batch
    from cel_lens.evaluation.batch import length_groups

    # the default: a group closes before 2 % of padding (10 vs 9 is 5 %; 100, 99, 98 is 1 %)
    assert length_groups([3, 10, 0, 9, 10, 2]) == [[1, 4], [3], [0], [5]]
    assert length_groups([100, 99, 98, 90]) == [[0, 1, 2], [3]]
    # longest first, zero-length rows left out, a group closes before a tenth of padding
    monkeypatch.setattr(batch, "MAX_PADDING", 0.1)
    assert length_groups([3, 10, 0, 9, 10, 2]) == [[1, 4, 3], [0], [5]]
    assert length_groups([10, 9, 9, 10]) == [[0, 3, 1, 2]]
    assert length_groups([5, 1]) == [[0], [1]]
    assert length_groups([0, 0]) == []


def _prompts(model) -> list[list[int]]:
    tok = model.tokenizer
    texts = ["You are an expert Python programmer", "def f(x):\n    for i in range(len(x)):", "Q", "The river runs"]
    return [[tok.bos_token_id] + tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
@pytest.mark.parametrize("fused", [True, False])
def test_generation_variants_equal_one_by_one_generation(models, kind, fused):
    """Variants batched (the intact prompt pass shared below each first ablated layer, finished rows
    dropped, prompts of unlike length resumed apart and of like length together) give every
    (prompt, variant) the tokens it gets alone."""
    model = models[kind]
    prompts = _prompts(model)
    prompts += prompts[:2]  # two groups of two prompts of one length, and two prompts alone
    sets = ["intact", "L0H2", "L1H1", "L1H3+L2H0", "L2H2"]
    masks = masks_from_head_sets(sets, 3, 4)
    tok = model.tokenizer
    stops = [[tok.decode(greedy_generate(model, [p], max_new_tokens=3, stop_at_eos=False)[0][1:3])] for p in prompts]
    with fused_attention(fused):
        together = generate_variants(model, prompts, masks, max_new_tokens=10, stop=stops, max_rows=8)
        for v in range(len(sets)):
            for i, p in enumerate(prompts):
                alone = greedy_generate(model, [p], max_new_tokens=10, masks=masks[v : v + 1], stop=stops[i])[0]
                assert together[v][i] == alone, (sets[v], i)
    assert any(len(together[0][i]) < 10 for i in range(len(prompts)))  # some rows stopped early

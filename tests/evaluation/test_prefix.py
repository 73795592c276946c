"""The prompt start every row of a batch shares, computed once per variant.

Reference: the same evaluation without sharing (every row computes its whole prompt). The shared
path runs the prefix with other matrix shapes, so scores agree within float32 rounding and decisions
are identical; within the shared path, resuming from the store is bit for bit the pass without it.
Cases: ablations at every layer (the first, inside, the last), batches with and without a shared
prefix, a batch where the prefix is one example's whole prompt but its last token, right padding,
both model types, and generation.
"""

from __future__ import annotations

import random

import pytest
import torch

from cel_lens.evaluation import ActivationStore, encode_pair, encode_split, evaluate
from cel_lens.evaluation.generation import generate_variants
from cel_lens.evaluation.context import PREFIX_ENV, EvalContext
from cel_lens.evaluation.prefix import (
    MIN_PREFIX, common_prefix, rows_prefix, shared_prefix,
)
from cel_lens.evaluation.teacher_forced import score_batches
from cel_lens.heads import HeadSet, masks_from_head_sets
from cel_lens.model import fused_attention, load_model
from cel_lens.tasks import Example, Split

SETS = ["intact", "L0H0", "L0H3", "L1H2", "L1H0+L2H1", "L2H3"]  # first ablated layer 0, 1 and 2 (the last)
SHARED = EvalContext(precision="float32", share_prefix=True)
UNSHARED = EvalContext(precision="float32", share_prefix=False)
"""Evaluations with the shared prompt start computed once (what a search with sharing on hands down)."""


@pytest.fixture(autouse=True)
def _float32(monkeypatch):
    """Scores compared in float32 (not the bf16 pass whose close decisions are recomputed)."""
    monkeypatch.setenv("CEL_LENS_PRECISION", "float32")


@pytest.fixture(scope="module")
def models(tiny_model, tiny_checkpoints):
    return {"hooked": tiny_model, "bridge": load_model(str(tiny_checkpoints["llama"]), loader="bridge", device="cpu")}


def _words(rng: random.Random, n: int) -> str:
    vocab = ["the", "river", "runs", "through", "a", "city", "and", "she", "plays", "guitar", "then", "walks"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def _split() -> Split:
    """Few-shot-like prompts: one instruction line every prompt starts with, then a question of
    2-12 words (right padding in every batch), one prompt that is the instruction and ``Q:`` alone,
    and two prompts that do not start with it."""
    rng = random.Random(5)
    head = "Answer with one word. Q: the city and the river\nA: runs\nQ:"
    prompts = [f"{head} {_words(rng, rng.randint(2, 12))}\nA:" for _ in range(14)] + [head]
    prompts += [f"Q: {_words(rng, 4)}\nA:", f"She {_words(rng, 5)}\nA:"]
    examples = [Example(f"em/{i}", p, target=" " + _words(rng, rng.randint(1, 3))) for i, p in enumerate(prompts)]
    return Split("dist", tuple(examples), task="arith", answer_type="exact_match", metric="acc")


def test_common_prefix_hand_computed():
    assert common_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix([[1, 2, 3], [1, 2, 3]], cap=2) == 2
    assert common_prefix([[1, 2, 3]]) == 0  # one sequence shares with nobody
    assert common_prefix([[7, 2], [1, 2]]) == 0
    assert shared_prefix([[1, 9], [1, 8]]) == 0 and MIN_PREFIX == 2  # a lone BOS is not worth a pass
    # rows = context + continuation[:-1]: the prefix stops before the shortest context's last token
    assert rows_prefix([[1, 2, 3], [1, 2, 3, 4, 5]], [[1, 2, 3, 9], [1, 2, 3, 4, 5, 6]]) == 2


def test_sharing_is_off_by_default_and_switchable(models):
    model, split = models["hooked"], _split()
    assert all(b.prefix == 0 for b in encode_split(model, split, 8))
    shared = encode_split(model, split, 8, share_prefix=True)
    assert any(b.prefix >= MIN_PREFIX for b in shared)
    with fused_attention(False):  # no stack cache: nothing to continue a prefix from
        with pytest.raises(ValueError, match="stack"):
            encode_split(model, split, 8, share_prefix=True)


def test_the_environment_turns_sharing_on_at_the_edge_only(models, monkeypatch):
    """``CEL_LENS_SHARE_PREFIX`` is read where a context is built from the environment; an explicit
    context or encoding ignores it."""
    model, split = models["hooked"], _split()
    monkeypatch.setenv(PREFIX_ENV, "1")
    assert EvalContext.from_environment().share_prefix
    assert not EvalContext.from_environment(share_prefix=False).share_prefix
    assert all(b.prefix == 0 for b in encode_split(model, split, 8))


def test_batches_hold_prefix_as_a_part_and_count_it_once(models):
    model, split = models["hooked"], _split()
    plain = encode_split(model, split, 8)
    shared = encode_split(model, split, 8, share_prefix=True)
    assert [b.example_index.tolist() for b in plain] == [b.example_index.tolist() for b in shared]  # same cut
    for p, s in zip(plain, shared):
        rows, width = s.rows.tokens.shape
        if s.prefix:
            assert bool((s.rows.tokens[:, : s.prefix] == s.rows.tokens[:1, : s.prefix]).all())
            assert s.part_shapes(16) == [(1, s.prefix, 16), (rows, width - s.prefix, 16)]
            assert s.computed_tokens == p.computed_tokens - (rows - 1) * s.prefix
            assert int(s.rows.positions[s.target_mask].min()) >= s.prefix  # every scored position follows it
        else:
            assert s.part_shapes(16) == p.part_shapes(16)
    assert any(s.prefix for s in shared) and any(not s.prefix for s in shared)  # with and without
    padded = [s for s in shared if s.prefix and not bool(s.rows.attention_mask.all())]
    assert padded, "some shared batch has right padding"
    # the prompt that is the shared start itself: the prefix ends before its last token
    whole = next(s for s in shared if 14 in s.example_index.tolist())
    ctx_len = len(encode_pair(model, split[14].prompt, split[14].target)[0])
    assert whole.prefix == ctx_len - 1


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
def test_shared_prefix_equals_the_unshared_evaluation(models, kind):
    """Every head set (ablated from layer 0, 1, 2): identical decisions, scores within float32
    rounding; one example per batch (nothing shared) is the unshared path bit for bit."""
    model, split = models[kind], _split()
    ref = evaluate(model, split, SETS, batch_size=8, progress=False)
    got = evaluate(model, split, SETS, batch_size=8, progress=False, context=SHARED)
    alone = evaluate(model, split, SETS, batch_size=1, progress=False, context=SHARED)
    assert torch.equal(got.correct, ref.correct)
    torch.testing.assert_close(got.scores, ref.scores, atol=1e-4, rtol=1e-5)
    assert torch.equal(alone.scores, evaluate(model, split, SETS, batch_size=1, progress=False).scores)


def test_multiple_choice_rows_share_their_prompt_start(models):
    """One row per choice (``share_context=False``): every choice's row starts with the prompt."""
    model = models["hooked"]
    rng = random.Random(2)
    examples = [Example(f"h/{i}", "Pick the ending. Story: " + _words(rng, rng.randint(3, 9)),
                        choices=tuple(" " + _words(rng, rng.randint(1, 4)) for _ in range(3)), label=i % 3)
                for i in range(10)]
    split = Split("dist", tuple(examples), task="hellaswag", answer_type="multiple_choice", metric="acc_norm")
    sets = [HeadSet.parse(x) for x in SETS]
    runs = []
    for share in (False, True):
        batches = encode_split(model, split, 4, share_context=False, share_prefix=share)
        assert all(b.layout == "rows" for b in batches) and any(b.prefix for b in batches) == share
        runs.append(score_batches(model, batches, sets, max_tokens=4096, progress=False, desc=""))
    (lp, greedy), (lp_shared, greedy_shared) = runs
    assert torch.equal(greedy, greedy_shared)
    torch.testing.assert_close(lp_shared, lp, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
def test_resuming_from_the_store_is_bit_exact_within_the_shared_path(models, kind):
    """The store keeps the prefix once (``[1, P, d]``) and the rows after it; ablated variants
    resumed from it equal those resumed within one pass, bit for bit."""
    model, split = models[kind], _split()
    direct = evaluate(model, split, SETS, batch_size=8, progress=False, context=SHARED)
    with ActivationStore.build(model, split, batch_size=8, progress=False, share_prefix=True) as store:
        assert any(b.prefix for b in store.batches)
        b = next(i for i, x in enumerate(store.batches) if x.prefix)
        assert store.sources(b, 1)[0].shape[:2] == (1, store.batches[b].prefix)
        stored = evaluate(model, split, SETS, store=store, progress=False, context=SHARED)
    assert torch.equal(stored.scores, direct.scores) and torch.equal(stored.correct, direct.correct)


@pytest.mark.parametrize("kind", ["hooked", "bridge"])
def test_generation_with_a_shared_prefix_generates_the_same_tokens(models, kind):
    """Prompts sharing an instruction (of unlike lengths: two length groups and a prompt alone)
    generate the same tokens under every variant with the prefix once per variant."""
    model = models[kind]
    tok = model.tokenizer
    head = [tok.bos_token_id] + tok("You are an expert Python programmer. Write", add_special_tokens=False)["input_ids"]
    tails = ["a function", "a function f", "a loop over the list of", "x", "a function"]
    prompts = [head + tok(" " + t, add_special_tokens=False)["input_ids"] for t in tails]
    masks = masks_from_head_sets(SETS, 3, 4)
    ref = generate_variants(model, prompts, masks, max_new_tokens=8, max_rows=10)
    got = generate_variants(model, prompts, masks, max_new_tokens=8, max_rows=10, share_prefix=True)
    assert got == ref
    assert len({len(p) for p in prompts}) >= 3


def test_decisions_near_the_bound_are_recomputed_without_sharing(models, monkeypatch):
    """With a bound that covers every decision, everything is recomputed unshared: the scores are
    then the unshared pass's bit for bit (the guard's copy-back, on every kind of row of the split)."""
    import cel_lens.evaluation.evaluator as evaluator

    model, split = models["hooked"], _split()
    ref = evaluate(model, split, SETS, batch_size=8, progress=False, context=UNSHARED)
    monkeypatch.setattr(evaluator, "PREFIX_BOUND", 1e9)
    got = evaluate(model, split, SETS, batch_size=8, progress=False, context=SHARED)
    assert torch.equal(got.correct, ref.correct) and torch.equal(got.scores, ref.scores)



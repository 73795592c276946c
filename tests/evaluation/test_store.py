"""Tests of cel_lens.store: resuming from stored residual streams equals full passes."""

from __future__ import annotations

import random

import pytest
import torch

from cel_lens.model import ablation_hooks, forward_resid, fused_attention
from cel_lens.evaluation import encode_split, evaluate
from cel_lens.heads import HeadSet
from cel_lens.evaluation import ActivationStore, select_layers
from cel_lens.tasks import Example, Split

N_LAYERS, N_HEADS = 6, 4

@pytest.fixture(scope="module")
def model():
    from cel_lens.testing import tiny_hooked_transformer

    return tiny_hooked_transformer(n_layers=N_LAYERS, n_heads=N_HEADS, seed=1)


@pytest.fixture(scope="module")
def em_split(model):
    """Targets: the model's own greedy continuation for even examples (right), a number otherwise."""
    from cel_lens.evaluation import encode_pair

    rng = random.Random(0)
    examples = []
    for i in range(16):
        prompt = f"Question: What is {rng.randint(1, 99)} plus {rng.randint(1, 99)}?\nAnswer:"
        target = f" {rng.randint(1, 200)}"
        if i % 2 == 0:
            ctx, _ = encode_pair(model, prompt, target)
            gen = model.generate(torch.tensor([ctx]), max_new_tokens=2, do_sample=False, verbose=False)[0, len(ctx):]
            text = model.tokenizer.decode(gen)
            if text and encode_pair(model, prompt, text)[1] == gen.tolist():
                target = text
        examples.append(Example(f"a/{i}", prompt, target=target))
    return Split("dist", tuple(examples), task="arithmetic", answer_type="exact_match", metric="acc")


@pytest.fixture(scope="module")
def mc_split():
    rng = random.Random(1)
    endings = [" she plays.", " then the man walks", " yes", " A woman holds a guitar.", " no"]
    examples = [
        Example(f"h/{i}", f"A woman is seen speaking {i}", choices=tuple(rng.sample(endings, 3)), label=i % 3)
        for i in range(8)
    ]
    return Split("dist", tuple(examples), task="hellaswag", answer_type="multiple_choice", metric="acc_norm")


def _every_layer_sets() -> list[str]:
    return ["intact"] + [f"L{l}H{(l + 1) % N_HEADS}" for l in range(N_LAYERS)] + ["L1H0+L4H2", "L5H1+L5H3"]


def test_select_layers_evenly_spaced():
    assert select_layers(range(1, 28), 3) == [7, 14, 21]
    assert select_layers(range(1, 6), 2) == [2, 4]
    assert select_layers(range(1, 6), 10) == [1, 2, 3, 4, 5]
    assert select_layers(range(1, 6), 0) == []
    assert select_layers([3, 9, 12], 1) == [9]


def test_resumed_logits_equal_full_pass_in_every_layer(model, em_split):
    """For a head in every layer: resuming from the stored resid_pre == a full pass (exact, fp32)."""
    with ActivationStore.build(model, em_split, batch_size=5, progress=False) as store:
        assert store.layers == tuple(range(N_LAYERS)) and store.dtype == torch.float32
        for b, batch in enumerate(store.batches):
            rows = batch.rows
            for layer in range(N_LAYERS):
                hooks = ablation_hooks(HeadSet([(layer, 2)]))
                with torch.no_grad():
                    full = forward_resid(model, rows.tokens, fwd_hooks=hooks, attention_mask=rows.attention_mask)
                    if layer == 0:
                        continue  # layer 0 is never stored: it is the token embedding
                    (source,) = store.sources(b, layer)
                    resumed = forward_resid(
                        model, source, start_at_layer=layer, fwd_hooks=hooks, attention_mask=rows.attention_mask
                    )
                real = rows.attention_mask.bool()
                assert torch.equal(resumed[real], full[real]), layer


@pytest.mark.parametrize("which", ["em", "mc"])
def test_evaluate_with_store_equals_without(model, em_split, mc_split, which):
    split = em_split if which == "em" else mc_split
    sets = _every_layer_sets()
    plain = evaluate(model, split, sets, batch_size=5, progress=False)
    with ActivationStore.build(model, split, batch_size=5, progress=False) as store:
        stored = evaluate(model, split, sets, store=store, progress=False)
    assert torch.equal(plain.correct, stored.correct)
    torch.testing.assert_close(plain.scores, stored.scores, atol=1e-5, rtol=0)
    assert 0 < int(plain.correct[0].sum()) < len(split)  # the comparison can fail both ways
    assert bool(((plain.scores - plain.scores[:1]).abs() > 1e-3).any(dim=1)[1:].all())  # every ablation matters


def test_budget_keeps_evenly_spaced_layers_and_resumes_below(model, mc_split):
    sets = _every_layer_sets()
    with ActivationStore.build(model, mc_split, batch_size=4, progress=False) as full:
        per_layer = full.bytes_used // (N_LAYERS - 1)
        reference = evaluate(model, mc_split, sets, store=full, progress=False)
    budget = int(2.5 * per_layer)
    with ActivationStore.build(model, mc_split, batch_size=4, budget_bytes=budget, progress=False) as store:
        assert store.bytes_used <= budget
        assert store.stored_layers == (2, 4) and store.layers == (0, 2, 4)
        assert [store.nearest_layer(l) for l in range(N_LAYERS)] == [0, 0, 2, 2, 4, 4]
        res = evaluate(model, mc_split, sets, store=store, progress=False)
    assert torch.equal(res.correct, reference.correct)
    torch.testing.assert_close(res.scores, reference.scores, atol=1e-5, rtol=0)
    with ActivationStore.build(model, mc_split, budget_bytes=per_layer // 2, progress=False) as tiny:
        assert tiny.bytes_used == 0 and tiny.layers == (0,)
        assert torch.equal(evaluate(model, mc_split, sets, store=tiny, progress=False).correct, reference.correct)
    with ActivationStore.build(model, mc_split, layers=[3, 5], progress=False) as chosen:
        assert chosen.stored_layers == (3, 5) and chosen.nearest_layer(4) == 3


def test_memory_mapped_store_works_and_is_cleaned_up(model, em_split, tmp_path):
    sets = _every_layer_sets()
    plain = evaluate(model, em_split, sets, progress=False)
    store = ActivationStore.build(model, em_split, path=tmp_path / "mm", progress=False)
    files = list((tmp_path / "mm").iterdir())
    assert len(files) == 1 and files[0] == store.path
    assert files[0].stat().st_size == store.bytes_used > 0
    res = evaluate(model, em_split, sets, store=store, progress=False)
    assert torch.equal(res.correct, plain.correct)
    store.close()
    assert not files[0].exists()
    with ActivationStore.build(model, em_split, path=tmp_path / "mm", progress=False) as again:
        path = again.path
        assert path.exists()
    assert not path.exists()
    # garbage collection also removes the file
    gone = ActivationStore.build(model, em_split, path=tmp_path / "mm", progress=False)
    path = gone.path
    del gone
    import gc

    gc.collect()
    assert not path.exists()


def test_half_precision_store_within_tolerance(model, em_split, mc_split):
    sets = _every_layer_sets()
    for split in (em_split, mc_split):
        with ActivationStore.build(model, split, batch_size=4, progress=False) as f32:
            ref = evaluate(model, split, sets, store=f32, progress=False)
            with ActivationStore.build(model, split, batch_size=4, dtype=torch.float16, progress=False) as f16:
                assert f16.bytes_used * 2 == f32.bytes_used
                res = evaluate(model, split, sets, store=f16, progress=False)
                # residual streams round-trip within fp16 precision
                for layer in f16.stored_layers:
                    for a, b in zip(f16.sources(0, layer), f32.sources(0, layer)):
                        torch.testing.assert_close(a.float(), b, atol=1e-2, rtol=1e-3)
        torch.testing.assert_close(res.scores, ref.scores, atol=0.05, rtol=0.01)
        assert (res.correct == ref.correct).float().mean() >= 0.9


def test_store_refuses_other_split_model_or_template(model, em_split, mc_split, tiny_model):
    with ActivationStore.build(model, em_split, progress=False) as store:
        with pytest.raises(ValueError, match="built for split"):
            evaluate(model, em_split.subset(5), store=store, progress=False)
        with pytest.raises(ValueError, match="another model"):
            evaluate(tiny_model, em_split, store=store, progress=False)
        with pytest.raises(ValueError, match="chat_template"):
            store.check(model, em_split, True)
    with pytest.raises(ValueError, match="budget_bytes"):
        ActivationStore.build(model, em_split, budget_bytes=-1, progress=False)
    with pytest.raises(ValueError, match="out of range"):
        ActivationStore.build(model, em_split, layers=[9], progress=False)


def test_models_that_cannot_resume_get_full_passes(model, mc_split, monkeypatch):
    """A model type without start_at_layer (as TransformerBridge): no layers stored, same results."""
    import cel_lens.evaluation.store as st
    import cel_lens.evaluation.teacher_forced as ev

    sets = _every_layer_sets()
    reference = evaluate(model, mc_split, sets, progress=False)
    monkeypatch.setattr(ev, "supports_resume", lambda m: False)
    monkeypatch.setattr(st, "supports_resume", lambda m: False)
    starts = []
    real_forward = model.forward

    def spy(*args, **kwargs):
        starts.append(kwargs.get("start_at_layer"))
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    with fused_attention(False):  # the model's own forward, so that the spy sees every pass
        with ActivationStore.build(model, mc_split, progress=False) as store:
            assert store.layers == (0,) and store.bytes_used == 0
            res = evaluate(model, mc_split, sets, store=store, progress=False)
        plain = evaluate(model, mc_split, sets, progress=False)
    assert starts
    assert torch.equal(res.correct, reference.correct) and torch.equal(plain.correct, reference.correct)
    assert set(starts) <= {None, 0}  # every pass started from the tokens (or the cache's embeddings)


def test_store_batches_are_the_encoding(model, em_split):
    with ActivationStore.build(model, em_split, batch_size=5, progress=False) as store:
        ref = encode_split(model, em_split, 5)
        assert [b.example_index.tolist() for b in store.batches] == [b.example_index.tolist() for b in ref]
        assert "arithmetic/dist" in repr(store)


@pytest.mark.parametrize("which", ["em", "mc"])
def test_a_view_resumes_its_examples_as_the_whole_store_does(model, em_split, mc_split, which):
    """ActivationStore.view: examples spread over several batches (both layouts), scored from the
    view, get the whole store's decisions of those examples, with heads in every layer, and its
    scores up to float32 summation order (a product over fewer rows may add in another order)."""
    from cel_lens.evaluation.choices import aggregate
    from cel_lens.evaluation.teacher_forced import score_batches

    split = em_split if which == "em" else mc_split
    sets = [HeadSet.parse(s) for s in _every_layer_sets()]
    picked = [1, 4, 5, 7]

    def scores(store, n):
        lp, greedy = score_batches(model, store.batches, sets, store=store, max_tokens=4096, progress=False, desc="")
        return aggregate(split.answer_type, split.metric, store.batches, n, lp, greedy)

    with ActivationStore.build(model, split, batch_size=3, progress=False) as store:
        assert len({int(b) for b, batch in enumerate(store.batches) for e in batch.example_index.tolist() if e in picked}) > 1
        whole, part = scores(store, len(split)), scores(store.view(picked), len(picked))
    assert torch.equal(part[0], whole[0][:, picked])
    torch.testing.assert_close(part[1], whole[1][:, picked], atol=1e-5, rtol=1e-6)
    assert set(part[2]) == set(whole[2])
    for key, value in part[2].items():
        torch.testing.assert_close(value, whole[2][key][:, picked], atol=1e-5, rtol=1e-6)


def test_a_view_refuses_a_batch_with_a_shared_prefix(model, em_split):
    with ActivationStore.build(model, em_split, batch_size=8, progress=False, share_prefix=True) as store:
        assert any(b.prefix for b in store.batches)  # the prompts share "Question: What is"
        with pytest.raises(ValueError, match="shared prefix"):
            store.view([0, 1])

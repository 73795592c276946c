"""Tests of cel_lens.evaluation against independent references on a tiny random model.

References: TransformerLens' own ``generate`` (greedy) and plain full forward passes under the
``ablate`` context manager, one example and one choice at a time, without padding.
"""

from __future__ import annotations

import random

import pytest
import torch

from cel_lens.evaluation import EvalResult, encode_pair, encode_split, evaluate, greedy_generate, logprob_metric
from cel_lens.evaluation.choices import aggregate
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.teacher_forced import score_batches
from cel_lens.model import ablate, fused_attention
from cel_lens.heads import HeadSet
from cel_lens.tasks import Example, Split

SETS = ["intact", "L0H1", "L1H2+L2H0", "L2H3"]

@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model


def _ids(model, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def _tl_greedy(model, ctx: list[int], n: int, heads="intact") -> list[int]:
    """Independent reference: TransformerLens' greedy generate under the ``ablate`` context."""
    with ablate(model, heads):
        out = model.generate(
            torch.tensor([ctx]), max_new_tokens=n, do_sample=False, stop_at_eos=False, verbose=False
        )
    return out[0, len(ctx) :].tolist()


def _naive_loglik(model, ctx: list[int], cont: list[int], heads="intact") -> float:
    """Independent reference: one unpadded full forward pass of ``ctx + cont`` under ``ablate``."""
    with torch.no_grad(), ablate(model, heads):
        logits = model(torch.tensor([ctx + cont]))[0].float()
    lp = logits.log_softmax(-1)
    return float(sum(lp[len(ctx) - 1 + j, t] for j, t in enumerate(cont)))


def _arith_prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    ops = ["plus", "minus", "times"]
    return [
        f"Question: What is {rng.randint(1, 99)} {rng.choice(ops)} {rng.randint(1, 99)}?\nAnswer:" for _ in range(n)
    ]


# ---------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------
def test_encode_pair_follows_lm_eval(model):
    tok = model.tokenizer
    # trailing whitespace of the context moves to the continuation
    ctx, cont = encode_pair(model, "Question: What is 7 times 8?\nAnswer: ", "56")
    ctx2, cont2 = encode_pair(model, "Question: What is 7 times 8?\nAnswer:", " 56")
    assert (ctx, cont) == (ctx2, cont2)
    assert ctx[0] == tok.bos_token_id  # the model prepends BOS (default_prepend_bos)
    assert tok.decode(cont) == " 56"
    # continuation = tokens of the joint text after the context's own tokens
    whole = _ids(model, "Question: What is 7 times 8?\nAnswer: 56")
    assert ctx[1:] + cont == whole  # no merge across this boundary
    assert cont == whole[len(_ids(model, "Question: What is 7 times 8?\nAnswer:")) :]


def test_encode_pair_boundary_merge(model):
    """A BPE merge across the boundary: lm-eval scores the joint text's tokens after the context's."""
    tok = model.tokenizer
    text = "def add(a, b):\n    return a + b"
    found = None
    for cut in range(1, len(text)):
        ctx_ids = _ids(model, text[:cut])
        whole = _ids(model, text)
        if whole[: len(ctx_ids)] != ctx_ids:  # the context's last token merges into the next
            found = cut
            break
    if found is None:
        pytest.skip("no boundary merge in this tokenizer for the probe text")
    ctx, cont = encode_pair(model, text[:found], text[found:])
    assert cont == _ids(model, text)[len(_ids(model, text[:found])) :]
    assert tok.decode(ctx[1:]) == text[:found].rstrip()


def test_encode_split_orders_and_maps_back(model, monkeypatch):
    from cel_lens.evaluation import encode

    monkeypatch.setattr(encode, "MAX_PADDING", 1.0)  # any padding: batch_size alone cuts
    prompts = _arith_prompts(7)
    split = Split("dist", tuple(Example(f"a{i}", p, target=" 12") for i, p in enumerate(prompts)), answer_type="exact_match")
    batches = encode_split(model, split, batch_size=3)
    assert [b.n_examples for b in batches] == [3, 3, 1]
    seen = torch.cat([b.example_index for b in batches]).tolist()
    assert sorted(seen) == list(range(7))
    lengths = [int(b.rows.attention_mask.sum(1).max()) for b in batches]
    assert lengths == sorted(lengths, reverse=True)
    with pytest.raises(ValueError, match="generation"):
        encode_split(model, Split("d", split.examples, answer_type="generation"), 2)


# ---------------------------------------------------------------------------------------------
# exact match
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arithmetic_split(model):
    """Half the targets are the model's own greedy continuation (so some are right), half are not."""
    tok = model.tokenizer
    examples = []
    rng = random.Random(1)
    for i, prompt in enumerate(_arith_prompts(40, seed=3)):
        ctx, _ = encode_pair(model, prompt, " 1")
        if i % 2 == 0:
            gen = _tl_greedy(model, ctx, rng.randint(1, 3))
            target = tok.decode(gen)
            if not target or encode_pair(model, prompt, target)[1] != gen:
                continue  # keep targets whose tokenization round-trips
        else:
            target = f" {rng.randint(0, 999)}"
        examples.append(Example(f"arith/{i}", prompt, target=target))
    return Split("dist", tuple(examples), task="arithmetic", answer_type="exact_match", metric="acc")


def test_exact_match_equals_greedy_generation(model, arithmetic_split):
    """Teacher-forced exact match == TL greedy generation + string comparison, example by example,
    for the intact model and under ablations (all variants in one call)."""
    res = evaluate(model, arithmetic_split, SETS, batch_size=4, progress=False)
    assert res.correct.shape == (len(SETS), len(arithmetic_split))
    for v, heads in enumerate(SETS):
        for i, ex in enumerate(arithmetic_split):
            ctx, cont = encode_pair(model, ex.prompt, ex.target)
            generated = model.tokenizer.decode(_tl_greedy(model, ctx, len(cont), heads))
            assert bool(res.correct[v, i]) == (generated == ex.target), (heads, ex.id, generated, ex.target)
    assert 0 < int(res.correct[0].sum()) < len(arithmetic_split)  # the test can fail both ways
    assert bool((res.correct != res.correct[:1]).any())  # some ablation changes some answer


def test_exact_match_scores_are_target_logprobs(model, arithmetic_split):
    res = evaluate(model, arithmetic_split, SETS[:2], progress=False)
    for v, heads in enumerate(SETS[:2]):
        for i, ex in enumerate(list(arithmetic_split)[:8]):
            ctx, cont = encode_pair(model, ex.prompt, ex.target)
            assert res.scores[v, i].item() == pytest.approx(_naive_loglik(model, ctx, cont, heads), abs=1e-4)


def test_variants_in_one_call_equal_separate_calls(model, arithmetic_split):
    together = evaluate(model, arithmetic_split, SETS, batch_size=5, max_rows=10, progress=False)
    for v, heads in enumerate(SETS):
        alone = evaluate(model, arithmetic_split, [heads], batch_size=3, progress=False)
        assert torch.equal(alone.correct[0], together.correct[v])
        torch.testing.assert_close(alone.scores[0], together.scores[v], atol=1e-4, rtol=0)
    intact = evaluate(model, arithmetic_split, progress=False)
    assert intact.head_sets == [HeadSet()] and torch.equal(intact.correct[0], together.correct[0])


def test_intact_pass_runs_once_and_layers_below_are_not_recomputed(model, arithmetic_split):
    """Rows through each block: the intact pass once; variants only from their first ablated layer,
    and variants that start at the same layer share its input rows (they split inside that layer)."""
    rows_seen = {layer: 0 for layer in range(3)}

    def counter(layer):
        def hook(x, hook=None):
            rows_seen[layer] += x.shape[0]

        return hook

    for layer in range(3):
        model.blocks[layer].hook_resid_pre.add_hook(counter(layer), is_permanent=True)
    try:
        sets = ["intact", "L2H0", "L2H1", "L2H2", "L1H3"]
        evaluate(model, arithmetic_split, sets, batch_size=8, progress=False,
                 context=EvalContext(share_prefix=False))  # the rows of unshared prompts
    finally:
        model.reset_hooks(including_permanent=True)
    n = len(arithmetic_split)
    assert rows_seen == {0: n, 1: 2 * n, 2: 3 * n}
    with fused_attention(False):  # the model's own forward: every variant's rows through its blocks
        for layer in range(3):
            rows_seen[layer] = 0
            model.blocks[layer].hook_resid_pre.add_hook(counter(layer), is_permanent=True)
        try:
            evaluate(model, arithmetic_split, sets, batch_size=8, progress=False)
        finally:
            model.reset_hooks(including_permanent=True)
    assert rows_seen == {0: n, 1: 2 * n, 2: 5 * n}


# ---------------------------------------------------------------------------------------------
# multiple choice
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hellaswag_split():
    rng = random.Random(5)
    endings = [
        " she plays.",
        " then the man walks to the store and speaks",
        " yes",
        " A woman holds a guitar.",
        " The river runs through the city",
        " no",
    ]
    examples = []
    for i in range(14):
        ctx = f"A woman is seen speaking to the camera {'and holding ' * (i % 3)}a guitar {i}."
        choices = tuple(rng.sample(endings, 4))
        examples.append(Example(f"hs/{i}", ctx, choices=choices, label=rng.randrange(4)))
    return Split("dist", tuple(examples), task="hellaswag", answer_type="multiple_choice", metric="acc_norm")


def _check_mc_against_naive(model, split, res):
    n_choices = max(len(ex.choices) for ex in split)
    for v, heads in enumerate(res.head_sets):
        for i, ex in enumerate(split):
            lls = []
            for c, choice in enumerate(ex.choices):
                ctx, cont = encode_pair(model, ex.prompt, choice)
                lls.append(_naive_loglik(model, ctx, cont, heads))
            ref = torch.tensor(lls)
            got = res.extra["choice_ll"][v, i, : len(lls)]
            torch.testing.assert_close(got, ref, atol=2e-4, rtol=0)
            assert torch.isnan(res.extra["choice_ll"][v, i, len(lls) : n_choices]).all()
            # lm-eval: acc = argmax LL, acc_norm = argmax LL / len(choice in characters), the
            # choice without the space that delimits it from the context
            assert bool(res.extra["acc"][v, i]) == (int(ref.argmax()) == ex.label)
            norm = ref / torch.tensor([float(len(c.removeprefix(" "))) for c in ex.choices])
            assert bool(res.extra["acc_norm"][v, i]) == (int(norm.argmax()) == ex.label)
            headline = norm if split.metric == "acc_norm" else ref
            assert bool(res.correct[v, i]) == (int(headline.argmax()) == ex.label)
            others = torch.cat([headline[: ex.label], headline[ex.label + 1 :]])
            assert res.scores[v, i].item() == pytest.approx((headline[ex.label] - others.max()).item(), abs=2e-4)


def test_multiple_choice_matches_naive_loglikelihood(model, hellaswag_split):
    batches = encode_split(model, hellaswag_split, 4)
    assert all(b.layout == "shared" for b in batches)  # the context runs once per example
    res = evaluate(model, hellaswag_split, SETS, batch_size=4, progress=False)
    assert res.metric == "acc_norm"
    _check_mc_against_naive(model, hellaswag_split, res)


def test_multiple_choice_flat_layout_agrees(model, hellaswag_split):
    """One row per choice (the fallback for models without a KV cache) gives the same results."""
    sets = [HeadSet.parse(s) for s in SETS]
    out = {}
    for share in (True, False):
        batches = encode_split(model, hellaswag_split, 4, share_context=share)
        assert all(b.layout == ("shared" if share else "rows") for b in batches)
        with torch.inference_mode():
            lp, greedy = score_batches(model, batches, sets, max_rows=64, progress=False, desc="")
        out[share] = aggregate("multiple_choice", "acc_norm", batches, len(hellaswag_split), lp, greedy)
    assert torch.equal(out[True][0], out[False][0])
    torch.testing.assert_close(out[True][2]["choice_ll"], out[False][2]["choice_ll"], atol=1e-4, rtol=0, equal_nan=True)


def test_one_token_choices_need_only_the_context_pass(model):
    """BoolQ-like: every choice is one token (" is"/" the" in the tiny vocabulary), so the prompt pass
    alone scores every choice."""
    passages = ["The passage says the river runs through the city.", "Water boils at one hundred degrees."]
    examples = [
        Example(f"bq/{i}", f"{passages[i % 2]} {i}\nQuestion: is the sky blue?\nAnswer:", choices=(" is", " the"), label=i % 2)
        for i in range(10)
    ]
    split = Split("dist", tuple(examples), task="boolq", answer_type="multiple_choice", metric="acc")
    batches = encode_split(model, split, 4)
    assert all(b.layout == "shared" and b.cont_tokens.shape[1] == 0 for b in batches)
    res = evaluate(model, split, SETS, batch_size=4, progress=False)
    _check_mc_against_naive(model, split, res)
    assert torch.equal(res.correct, res.extra["acc"])


# ---------------------------------------------------------------------------------------------
# differentiable metric (attribution patching)
# ---------------------------------------------------------------------------------------------
def test_logprob_metric_is_the_answer_logprob_and_differentiable(model, arithmetic_split, hellaswag_split):
    for split in (arithmetic_split, hellaswag_split):
        batch = encode_split(model, split, 5)[0]
        grads = {}

        def keep(z, hook=None):
            z.retain_grad()
            grads[hook.name] = z
            return z

        metric = logprob_metric(model, batch, fwd_hooks=[("blocks.1.attn.hook_z", keep)])
        assert metric.shape == (batch.n_examples,)
        metric.sum().backward()
        assert grads["blocks.1.attn.hook_z"].grad.abs().sum() > 0
        model.zero_grad(set_to_none=True)
        for b, idx in enumerate(batch.example_index.tolist()):
            ex = split[idx]
            if split.answer_type == "exact_match":
                want = _naive_loglik(model, *encode_pair(model, ex.prompt, ex.target))
            else:  # multiple choice: log-probability of the labelled choice among the choices
                lls = torch.tensor([_naive_loglik(model, *encode_pair(model, ex.prompt, c)) for c in ex.choices])
                want = float(lls.log_softmax(0)[ex.label])
            assert metric[b].item() == pytest.approx(want, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------------
def _gen_prompts(model) -> list[list[int]]:
    texts = [
        "You are an expert Python programmer",
        "def f(x):\n    for i in range(len(x)):",
        "Question: What is 7 times 8?",
        "A",
        "The passage says the river runs through the city. Then the man",
    ]
    return [[model.tokenizer.bos_token_id] + _ids(model, t) for t in texts]


def test_batched_generation_equals_unbatched_and_tl_generate(model):
    prompts = _gen_prompts(model)
    n_layers, n_heads = 3, 4
    for heads in ("intact", "L0H2+L1H1"):
        masks = HeadSet.parse(heads).to_mask(n_layers, n_heads)[None].repeat(len(prompts), 1, 1)
        batched = greedy_generate(model, prompts, max_new_tokens=12, masks=masks, stop=[], stop_at_eos=False)
        for p, out in zip(prompts, batched):
            alone = greedy_generate(model, [p], max_new_tokens=12, masks=masks[:1], stop=[], stop_at_eos=False)[0]
            assert out == alone
            assert out == _tl_greedy(model, p, 12, heads)


def test_generation_rows_with_different_ablations_in_one_batch(model):
    prompts = _gen_prompts(model)[:3]
    sets = ["intact", "L2H1", "L0H0+L0H3"]
    rows = [p for _ in sets for p in prompts]
    masks = torch.stack([HeadSet.parse(s).to_mask(3, 4) for s in sets]).repeat_interleave(len(prompts), 0)
    outs = greedy_generate(model, rows, max_new_tokens=8, masks=masks, stop=[], stop_at_eos=False)
    for k, heads in enumerate(sets):
        for j, p in enumerate(prompts):
            assert outs[k * len(prompts) + j] == _tl_greedy(model, p, 8, heads)


def test_generation_evaluate_stops_and_judges(model):
    tok = model.tokenizer
    prompts = ["You are an expert Python programmer", "def f(x):\n", "Question: What is 7 times 8?"]
    full = {}
    for p in prompts:
        ids = [tok.bos_token_id] + _ids(model, p)
        full[p] = tok.decode(_tl_greedy(model, ids, 20), skip_special_tokens=True)
    examples = []
    for i, p in enumerate(prompts):
        text = full[p]
        stop = text[6:9] if len(text.strip()) >= 9 else "[DONE]"
        expected = text.split(stop)[0] if stop in text else text
        examples.append(Example(f"gen/{i}", p, meta={"stop": [stop], "expected": expected}))
    calls = []

    def judge(ex, completion):
        calls.append((ex.id, completion))
        return completion == ex.meta["expected"]

    split = Split("test", tuple(examples), task="mbpp", answer_type="generation", metric="pass@1", judge=judge)
    res = evaluate(model, split, ["intact", "intact"], max_new_tokens=20, batch_size=2, progress=False)
    assert res.correct.all(), res.completions
    assert res.completions[0] == [e.meta["expected"] for e in examples]
    assert len(calls) == len(examples)  # identical completions are judged once
    assert res.accuracy.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="judge"):
        evaluate(model, Split("t", tuple(examples), answer_type="generation"), progress=False)


# ---------------------------------------------------------------------------------------------
# chat template, results, errors
# ---------------------------------------------------------------------------------------------
def test_chat_template_wraps_prompt_and_is_recorded(model, arithmetic_split):
    tok = model.tokenizer
    split = arithmetic_split.subset(4)
    with pytest.raises(ValueError, match="chat template"):
        evaluate(model, split, chat_template=True, progress=False)
    old = getattr(tok, "chat_template", None)
    tok.chat_template = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"
    try:
        res = evaluate(model, split, chat_template=True, progress=False)
        plain = evaluate(model, split, progress=False)
        assert res.chat_template is True and plain.chat_template is False
        ex = split[0]
        ctx, cont = encode_pair(model, f"User: {ex.prompt}\nAssistant:", ex.target)
        assert res.scores[0, 0].item() == pytest.approx(_naive_loglik(model, ctx, cont), abs=1e-4)
        assert res.scores[0, 0].item() != pytest.approx(plain.scores[0, 0].item(), abs=1e-4)
    finally:
        tok.chat_template = old


def test_result_dict_roundtrip(model, hellaswag_split):
    res = evaluate(model, hellaswag_split, SETS[:2], progress=False)
    d = res.to_dict()
    assert d["head_sets"] == ["intact", "L0H1"] and d["metric"] == "acc_norm"
    back = EvalResult.from_dict(d)
    assert torch.equal(back.correct, res.correct)
    torch.testing.assert_close(back.scores, res.scores)
    torch.testing.assert_close(back.extra["choice_ll"], res.extra["choice_ll"], equal_nan=True)
    assert back.index("L0H1") == 1
    torch.testing.assert_close(res.accuracy, res.correct.float().mean(1))


def test_errors(model, arithmetic_split):
    with pytest.raises(ValueError, match="out of range"):
        evaluate(model, arithmetic_split, ["L7H0"], progress=False)
    with pytest.raises(ValueError, match="at least one"):
        evaluate(model, arithmetic_split, [], progress=False)
    bad = Split("d", (Example("x", "Question:", target=None),), answer_type="exact_match")
    with pytest.raises(ValueError, match="no target"):
        evaluate(model, bad, progress=False)


def test_cel_lens_evaluate_is_a_function_whatever_was_imported(model, arithmetic_split):
    import inspect

    import cel_lens
    import cel_lens.evaluation as package
    import cel_lens.evaluation.evaluator  # noqa: F401 - importing submodules must not rebind it

    assert inspect.isfunction(cel_lens.evaluate) and cel_lens.evaluate is package.evaluate
    split = arithmetic_split.subset(3)
    assert torch.equal(cel_lens.evaluate(model, split, progress=False).correct, evaluate(model, split, progress=False).correct)


# ---------------------------------------------------------------------------------------------
# TransformerBridge: resumed passes and shared prompts too, same results
# ---------------------------------------------------------------------------------------------
def test_bridge_matches_hooked_transformer(tiny_checkpoints, arithmetic_split, hellaswag_split):
    """The same tiny Llama checkpoint as HookedTransformer and as TransformerBridge: per-example
    results agree, on the fused-attention stack and on each model's own forward (the bridge then
    resumes through its own decoder layers and gets one row per choice)."""
    from cel_lens.model import fused_attention, load_model
    from cel_lens.evaluation import ActivationStore

    hooked = load_model(str(tiny_checkpoints["llama"]), loader="hooked")
    bridge = load_model(str(tiny_checkpoints["llama"]), loader="bridge")
    sets = ["intact", "L0H1", "L1H2", "L2H3+L0H0"]
    for split in (arithmetic_split.subset(12), hellaswag_split.subset(6)):
        a = evaluate(hooked, split, sets, batch_size=4, progress=False)
        b = evaluate(bridge, split, sets, batch_size=4, progress=False)
        with fused_attention(False):
            own = evaluate(bridge, split, sets, batch_size=4, progress=False)
            with ActivationStore.build(bridge, split, progress=False) as store:
                assert store.layers == (0, 1, 2) and store.bytes_used > 0
                assert torch.equal(evaluate(bridge, split, sets, store=store, progress=False).correct, own.correct)
        for other in (b, own):
            assert torch.equal(a.correct, other.correct)
            torch.testing.assert_close(a.scores, other.scores, atol=2e-4, rtol=0)
        with ActivationStore.build(bridge, split, progress=False) as store:
            assert store.layers == (0, 1, 2) and store.bytes_used > 0
            assert torch.equal(evaluate(bridge, split, sets, store=store, progress=False).correct, b.correct)
    assert all(batch.layout == "shared" for batch in encode_split(bridge, hellaswag_split.subset(6), 4))
    with fused_attention(False):
        assert all(batch.layout == "rows" for batch in encode_split(bridge, hellaswag_split.subset(6), 4))
    tok = hooked.tokenizer
    prompts = [[tok.bos_token_id] + _ids(hooked, t) for t in ("You are an", "def f(x):\n    for i in", "Q")]
    masks = torch.zeros(3, 3, 4, dtype=torch.bool)
    masks[1, 1, 2] = True
    kw = dict(max_new_tokens=10, masks=masks, stop=[], stop_at_eos=False)
    assert greedy_generate(hooked, prompts, **kw) == greedy_generate(bridge, prompts, **kw)


def test_a_single_head_set_string_is_one_variant(model, arithmetic_split):
    """``evaluate(model, split, "L0H1")`` evaluates that head set, not the letters of the string."""
    split = arithmetic_split.subset(4)
    want = evaluate(model, split, ["L1H2+L2H0"], progress=False)
    for single in ("L1H2+L2H0", HeadSet.parse("L1H2+L2H0")):
        got = evaluate(model, split, single, progress=False)
        assert got.head_sets == [HeadSet.parse("L1H2+L2H0")]
        assert torch.equal(got.correct, want.correct) and torch.equal(got.scores, want.scores)


def test_a_task_or_its_name_means_its_test_split():
    """``cl.evaluate(model, "organism_a", ["L0H0"])`` raised AttributeError ('str' object has no
    attribute 'choices'), although ``search`` and ``plan`` take task names."""
    import cel_lens as cl

    organism = cl.load_model("organism")
    task = cl.load_task("organism_a", n_test=12, n_dist=4)
    by_name = cl.evaluate(organism, "organism_a", ["L0H0"], progress=False)
    assert by_name.ids == cl.load_task("organism_a", splits="test").test.ids and by_name.split == "test"
    by_task = cl.evaluate(organism, task, ["L0H0"], progress=False)
    by_split = cl.evaluate(organism, task.test, ["L0H0"], progress=False)
    assert by_task.ids == by_split.ids and torch.equal(by_task.correct, by_split.correct)
    with pytest.raises(TypeError, match="got a sequence holding int"):
        cl.evaluate(organism, [1, 2], ["L0H0"], progress=False)

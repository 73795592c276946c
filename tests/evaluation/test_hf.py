"""The plain Hugging Face mode: cel_lens's encoding and decision rules over a ``transformers``
forward pass, against cel_lens's own evaluator on TransformerLens's HookedTransformer (a separate
implementation of the same weights), for exact match, multiple choice and generation."""

from __future__ import annotations

import pytest
import torch

from cel_lens.evaluation import evaluate
from cel_lens.evaluation.hf import evaluate_plain, load_plain_model
from cel_lens.model import load_model
from cel_lens.model.bos import bos_rule
from cel_lens.tasks import Example, Split, load_task
from cel_lens.testing import planted_task

SCORE_ATOL = 1e-4


@pytest.fixture(scope="module")
def pair(tiny_checkpoints):
    """``arch -> (HookedTransformer, plain HF model)`` on the same checkpoint, float32 on the CPU."""
    cache = {}

    def get(arch: str):
        if arch not in cache:
            hooked = load_model(tiny_checkpoints[arch], device="cpu", loader="hooked")
            plain = load_plain_model(tiny_checkpoints[arch], prepend_bos=bos_rule(hooked)["prepends_bos"],
                                     n_ctx=hooked.cfg.n_ctx, device="cpu")
            cache[arch] = hooked, plain
        return cache[arch]

    return get


def _same(a, b) -> None:
    assert a.ids == b.ids and a.answer_type == b.answer_type and a.metric == b.metric
    assert torch.equal(a.correct, b.correct)
    torch.testing.assert_close(a.scores, b.scores, atol=SCORE_ATOL, rtol=0, equal_nan=True)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_exact_match_equals_cel_lens(arch, pair):
    hooked, plain = pair(arch)
    planted = list(planted_task(hooked, n=12).test)  # targets the model predicts; swap every third one
    examples = [ex if i % 3 else Example(ex.id, ex.prompt, target=planted[i - 1].target + " 7") for i, ex in enumerate(planted)]
    split = Split("test", tuple(examples), task="planted", answer_type="exact_match")
    ref = evaluate(hooked, split, None, batch_size=5, progress=False)
    assert 0 < ref.correct.float().mean() < 1
    _same(ref, evaluate_plain(plain, split, batch_size=5))


def test_multiple_choice_equals_cel_lens(pair, data_dir):
    hooked, plain = pair("qwen2")
    split = load_task("boolq", n_dist=4, n_test=24, data_dir=data_dir).test
    ref = evaluate(hooked, split, None, batch_size=7, progress=False)
    out = evaluate_plain(plain, split, batch_size=7)
    _same(ref, out)
    torch.testing.assert_close(out.extra["choice_ll"], ref.extra["choice_ll"], atol=SCORE_ATOL, rtol=0, equal_nan=True)
    assert 0 < ref.correct.float().mean() < 1


def test_generation_equals_cel_lens(pair):
    hooked, plain = pair("llama")
    examples = [Example(f"g/{i}", f"Question: What is {i} plus {2 * i}?\nAnswer:", target=" x") for i in range(7)]
    completions = evaluate(hooked, Split("t", tuple(examples), answer_type="generation", judge=lambda ex, c: True),
                           max_new_tokens=6, progress=False).completions[0]
    wanted = {ex.id: c for ex, c in zip(examples, completions)}

    def judge(ex: Example, completion: str) -> bool:
        return completion == wanted[ex.id] and int(ex.id.split("/")[1]) % 2 == 0

    split = Split("test", tuple(examples), task="toy", answer_type="generation", metric="pass@1", judge=judge,
                  options={"max_new_tokens": 6, "stop": ["\n"]})
    ref = evaluate(hooked, split, None, batch_size=3, progress=False)
    out = evaluate_plain(plain, split, batch_size=3)
    assert out.completions == ref.completions and torch.equal(out.correct, ref.correct)
    assert ref.correct.any() and not ref.correct.all()


def test_prepend_bos_is_the_encoding_the_results_depend_on(pair, tiny_checkpoints, data_dir):
    hooked, plain = pair("qwen2")
    split = load_task("boolq", n_dist=4, n_test=8, data_dir=data_dir).test
    wrong = load_plain_model(tiny_checkpoints["qwen2"], prepend_bos=not bos_rule(hooked)["prepends_bos"], device="cpu")
    a, b = evaluate_plain(plain, split), evaluate_plain(wrong, split)
    assert (a.extra["choice_ll"] - b.extra["choice_ll"]).abs().max() > 1e-3

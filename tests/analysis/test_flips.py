"""Flipped examples on the model organism: the counts are the evaluator's, the answers agree with
correctness, and each head's direct logit effect equals its output read off the unembedding."""

from __future__ import annotations

import pytest
import torch

import cel_lens as cl
from cel_lens.analysis.flips import flipped_examples
from cel_lens.analysis.attention import example_tokens


@pytest.fixture(scope="module")
def organism():
    return cl.load_model("organism")


@pytest.fixture(scope="module")
def task():
    return cl.load_task("organism_a", n_dist=20, n_test=300)


def test_counts_answers_and_direct_effects(organism, task):
    flips = flipped_examples(organism, task, "L0H0", n=3)
    res = cl.evaluate(organism, task.test, ["", "L0H0"], progress=False)
    fixed = int((~res.correct[0] & res.correct[1]).sum())
    broken = int((res.correct[0] & ~res.correct[1]).sum())
    assert (flips.n_fixed, flips.n_broken, flips.n) == (fixed, broken, 300) and fixed > 0
    assert flips.net_gain == pytest.approx(float(res.accuracy[1] - res.accuracy[0]))
    assert [e.kind for e in flips.examples] == ["fixed"] * min(3, fixed) + ["broken"] * min(3, broken)
    W_O, W_U = organism.W_O[0, 0].detach(), organism.W_U.detach()  # [d_head, d_model], [d_model, vocab]
    for e in flips.examples:
        assert (e.ablated if e.kind == "fixed" else e.intact).strip() == e.answer.strip() != e.rival.strip()
        example = next(x for x in task.test if x.id == e.id)
        tokens = example_tokens(organism, example, include_target=False)
        _, cache = organism.run_with_cache(tokens, names_filter="blocks.0.attn.hook_z")
        head_out = cache["blocks.0.attn.hook_z"][0, -1, 0] @ W_O  # what L0H0 writes at the answer position
        answer = organism.to_single_token(e.answer.strip())
        rival = organism.to_single_token(e.rival.strip())
        (view,) = e.heads
        assert view.head == "L0H0"
        assert view.effect_on_answer == pytest.approx(float(-head_out @ W_U[:, answer]), abs=1e-4)
        margin = -head_out @ (W_U[:, answer] - W_U[:, rival])
        assert view.effect_on_margin == pytest.approx(float(margin), abs=1e-4)
        assert view.effect_on_margin > 0  # removing the head helps the right answer over the wrong one
        weights = [w for _, w in view.attends_to]
        assert weights == sorted(weights, reverse=True) and 0 < sum(weights) <= 1 + 1e-6


def test_a_run_gives_its_heads_and_recorded_answers(organism, tmp_path):
    run = cl.search(organism, "organism_a", n_dist=40, n_test=60, k=1, pool_size=2, n_null=3, n_boot=100,
                    out=tmp_path / "run", progress=False)
    flips = flipped_examples(organism, run, n=2)
    assert flips.heads == run.result.heads and flips.n == 60
    assert flips.n_fixed - flips.n_broken == round(run.result.gain * 60)
    with pytest.raises(ValueError, match="give the heads"):
        flipped_examples(organism, cl.load_task("organism_a", n_dist=5, n_test=5))
    with torch.no_grad():  # another model does not reproduce the run's answers: refused, not misreported
        other = cl.load_model("organism")
        other.W_U.mul_(-1)
    assert flips.examples  # the organism's head fixes examples: the check below is not vacuous
    with pytest.raises(ValueError, match="does not reproduce the run's recorded answers"):
        flipped_examples(other, run, n=2)

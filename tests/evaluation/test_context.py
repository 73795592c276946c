"""Settings in the open: an evaluation does what its context says, whatever other threads do with
the same model at the same time (cel_lens.evaluation.context, cel_lens.model.hook_scope)."""

from __future__ import annotations

import threading

import pytest
import torch

import cel_lens as cl
from cel_lens.evaluation import EvalContext, evaluate
from cel_lens.evaluation.context import PRECISION_ENV, PREFIX_ENV
from cel_lens.heads import HeadSet
from cel_lens.model.ablation import fit_ablation, prompt_tokens
from cel_lens.organism.model import load_organism
from cel_lens.tasks import load_task


def _in_threads(*jobs):
    """Run each job in its own thread, started together; their results, or the first error raised."""
    barrier = threading.Barrier(len(jobs))
    out: list = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            out[i] = jobs[i]()
        except BaseException as err:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


@pytest.fixture(scope="module")
def organism():
    model = load_organism()
    task = load_task("organism_a", n_dist=48, n_test=48, seed=3)
    return model, task


def test_two_searches_in_two_threads_on_one_model_get_what_each_gets_alone(organism, tmp_path):
    """The live bug: a float32 zero-ablation search and a bf16 mean-ablation search on one model,
    at once, as a grid's parallel pairs run them: the second died in the mean fit, its capture
    hooks seeing the other thread's batch."""
    model, task = organism
    options = [dict(precision="float32", ablation="zero"), dict(precision="bf16", ablation="mean")]

    def job(i: int, where: str):
        return lambda: cl.search(model, task, k=2, pool_size=3, n_null=4, progress=False,
                                 out=tmp_path / f"{where}{i}", **options[i]).result

    def same(result) -> dict:  # the seal differs, rightly: each sees the D_test reads the others made
        return result.to_dict() | {"timings": None, "seal": None, "selected_before_test": None}

    alone = [job(i, "alone")() for i in range(2)]
    for _ in range(2):  # twice: the threads overlap differently each time
        together = _in_threads(*(job(i, f"together{_}-") for i in range(2)))
        for a, b in zip(alone, together):
            assert same(a) == same(b)
    assert alone[0].ablation == "zero" and alone[1].ablation == "mean"


def test_concurrent_evaluations_with_different_contexts_match_their_own(organism):
    """Evaluations in two threads, one zero and one mean ablation, many calls each: every call's bits
    and scores equal the same call made alone (hooks and settings never cross threads)."""
    model, task = organism
    tokens, mask = prompt_tokens(model, [ex.prompt for ex in task.dist][:16])
    mean = fit_ablation("mean", model, tokens, mask)
    sets = [HeadSet(), HeadSet.parse("L0H0"), HeadSet.parse("L0H1+L0H2"), HeadSet.parse("L0H3")]
    contexts = [EvalContext(precision="float32"), EvalContext(precision="float32", ablation=mean)]

    def call(ctx):
        return evaluate(model, task.dist, sets, context=ctx, progress=False, batch_size=4)

    alone = [call(c) for c in contexts]
    assert not torch.equal(alone[0].scores[1:], alone[1].scores[1:])  # the two kinds differ: not vacuous
    for _ in range(3):
        got = _in_threads(*(lambda c=c: [call(c) for _ in range(3)] for c in contexts))
        for want, runs in zip(alone, got):
            for r in runs:
                assert torch.equal(r.correct, want.correct) and torch.equal(r.scores, want.scores)


def test_the_environment_is_read_at_the_edge_only(monkeypatch):
    """``from_environment`` reads the variables; a context built explicitly ignores them."""
    monkeypatch.setenv(PRECISION_ENV, "bfloat16")
    monkeypatch.setenv(PREFIX_ENV, "1")
    ctx = EvalContext.from_environment()
    assert ctx.precision == "bf16" and ctx.share_prefix
    assert EvalContext.from_environment("float32", share_prefix=False) == EvalContext(precision="float32", share_prefix=False)
    assert EvalContext().precision == "auto" and EvalContext().share_prefix  # on by default: decision-exact
    monkeypatch.setenv(PREFIX_ENV, "0")
    assert not EvalContext.from_environment().share_prefix
    monkeypatch.delenv(PREFIX_ENV)
    assert EvalContext.from_environment().share_prefix
    with pytest.raises(ValueError, match="unknown precision"):
        EvalContext.from_environment("fp8")


def test_a_search_leaves_no_setting_on_the_model(organism, tmp_path):
    """After a bf16, mean-ablation search, a plain evaluate of the same model runs as if none ran."""
    model, task = organism
    before = evaluate(model, task.dist, ["L0H1"], context=EvalContext(precision="float32"), progress=False)
    cl.search(model, task, k=1, pool_size=2, n_null=2, precision="bf16", ablation="mean",
              progress=False, out=tmp_path / "run")
    after = evaluate(model, task.dist, ["L0H1"], context=EvalContext(precision="float32"), progress=False)
    assert after.precision == "float32" and torch.equal(after.scores, before.scores)
    assert not any(k.startswith("_cel_lens_ablation") for k in vars(model))

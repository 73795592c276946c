"""The one-token choice bound (cel_lens.evaluation.precision.CHOICE_PAIR_BOUND) and its check on a
run's own recomputes (pair_check): the rule on hand-made margins, and an evaluation whose bf16 pass
is made to err beyond the bound still returning float32's bits."""

from __future__ import annotations

import contextlib
import random
from typing import Optional

import pytest
import torch

import cel_lens.evaluation.teacher_forced as tf
from cel_lens.evaluation import evaluate
from cel_lens.evaluation.precision import (
    CHOICE_PAIR_BOUND,
    LOGIT_BOUND,
    LOGPROB_BOUND,
    PAIR_CHECK_MIN,
    PAIR_CHECK_SHARE,
    Margins,
    merge_pair_checks,
    pair_check,
    recompute_mask,
    recompute_summary,
)
from cel_lens.evaluation.context import EvalContext, RecomputeTally
from cel_lens.evaluation.precision_tight import TIGHT_CHECK_MIN, TIGHT_LOGIT_BOUND, tight_check, tight_first
from cel_lens.tasks.base import Example, Split

INF = float("inf")


def _yes_no(gaps: list[float], n_var: int = 1) -> Margins:
    """Margins of one-token ` no`/` yes` choices whose ` no` minus ` yes` log-likelihood is ``gaps``."""
    ll = torch.tensor([[-1.0 - g, -1.0] for g in gaps]).expand(n_var, -1, -1).clone()
    return Margins(choice_ll=ll, choice_tokens=torch.ones(len(gaps), 2), choice_chars=torch.tensor([[3.0, 4.0]] * len(gaps)))


def test_one_token_choices_use_the_pair_bound_for_acc():
    gaps = [0.1, -0.3, CHOICE_PAIR_BOUND, 0.6, -1.5, 2.5]
    acc = recompute_mask("multiple_choice", _yes_no(gaps), metric="acc")
    assert acc.tolist() == [[True, True, True, False, False, False]]
    wide = recompute_mask("multiple_choice", _yes_no(gaps), pair_bound=LOGPROB_BOUND, metric="acc")
    assert wide.tolist() == [[True, True, True, True, True, False]]
    both = recompute_mask("multiple_choice", _yes_no(gaps))  # acc_norm is guarded too: per character
    assert bool((both | ~acc).all()) and int(both.sum()) > int(acc.sum())
    norm = recompute_mask("multiple_choice", _yes_no(gaps), metric="acc_norm")
    assert torch.equal(both, acc | norm)


def _check(change: float, n: int) -> tuple[torch.Tensor, torch.Tensor, Margins]:
    """``n`` recomputed decisions whose float32 choice difference moved by ``change``, beside
    ``n`` decisions (gaps 0.6-1.9) the tight bound leaves alone."""
    near = [0.05 * (i % 8) for i in range(n)]
    far = [0.6 + 1.3 * i / max(n - 1, 1) for i in range(n)]
    margins = _yes_no(near + far)
    redo = recompute_mask("multiple_choice", margins, metric="acc")
    assert redo[0, :n].all() and not redo[0, n:].any()
    f32 = margins.choice_ll.clone()
    f32[0, :n, 0] += change
    return redo, f32, margins


class _Split:
    name = "dist"


def test_the_check_confirms_a_bound_its_recomputes_respect():
    model = RecomputeTally()  # one search's evidence
    redo, f32, margins = _check(PAIR_CHECK_SHARE * CHOICE_PAIR_BOUND * 0.9, PAIR_CHECK_MIN)
    assert not pair_check(model, _Split(), margins, f32, redo, "acc").any()
    summary = recompute_summary(model)  # only the check was tallied here, not the decisions
    assert summary == {} or summary["dist"]["pair_check"]["widened"] == 0


@pytest.mark.parametrize("change, n", [(PAIR_CHECK_SHARE * CHOICE_PAIR_BOUND * 1.1, PAIR_CHECK_MIN), (0.0, PAIR_CHECK_MIN - 1)])
def test_a_bound_not_confirmed_widens_to_the_logprob_rule(change, n):
    """A change above the check's share of the bound, or too few recomputes to tell: everything the
    wider rule marks is recomputed too (none of it twice)."""
    model = RecomputeTally()  # one search's evidence
    redo, f32, margins = _check(change, n)
    wider = pair_check(model, _Split(), margins, f32, redo, "acc")
    expected = recompute_mask("multiple_choice", margins, pair_bound=LOGPROB_BOUND, metric="acc") & ~redo
    assert torch.equal(wider, expected) and bool(wider.any()) and not (wider & redo).any()
    assert not pair_check(model, _Split(), margins, f32, redo, "acc_norm").any()  # the pair bound was not used


def test_evidence_adds_up_over_one_splits_evaluations():
    """Two evaluations of one split, each with fewer recomputes than the check needs: the first
    widens, the second is confirmed by both together; another split starts from none."""
    model = RecomputeTally()  # one search's evidence
    half = PAIR_CHECK_MIN // 2 + 1
    redo, f32, margins = _check(0.0, half)
    assert pair_check(model, _Split(), margins, f32, redo, "acc").any()
    assert not pair_check(model, _Split(), margins, f32, redo, "acc").any()

    class Other:
        name, task = "dist", "another task"

    assert pair_check(model, Other(), margins, f32, redo, "acc").any()
    model = RecomputeTally()  # a new search: its own evidence
    assert pair_check(model, _Split(), margins, f32, redo, "acc").any()


@contextlib.contextmanager
def _noisy_bf16(spread: float):
    """Within the block, bf16 passes (on the bfloat16 weight copy, after its float32 refinement of
    the top logits, or under autocast) add a fixed noise of up to ``spread`` to every logit: a bf16
    error far beyond the pair bound, that float32 passes do not see."""
    original, refine = tf.unembed, tf.refine_logits
    gen = torch.Generator().manual_seed(0)

    def noise(out):
        return out + (torch.rand(out.shape, generator=gen) - 0.5) * spread

    def noisy(m, vectors, **kw):
        out = original(m, vectors, **kw)
        return noise(out) if torch.is_autocast_cpu_enabled() else out

    def noisy_refine(m, vectors, logits, targets):
        logits, covered = refine(m, vectors, logits, targets)
        return noise(logits), covered

    tf.unembed, tf.refine_logits = noisy, noisy_refine
    try:
        yield
    finally:
        tf.unembed, tf.refine_logits = original, refine


def test_an_evaluation_whose_bf16_errs_beyond_the_bound_still_gets_float32s_bits(tiny_checkpoints, monkeypatch):
    """The tight bound alone keeps some wrong bf16 decisions (shown with the check switched off);
    the check on the run's own recomputes sees the error and recomputes them."""
    import cel_lens.evaluation.evaluator as evaluator

    from cel_lens.model import load_model

    model = load_model(str(tiny_checkpoints["llama"]))
    rng = random.Random(3)
    words = ["cat", "dog", "sun", "red", "two", "tree", "blue"]
    examples = tuple(Example(f"q/{i}", " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + "\nAnswer:",
                             choices=("A", "B"), label=i % 2) for i in range(40))  # one token each here
    split = Split("dist", examples, task="yn", answer_type="multiple_choice")
    sets = ["intact", "L0H1", "L1H2", "L0H0+L1H1"]
    context = EvalContext(precision="bf16")
    exact = evaluate(model, split, sets, progress=False, precision="float32")
    with _noisy_bf16(spread=0.9 * LOGPROB_BOUND):
        fast = evaluate(model, split, sets, progress=False, context=context)
    assert torch.equal(fast.correct, exact.correct)
    check = recompute_summary(context.tally)["dist"]["pair_check"]
    assert check["largest_change"] > PAIR_CHECK_SHARE * CHOICE_PAIR_BOUND and check["widened"] > 0
    monkeypatch.setattr(evaluator, "pair_check", lambda *a, **k: torch.zeros_like(a[4]))
    with _noisy_bf16(spread=0.9 * LOGPROB_BOUND):
        unchecked = evaluate(model, split, sets, progress=False, precision="bf16")
    assert not torch.equal(unchecked.correct, exact.correct)


def test_pair_check_records_merge_by_adding_counts_and_taking_the_largest_change():
    """How a search's tasks of one split name, and a Ray search's replicas, make one record."""
    a = {"observed": 70, "largest_change": 0.1, "widened": 0}
    b = {"observed": 5, "largest_change": 0.3, "widened": 40, "bound": CHOICE_PAIR_BOUND}
    assert merge_pair_checks([a, b]) == {"observed": 75, "largest_change": 0.3, "bound": CHOICE_PAIR_BOUND, "widened": 40}
    assert merge_pair_checks([]) == {"observed": 0, "largest_change": 0.0, "bound": CHOICE_PAIR_BOUND, "widened": 0}


@pytest.mark.parametrize("answer_type", ["multiple_choice", "exact_match"])
def test_float32_rechecks_resume_from_the_store_and_keep_float32s_bits(tiny_checkpoints, monkeypatch, answer_type):
    """With an activation store (a search's path) the float32 re-checks resume from it at each
    variant's layer (:meth:`ActivationStore.view`), and the bits are a float32 run's with the
    same store, with bf16 erring up to 0.9 x the bound that holds for the task's decisions (the
    pair bound's check widens choices to LOGPROB_BOUND), so that many decisions are re-checked."""
    from cel_lens.evaluation import ActivationStore
    from cel_lens.model import load_model

    model = load_model(str(tiny_checkpoints["llama"]))
    rng = random.Random(5)
    words = ["cat", "dog", "sun", "red", "two", "tree", "blue"]
    prompts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(30)]
    if answer_type == "multiple_choice":
        examples = tuple(Example(f"q/{i}", p + "\nAnswer:", choices=("A", "B"), label=i % 2) for i, p in enumerate(prompts))
    else:  # the model's own next token as the target: right answers, some by small margins
        examples = tuple(Example(f"q/{i}", p, target=_greedy_token(model, p) or " cat") for i, p in enumerate(prompts))
    split = Split("dist", examples, task="t", answer_type=answer_type)
    sets = ["intact", "L0H1", "L1H2", "L1H0+L1H1"]
    views = []
    original = ActivationStore.view
    monkeypatch.setattr(ActivationStore, "view", lambda self, ex: views.append(list(ex)) or original(self, ex))
    with ActivationStore.build(model, split, batch_size=8, progress=False) as store:
        exact = evaluate(model, split, sets, store=store, progress=False, precision="float32")
        with _noisy_bf16(spread=0.9 * (LOGPROB_BOUND if answer_type == "multiple_choice" else LOGIT_BOUND)):
            fast = evaluate(model, split, sets, store=store, progress=False, context=EvalContext(precision="bf16"))
    assert torch.equal(fast.correct, exact.correct)
    assert views and int(fast.recomputed.sum()) >= (10 if answer_type == "multiple_choice" else 1)
    assert sorted({e for v in views for e in v}) == sorted(set(fast.recomputed.nonzero()[:, 1].tolist()))


def _greedy_token(model, prompt: str) -> Optional[str]:
    """The text of ``model``'s greedy next token after ``prompt`` (float32), when it encodes back
    to that token after the prompt; else ``None``."""
    from cel_lens.evaluation import encode_pair

    ctx, _ = encode_pair(model, prompt, " x")
    with torch.no_grad():
        token = int(model(torch.tensor([ctx]))[0, -1].argmax())
    text = model.tokenizer.decode([token])
    try:
        return text if encode_pair(model, prompt, text)[1] == [token] else None
    except ValueError:
        return None


def test_the_tight_exact_match_bound_holds_only_where_the_recomputes_confirm_it():
    """:func:`tight_check`: enough small observed changes keep the tight bound; a large one, or too
    few observations, recompute everything within the full bound not yet recomputed."""
    gen = torch.Generator().manual_seed(0)
    bf16 = (torch.rand(4, 50, generator=gen) - 0.5) * 4  # margins in [-2, 2]
    redo = bf16.abs() <= TIGHT_LOGIT_BOUND
    f32 = torch.full_like(bf16, float("nan"))
    f32[:, :40] = bf16[:, :40] + 0.05  # 160 observed, each moved by 0.05
    widen, record = tight_check(bf16, f32, redo)
    assert not bool(widen.any()) and record["observed"] == 160 and abs(record["largest_change"] - 0.05) < 1e-6
    f32[2, 7] = bf16[2, 7] + PAIR_CHECK_SHARE * TIGHT_LOGIT_BOUND + 0.01  # one large change
    widen, record = tight_check(bf16, f32, redo)
    assert torch.equal(widen, (bf16.abs() <= LOGIT_BOUND) & ~redo) and bool(widen.any())
    few = torch.full_like(bf16, float("nan"))
    few[0, :10] = bf16[0, :10]  # 10 observations, no change
    widen, record = tight_check(bf16, few, redo)
    assert record["observed"] == 10 and torch.equal(widen, (bf16.abs() <= LOGIT_BOUND) & ~redo)


def test_refined_logits_are_float32s_at_the_target_and_the_top(tiny_checkpoints):
    from cel_lens.model import forward_resid, load_model, unembed
    from cel_lens.model.stack_bf16 import REFINE_TOP, refine_logits

    model = load_model(str(tiny_checkpoints["llama"]))
    tokens = torch.randint(3, 250, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        resid = forward_resid(model, tokens).reshape(-1, model.cfg.d_model)
        exact = unembed(model, resid).float()
        fast = unembed(model, resid, bf16=True).float()
        targets = torch.randint(0, exact.shape[-1], (resid.shape[0],), generator=torch.Generator().manual_seed(2))
        refined, covered = refine_logits(model, resid, fast, targets)
    assert not torch.allclose(fast, exact)
    idx = torch.cat([targets[:, None], fast.topk(REFINE_TOP, dim=-1).indices], 1)
    assert torch.allclose(refined.gather(1, idx), exact.gather(1, idx), atol=1e-5)
    others = torch.ones_like(refined, dtype=torch.bool).scatter(1, idx, False)
    assert torch.equal(refined[others], fast[others])
    assert covered.dtype == torch.bool and covered.shape == targets.shape


def test_the_first_recompute_takes_the_tight_band_then_the_closest_up_to_the_minimum():
    """:func:`tight_first`: everything within the tight bound; when that is fewer than the check
    needs, the closest decisions within the full bound, never one beyond it."""
    margin = torch.linspace(-3, 3, 601)[None, :]  # 0.01 apart
    first = tight_first(margin)
    within = margin.abs() <= TIGHT_LOGIT_BOUND
    assert int(within.sum()) >= TIGHT_CHECK_MIN and torch.equal(first, within)
    sparse = torch.tensor([[0.1, -0.3, 0.7, -0.9, 1.5, 5.0, float("inf")]])
    first = tight_first(sparse)
    assert first.tolist() == [[True, True, True, True, False, False, False]]
    few = torch.tensor([[0.1] + [0.6 + 0.001 * i for i in range(100)]])
    first = tight_first(few)
    assert int(first.sum()) == TIGHT_CHECK_MIN and bool(first[0, 0]) and bool(first[0, 1:TIGHT_CHECK_MIN].all())

"""bf16 compute with float32's decisions (cel_lens.evaluation.precision): the recompute rule on
hand-made margins, the option's resolution, and bits equal to float32's on tiny checkpoints (both
loaders) and on SmolLM2-135M-Instruct (slow)."""

from __future__ import annotations

import random

import pytest
import torch

from cel_lens.evaluation import encode_prompt, evaluate, format_prompt, greedy_generate
from cel_lens.evaluation.encode import precision_kind
from cel_lens.evaluation.precision import (
    LOGIT_BOUND,
    ONE_TOKEN_CHOICES,
    Margins,
    check_precision,
    float32_model,
    precision_line,
    recompute_groups,
    recompute_mask,
    recompute_summary,
    resolve_precision,
)
from cel_lens.evaluation.context import EvalContext, RecomputeTally
from cel_lens.tasks.base import Example, Split

SETS = ["intact", "L0H1", "L1H2+L2H0", "L2H3"]


def test_exact_match_and_generation_recompute_within_the_bound():
    token = torch.tensor([[5.0, 0.2, -0.3, -4.0, LOGIT_BOUND, float("inf")]])
    assert recompute_mask("exact_match", Margins(token=token)).tolist() == [[False, True, True, False, True, False]]
    gaps = torch.tensor([[0.0, 0.99, 1.01, 3.0]])
    assert recompute_mask("generation", Margins(token=gaps)).tolist() == [[True, True, False, False]]


def test_choice_recompute_uses_tokens_and_characters():
    inf = float("inf")
    # LOGPROB_BOUND = 2. Example 0: two one-token choices 0.8 apart (one logit difference, bound 2:
    # within); example 1: 1.5 apart (within); example 2: 3-token choices 5 apart (error 2*3 each:
    # within); example 3: 8.5 apart (outside; per character 2.8 against 2*2/3); a missing third
    # choice (-inf) never counts.
    ll = torch.tensor([[[-1.0, -1.8, -inf], [-1.0, -2.5, -inf], [-3.0, -8.0, -inf], [-0.5, -9.0, -inf]]])
    tokens = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [3.0, 3.0, 0.0], [1.0, 1.0, 0.0]])
    chars = torch.tensor([[3.0, 3.0, 1.0], [3.0, 3.0, 1.0], [9.0, 9.0, 1.0], [3.0, 3.0, 1.0]])
    redo = recompute_mask("multiple_choice", Margins(choice_ll=ll, choice_tokens=tokens, choice_chars=chars))
    assert redo.tolist() == [[True, True, True, False]]
    wide = Margins(choice_ll=ll * 10, choice_tokens=tokens, choice_chars=chars)
    assert recompute_mask("multiple_choice", wide).tolist() == [[False, False, False, False]]
    with pytest.raises(ValueError, match="unknown answer type 'ranking'; choose one of exact_match, multiple_choice, generation"):
        recompute_mask("ranking", Margins())


def test_recompute_groups_cover_every_marked_decision_within_the_slack():
    rng = torch.Generator().manual_seed(0)
    redo = torch.rand(30, 50, generator=rng) < 0.05
    redo[3] = False
    groups = recompute_groups(redo)
    covered = torch.zeros_like(redo)
    cost = 0
    for members, examples in groups:
        assert 3 not in members
        covered[torch.tensor(members)[:, None], torch.tensor(examples)[None, :]] = True
        cost += len(members) * len(examples)
    assert bool((covered | ~redo).all())  # every marked decision is recomputed
    assert cost <= 2 * int(redo.sum())
    assert recompute_groups(torch.zeros(4, 5, dtype=torch.bool)) == []


def test_precision_option_resolution(tiny_model, monkeypatch):
    assert check_precision(None) == "auto" and check_precision("bfloat16") == "bf16" and check_precision("fp32") == "float32"
    with pytest.raises(ValueError, match="precision"):
        check_precision("int8")
    monkeypatch.delenv("CEL_LENS_PRECISION", raising=False)
    from cel_lens.evaluation import precision as module

    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", tiny_model) == "float32"  # a toy model: bf16 would not pay
    monkeypatch.setattr(module, "AUTO_MIN_PARAMS", 1000)
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 2.0})  # the timed pass decides
    assert resolve_precision("auto", tiny_model, "exact_match") == "bf16"
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 1.1})
    assert resolve_precision("auto", tiny_model, "exact_match") == "float32"
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 2.0})
    assert resolve_precision("auto", tiny_model, "multiple_choice") == "float32"  # multi-token choices: not faster
    assert resolve_precision("auto", tiny_model, ONE_TOKEN_CHOICES) == "float32"  # BoolQ's yes/no: not faster in every measurement
    assert resolve_precision("bf16", tiny_model, ONE_TOKEN_CHOICES) == "bf16"
    assert resolve_precision("bf16", tiny_model, "generation") == "bf16"
    assert resolve_precision("float32", tiny_model) == "float32"
    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision(None, tiny_model) == "float32"
    monkeypatch.setenv("CEL_LENS_PRECISION", "bf16")  # read at the edge, by the context, not here
    assert resolve_precision("auto", tiny_model) == "float32"
    assert resolve_precision(EvalContext.from_environment("auto").precision, tiny_model) == "bf16"
    assert float32_model(tiny_model) is tiny_model


def test_precision_line_says_what_auto_chose_and_why(tiny_model, monkeypatch):
    """The search's first line names the precision ``auto`` took and its reason: bf16 on exact
    match, float32 on BoolQ's one-token choices (not faster on every CPU measured), and nothing about auto
    when the option was explicit."""
    from cel_lens.evaluation import precision as module

    monkeypatch.delenv("CEL_LENS_PRECISION", raising=False)
    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(module, "AUTO_MIN_PARAMS", 1000)
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 2.0})
    line = precision_line(tiny_model, "auto", "exact_match")
    assert line.startswith("precision: bf16 compute (auto: a timed pass ran bf16 2.00x faster than float32 here)")
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 0.8})
    assert "a timed pass ran bf16 only 0.80x float32's speed here" in precision_line(tiny_model, "auto", "exact_match")
    line = precision_line(tiny_model, "auto", ONE_TOKEN_CHOICES)
    assert line.startswith("precision: float32 (auto: bf16 was not always measured faster on one-token choice tasks")
    assert "--precision bf16 gives the same results" in line
    assert precision_line(tiny_model, "float32", "exact_match") == "precision: float32"
    monkeypatch.setattr(module, "AUTO_MIN_PARAMS", 10**12)
    assert "a model too small for bf16 to pay" in precision_line(tiny_model, None, "exact_match")


def test_the_probe_times_both_ways_once_per_model(tiny_model):
    """:func:`bf16_probe` measures a float32 pass and one on the weight copy, once, and the run
    record reads what it measured (none before it ran)."""
    from cel_lens.evaluation.precision_probe import bf16_probe, probe_record
    from cel_lens.testing import tiny_hooked_transformer

    fresh = tiny_hooked_transformer()
    assert probe_record(fresh) is None
    first = bf16_probe(fresh)
    assert first["float32_s"] > 0 and first["bf16_s"] > 0
    assert first["speedup"] == round(first["float32_s"] / first["bf16_s"], 2)
    assert bf16_probe(fresh) == first == probe_record(fresh)


def _splits(model) -> dict[str, Split]:
    rng = random.Random(5)
    words = ["cat", "dog", "sun", "red", "two", "one", "yes", "no", "tree", "blue"]
    text = lambda n: " ".join(rng.choice(words) for _ in range(n))  # noqa: E731
    em = [Example(f"em/{i}", f"Q: {text(rng.randint(2, 9))}\nA:", target=" " + text(rng.randint(1, 2))) for i in range(16)]
    for i in range(0, 16, 2):  # half the targets are the model's own greedy continuation: some are right
        ids = encode_prompt(model, format_prompt(model, em[i].prompt, False))
        em[i] = Example(em[i].id, em[i].prompt, target=model.tokenizer.decode(greedy_generate(model, [ids], max_new_tokens=2)[0]))
    mc = tuple(Example(f"mc/{i}", text(rng.randint(3, 12)) + "\nAnswer:", choices=(" no", " yes"), label=i % 2)
               for i in range(16))
    counts = [2 + i % 3 for i in range(10)]  # 2 to 4 choices: a recomputed subset may have fewer than the split
    hs = tuple(Example(f"hs/{i}", text(rng.randint(3, 9)), choices=tuple(" " + text(rng.randint(1, 4)) for _ in range(c)),
                       label=i % c) for i, c in enumerate(counts))
    gen = tuple(Example(f"g/{i}", text(rng.randint(2, 8)), meta={"stop": ["\n"]}) for i in range(8))
    return {
        "exact_match": Split("dist", tuple(em), task="em", answer_type="exact_match"),
        "multiple_choice": Split("dist", mc, task="mc", answer_type="multiple_choice"),
        "acc_norm": Split("dist", hs, task="hs", answer_type="multiple_choice", metric="acc_norm"),
        "generation": Split("dist", gen, task="gen", answer_type="generation", metric="pass@1",
                            judge=lambda ex, c: len(c) % 2 == 0, options={"max_new_tokens": 6}),
    }


def test_auto_leaves_bf16_when_its_re_checks_eat_the_gain(tiny_model, monkeypatch):
    """A pass 2x faster in bf16 does not pay when nearly every decision is re-checked: once an
    ``auto`` evaluation has shown that (a random-weight model's flat logits: 97 % re-checked on
    Arithmetic, bf16 1.6x slower), ``auto`` computes that model and split kind in float32; a low
    share keeps bf16, and the evaluator reports what it re-checked."""
    import copy

    from cel_lens.evaluation import precision as module
    from cel_lens.evaluation import precision_probe as probe
    from cel_lens.evaluation.evaluator import evaluate
    from cel_lens.tasks.base import Example, Split

    model = copy.deepcopy(tiny_model)  # its own entries in the probe's tables
    monkeypatch.setattr(module, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(module, "AUTO_MIN_PARAMS", 1000)
    monkeypatch.setattr(module, "bf16_probe", lambda m: {"speedup": 2.0})
    assert resolve_precision("auto", model, "exact_match") == "bf16"
    probe.note_rechecks(model, "exact_match", 10, 40)  # below MIN_DECISIONS: the pass alone decides
    assert resolve_precision("auto", model, "exact_match") == "bf16"
    probe.note_rechecks(model, "exact_match", 50, 60)  # 60 of 100 re-checked: 1 / (0.5 + 0.6) < 1.3
    assert probe.projected_speedup(model, "exact_match", 2.0) == pytest.approx(1 / 1.1)
    assert resolve_precision("auto", model, "exact_match") == "float32"
    assert "with the re-checks its evaluations needed so far" in precision_line(model, "auto", "exact_match")
    other = copy.deepcopy(tiny_model)
    probe.note_rechecks(other, "exact_match", 5, 100)  # 5 %: 1 / (0.5 + 0.05) = 1.8
    assert resolve_precision("auto", other, "exact_match") == "bf16"
    third = copy.deepcopy(tiny_model)
    split = Split("s", tuple(Example(f"q{i}", f"Question: {i} plus 1?\nAnswer:", target=f" {i + 1}") for i in range(8)),
                  answer_type="exact_match")
    got = evaluate(third, split, [[], [(0, 0)]], progress=False, context=EvalContext(precision="auto"))
    assert got.precision == "bf16"
    assert probe._SHARES[third]["exact_match"] == [int(got.recomputed.sum()), 16]
    explicit = copy.deepcopy(tiny_model)
    evaluate(explicit, split, [[]], progress=False, context=EvalContext(precision="bf16"))
    assert explicit not in probe._SHARES  # an explicit bf16 is the user's choice, not auto's to revise


@pytest.mark.parametrize("loader", ["hooked", "bridge"])
def test_bf16_bits_equal_float32_on_tiny_checkpoints(tiny_checkpoints, loader):
    """Every protocol, intact and with heads ablated: bf16's bits (and completions) are float32's,
    and what was not recomputed was decided outside the bound."""
    from cel_lens.model import load_model

    model = load_model(str(tiny_checkpoints["llama"]), loader=loader)
    context = EvalContext()  # one tally for every evaluation below
    for name, split in _splits(model).items():
        exact = evaluate(model, split, SETS, batch_size=4, progress=False, context=context, precision="float32")
        fast = evaluate(model, split, SETS, batch_size=4, progress=False, context=context, precision="bf16")
        assert exact.precision == "float32" and exact.recomputed is None
        assert fast.precision == "bf16" and fast.recomputed is not None and fast.recomputed.shape == exact.correct.shape
        assert torch.equal(fast.correct, exact.correct), name
        for key in ("acc", "acc_norm"):
            if key in exact.extra:
                assert torch.equal(fast.extra[key], exact.extra[key]), (name, key)
        if name == "generation":
            assert fast.completions == exact.completions
        elif name != "exact_match":
            torch.testing.assert_close(fast.extra["choice_ll"], exact.extra["choice_ll"], atol=LOGIT_BOUND, rtol=0,
                                       equal_nan=True)
        else:  # recomputed decisions carry float32's scores; the others are within the bound
            redo = fast.recomputed
            torch.testing.assert_close(fast.scores[redo], exact.scores[redo], atol=1e-4, rtol=0)
    summary = recompute_summary(context.tally)
    # both precisions' decisions are counted, only bf16's recomputed ones as recomputed
    assert summary["dist"]["decisions"] == 2 * sum(len(s) * len(SETS) for s in _splits(model).values())
    assert 0 <= summary["dist"]["share"] <= 1


@pytest.mark.slow
def test_bf16_bits_equal_float32_on_smollm2(smollm2_bridge):
    """SmolLM2-135M-Instruct, intact and with a head ablated, on real-shaped prompts of two protocols:
    identical bits (how many were recomputed is measured by ``benchmarks/precision.py``)."""
    model = smollm2_bridge
    rng = random.Random(0)
    em = tuple(Example(f"a/{i}", f"Question: What is {a} plus {b}?\nAnswer:", target=f" {a + b}")
               for i, (a, b) in enumerate((rng.randint(1, 99), rng.randint(1, 99)) for _ in range(12)))
    mc = tuple(Example(f"b/{i}", f"Is {rng.randint(1, 99)} larger than {rng.randint(1, 99)}?\nAnswer:",
                       choices=(" no", " yes"), label=i % 2) for i in range(8))
    sets = ["intact", "L3H1"]
    for split in (Split("dist", em, task="em", answer_type="exact_match"), Split("dist", mc, task="mc", answer_type="multiple_choice")):
        exact = evaluate(model, split, sets, batch_size=8, progress=False, precision="float32")
        fast = evaluate(model, split, sets, batch_size=8, progress=False, precision="bf16")
        assert fast.recomputed is not None and fast.precision == "bf16"
        assert torch.equal(fast.correct, exact.correct)


def test_search_records_the_precision_and_keeps_the_bits(tiny_model, tmp_path, capsys):
    """``precision`` is a checked SearchConfig option, part of the run's identity when set, said in
    one line at the start of a search and recorded with the share recomputed; bf16 and float32
    searches record the same per-example bits."""
    import json

    import cel_lens as cl
    from cel_lens.config import OptionError, SearchConfig
    from cel_lens.runs.manifest import default_run_dir
    from cel_lens.testing import planted_task

    with pytest.raises(OptionError, match="precision"):
        SearchConfig(precision="half").validate()
    assert "precision" not in SearchConfig().manifest_options()
    base = {"model": {"id": "m"}, "task": {"name": "t"}, "splits": {}}
    names = {p: default_run_dir({**base, "options": SearchConfig(precision=p).manifest_options()}).name
             for p in ("auto", "float32", "bf16")}
    assert len(set(names.values())) == 3
    task = planted_task(tiny_model, n=12, heads="L1H2")
    runs = {}
    for precision in ("float32", "bf16"):
        out = tmp_path / precision
        runs[precision] = cl.search(tiny_model, task, k=1, pool_size=2, n_null=3, n_boot=50, n_adjusted=0, out=out,
                                    precision=precision, progress=True)
        line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("precision:")]
        assert len(line) == 1 and precision in line[0]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["options"]["precision"] == precision
        record = manifest["precision"]
        assert record["compute"] == precision and "dist" in record["recomputed"]
        assert (record["recomputed"]["dist"]["recomputed"] == 0) == (precision == "float32")

    def bits(path):
        lines = [json.loads(x) for x in (path / "evaluations.jsonl").read_text().splitlines()]
        return sorted((x["split"], x["heads"], str(x.get("correct"))) for x in lines if x.get("type") == "eval")

    assert bits(tmp_path / "float32") == bits(tmp_path / "bf16")
    assert runs["float32"].result.heads == runs["bf16"].result.heads
    # a search leaves nothing on the model: a later evaluate is not run in the search's precision
    assert cl.evaluate(tiny_model, task.dist, ["L1H2"], progress=False).precision in (None, "float32")


def test_two_tallies_in_two_threads_keep_their_own():
    """A grid runs pairs at once in threads on one model: each search's context has its own tally,
    so one's start never resets the other's, and each records only its own decisions."""
    import threading

    first, second = RecomputeTally(), RecomputeTally()
    first_started, second_done = threading.Event(), threading.Event()

    def one() -> None:
        first.add("dist", torch.tensor([[True, False, False]]))
        first_started.set()
        second_done.wait(30)
        first.add("dist", torch.tensor([[False, False]]))

    def two() -> None:
        first_started.wait(30)
        second.add("dist", torch.tensor([[True, True]]))
        second_done.set()

    threads = [threading.Thread(target=one), threading.Thread(target=two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert recompute_summary(first) == {"dist": {"decisions": 5, "recomputed": 1, "share": 0.2}}
    assert recompute_summary(second) == {"dist": {"decisions": 2, "recomputed": 2, "share": 1.0}}


def test_precision_kind_tells_one_token_choices_from_longer_ones(tiny_checkpoints):
    """``auto`` decides by it: one-token choices (here ``A``/``B`` in the tiny tokenizer) are
    :data:`ONE_TOKEN_CHOICES`; a choice of two tokens anywhere in the probed examples makes the split
    plain multiple choice; other answer types are themselves."""
    from cel_lens.model import load_model

    model = load_model(str(tiny_checkpoints["llama"]))
    one = tuple(Example(f"q/{i}", f"cat dog {i}\nAnswer:", choices=("A", "B"), label=0) for i in range(4))
    assert precision_kind(model, Split("dist", one, task="t", answer_type="multiple_choice")) == ONE_TOKEN_CHOICES
    longer = one[:3] + (Example("q/x", "cat\nAnswer:", choices=("A", " yes"), label=0),)
    assert len(model.tokenizer.encode(" yes", add_special_tokens=False)) > 1
    assert precision_kind(model, Split("dist", longer, task="t", answer_type="multiple_choice")) == "multiple_choice"
    em = (Example("e/0", "Q: 1+1\nA:", target=" 2"),)
    assert precision_kind(model, Split("dist", em, task="t", answer_type="exact_match")) == "exact_match"


def test_a_bfloat16_model_says_whose_decisions_and_its_copy_prints_nothing(tiny_checkpoints, capsys):
    """A model loaded in bfloat16: the line names the rounded weights' decisions; the float32 copy
    its re-checks run on is made without a word on stdout (TransformerLens prints one)."""
    from cel_lens.model import load_model

    model = load_model(str(tiny_checkpoints["llama"]), loader="hooked", dtype="bfloat16")
    capsys.readouterr()
    copy32 = float32_model(model)
    assert next(copy32.parameters()).dtype == torch.float32 and float32_model(model) is copy32
    assert capsys.readouterr().out == ""
    line = precision_line(model, "bf16", "exact_match")
    assert "a float32 copy of the model's bfloat16 weights" in line and "not those of a float32 checkpoint" in line

"""Answer types as registry entries: each name resolves to its entry, unknown names fail naming the
entries, and the evaluation follows an entry's flags, not its name (a renamed copy of an entry is
scored exactly as the original)."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest
import torch

from cel_lens.evaluation import evaluate
from cel_lens.evaluation.encode import encode_split, split_answer_entry, split_answer_type
from cel_lens.evaluation.precision import AUTO_KINDS, Margins, recompute_mask
from cel_lens.registry import UnknownEntry
from cel_lens.tasks.answer_types import (
    ANSWER_TYPES, EXACT_MATCH, GENERATION, MULTIPLE_CHOICE, answer_type_entry, known_answer_type,
)
from cel_lens.tasks.base import AnswerType, Example, Split, Task

UNKNOWN = "unknown answer type 'ranking'; choose one of exact_match, multiple_choice, generation"


def test_every_answer_type_is_an_entry_named_as_records_store_it():
    assert list(ANSWER_TYPES) == list(get_args(AnswerType))
    for name in ANSWER_TYPES:
        assert answer_type_entry(name).name == name
    assert answer_type_entry("exact_match") is EXACT_MATCH
    flags = [(e.generates, e.scores_choices, e.argmax_target) for e in map(answer_type_entry, ANSWER_TYPES)]
    assert all(sum(f) == 1 for f in flags)  # each built-in entry decides one way
    assert AUTO_KINDS == ("exact_match",)


def test_an_unknown_answer_type_fails_naming_the_entries():
    with pytest.raises(UnknownEntry, match=UNKNOWN):
        answer_type_entry("ranking")
    with pytest.raises(ValueError, match=UNKNOWN):
        split_answer_type(Split("dist", (Example("t/0", "Q?", target=" a"),), answer_type="ranking"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=UNKNOWN):
        Task("toy", "ranking", Split("dist", ()), Split("test", ()))  # type: ignore[arg-type]
    assert known_answer_type("ranking") is None and known_answer_type(None) is None
    assert known_answer_type("generation") is GENERATION


def test_an_unset_answer_type_is_read_from_the_examples():
    choices = Split("dist", (Example("t/0", "Q?", choices=(" a", " b"), label=0),))
    target = Split("dist", (Example("t/1", "Q?", target=" a"),))
    assert split_answer_entry(choices) is MULTIPLE_CHOICE and split_answer_entry(target) is EXACT_MATCH


def test_metrics_and_calibration_notes_come_from_the_entry():
    assert MULTIPLE_CHOICE.check_metric("acc_norm") == "acc_norm"
    with pytest.raises(ValueError, match="multiple-choice metric must be 'acc' or 'acc_norm', got 'f1'"):
        MULTIPLE_CHOICE.check_metric("f1")
    assert EXACT_MATCH.check_metric("f1") == "f1"
    assert MULTIPLE_CHOICE.calibrates and not EXACT_MATCH.calibrates and not GENERATION.calibrates
    assert EXACT_MATCH.calibration_note(True).startswith("not calibrated: the answers form a closed set")
    assert EXACT_MATCH.calibration_note(False).startswith("does not apply: answers are free-form")
    assert GENERATION.calibration_note(True) == GENERATION.calibration_note(False)


def test_generation_has_no_teacher_forced_encoding(tiny_model):
    split = Split("dist", (Example("t/0", "Q?", target="x"),), answer_type="generation")
    assert not GENERATION.uses_store
    with pytest.raises(ValueError, match="no teacher-forced encoding"):
        encode_split(tiny_model, split, 4)


def test_a_renamed_copy_of_an_entry_is_scored_as_the_original(tiny_model, monkeypatch):
    """Nothing compares the name: register ``ranking`` as multiple choice under another name, and
    the evaluation (float32 and bf16 with its recomputes) and the recompute rule follow."""
    import cel_lens.tasks.answer_types as answer_types

    monkeypatch.setattr(answer_types, "RANKING", replace(MULTIPLE_CHOICE, name="ranking"), raising=False)
    monkeypatch.setitem(ANSWER_TYPES, "ranking", "cel_lens.tasks.answer_types:RANKING")
    examples = tuple(Example(f"t/{i}", f"Question {i}: pick one.\nAnswer:", choices=(" yes", " no", " maybe"),
                             label=i % 3) for i in range(6))
    results = {}
    for name in ("multiple_choice", "ranking"):
        split = Split("dist", examples, task="toy", answer_type=name, metric="acc_norm")  # type: ignore[arg-type]
        for precision in ("float32", "bf16"):
            results[name, precision] = evaluate(tiny_model, split, [None, "L0H0+L1H2"], progress=False,
                                                precision=precision)
    for precision in ("float32", "bf16"):
        a, b = results["multiple_choice", precision], results["ranking", precision]
        assert b.answer_type == "ranking"
        assert torch.equal(a.correct, b.correct) and torch.equal(a.scores, b.scores)
        assert torch.equal(a.extra["choice_ll"].nan_to_num(), b.extra["choice_ll"].nan_to_num())
    ll = torch.tensor([[[-1.0, -1.2, -5.0]]])
    margins = Margins(choice_ll=ll, choice_tokens=torch.ones(1, 3), choice_chars=torch.full((1, 3), 3.0))
    assert torch.equal(recompute_mask("ranking", margins), recompute_mask("multiple_choice", margins))

"""Near-paraphrase deduplication by token Jaccard similarity."""

from __future__ import annotations

import pytest

from cel_lens.tasks.base import Example
from cel_lens.tasks.paraphrase import drop_near_paraphrases, jaccard, paraphrase_record, tokens


def _ex(i: str, text: str) -> Example:
    return Example(i, f"prompt {i}", meta={"text": text})


def test_one_word_apart_is_dropped_and_recorded():
    ref = [_ex("t/1", "Write a function to find the maximum of two numbers in a given list of tuples.")]
    pool = [_ex("d/1", "Write a function to find the maximum of two numbers in a given list of pairs tuples."),
            _ex("d/2", "Write a python function to reverse a string.")]
    kept, dropped = drop_near_paraphrases(pool, ref, 0.9)
    assert [e.id for e in kept] == ["d/2"]
    assert dropped[0][:2] == ("d/1", "t/1") and dropped[0][2] == pytest.approx(14 / 15, abs=1e-4)
    record = paraphrase_record(dropped, 0.9)
    assert record["removed"] == 1 and "0.9" in record["key"]


def test_jaccard_by_hand():
    assert jaccard(tokens("A b c"), tokens("a B d")) == pytest.approx(2 / 4)
    assert jaccard(frozenset(), frozenset()) == 1.0
    with pytest.raises(ValueError):
        drop_near_paraphrases([], [], 0.0)

"""What an answer prior can act on, per task kind."""

import torch

from cel_lens.evaluation.answers import MAX_CLOSED_ANSWERS, answer_key
from cel_lens.tasks.base import Example, Split


def test_multiple_choice_labels_and_shared_choice_names():
    split = Split("test", tuple(Example(f"b/{i}", "p", choices=(" no", " yes"), label=i % 3 == 0) for i in range(6)))
    key = answer_key(split)
    assert key.answer_type == "multiple_choice" and key.names == (" no", " yes")
    assert key.labels.tolist() == [1, 0, 0, 1, 0, 0]


def test_choices_that_differ_per_example_are_named_by_position():
    split = Split("test", (Example("h/0", "p", choices=("a", "b", "c"), label=2), Example("h/1", "p", choices=("d", "e"), label=0)))
    key = answer_key(split)
    assert key.names == ("choice 0", "choice 1", "choice 2") and key.labels.tolist() == [2, 0]


def test_exact_match_has_a_closed_answer_set_only_when_targets_recur():
    closed = Split("test", tuple(Example(f"o/{i}", "p", target=[" pos", " neg"][i % 2]) for i in range(5)))
    key = answer_key(closed)
    assert key.answer_type == "exact_match" and key.names == (" neg", " pos") and key.labels.tolist() == [1, 0, 1, 0, 1]
    free = Split("test", tuple(Example(f"a/{i}", "p", target=f" {i}") for i in range(MAX_CLOSED_ANSWERS + 5)))
    assert answer_key(free).labels is None
    generation = Split("test", (Example("m/0", "p", target="x"),), answer_type="generation")
    assert answer_key(generation).answer_type == "generation" and answer_key(generation).labels is None
    assert isinstance(key.labels, torch.Tensor)

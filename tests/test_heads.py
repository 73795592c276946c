"""Heads and head sets: parsing, canonical text, validation, masks."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from cel_lens.heads import Head, HeadSet, head_sets_from_masks, masks_from_head_sets


@pytest.mark.parametrize("text", ["L12H3", "l12h3", " L 12 H 3 ", "12.3", "12:3"])
def test_head_parse_text(text):
    assert Head.parse(text) == Head(12, 3)


@pytest.mark.parametrize("obj", [(12, 3), [12, 3], (np.int64(12), np.int64(3)), (torch.tensor(12), torch.tensor(3))])
def test_head_parse_pairs(obj):
    head = Head.parse(obj)
    assert head == Head(12, 3) and type(head.layer) is int and str(head) == "L12H3"


@pytest.mark.parametrize("bad", ["L12", "H3", "L-1H2", "12.3.4", "abc", "", (1,), (1, 2, 3), 7, (1.0, 2), ("1", "2")])
def test_head_parse_errors(bad):
    with pytest.raises(ValueError, match="cannot parse head"):
        Head.parse(bad)


def test_head_constructor_checks():
    with pytest.raises(ValueError, match="must be >= 0"):
        Head(-1, 0)
    with pytest.raises(TypeError, match="must be an int"):
        Head(True, 0)
    with pytest.raises(TypeError, match="must be an int"):
        Head(0, 1.5)
    assert Head(1, 2) < Head(1, 3) < Head(2, 0)


@pytest.mark.parametrize(
    "obj",
    [
        "L12H7+L3H1",
        "L3H1, L12H7",
        "3.1,12.7",
        "12.7 + 3.1",
        "L3H1;L12H7;L3H1",
        [(12, 7), "L3H1"],
        [Head(3, 1), Head(12, 7), Head(3, 1)],
        ("L12H7", "L3H1"),
    ],
)
def test_head_set_parse_canonical(obj):
    s = HeadSet.parse(obj)
    assert str(s) == "L3H1+L12H7"  # sorted by layer then head, numerically; duplicates collapse
    assert len(s) == 2 and s.heads == (Head(3, 1), Head(12, 7))
    assert HeadSet.parse(str(s)) == s and repr(s) == "HeadSet('L3H1+L12H7')"


@pytest.mark.parametrize("empty", [None, "", "intact", "INTACT", "none", "{}", [], ()])
def test_empty_head_set(empty):
    s = HeadSet.parse(empty)
    assert len(s) == 0 and not s and str(s) == "intact" and s.first_layer is None and s.layers == ()


def test_head_set_single_head_forms():
    assert HeadSet.parse((2, 1)) == HeadSet.parse(Head(2, 1)) == HeadSet.parse("L2H1")


def test_head_set_parse_errors():
    with pytest.raises(ValueError, match="cannot parse head"):
        HeadSet.parse("L1H2+banana")
    with pytest.raises(ValueError, match="cannot parse head"):
        HeadSet.parse([1, 2, 3])


def test_head_set_is_immutable_hashable_and_picklable():
    s = HeadSet.parse("L1H2+L0H3")
    with pytest.raises(AttributeError, match="immutable"):
        s._heads = ()
    assert hash(s) == hash(HeadSet.parse("L0H3+L1H2")) and len({s, HeadSet.parse("0.3,1.2")}) == 1
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert clone == s and str(clone) == "L0H3+L1H2"


def test_head_set_views():
    s = HeadSet.parse("L5H0+L2H3+L2H1")
    assert s.layers == (2, 5) and s.first_layer == 2
    assert "L2H3" in s and (5, 0) in s and Head(5, 1) not in s and "garbage" not in s
    assert list(s) == [Head(2, 1), Head(2, 3), Head(5, 0)]
    assert str(s.union("L0H0+L5H0")) == "L0H0+L2H1+L2H3+L5H0"
    assert HeadSet.parse("L9H9") < HeadSet.parse("L0H0+L0H1")  # by size first
    assert (s == "L2H1+L2H3+L5H0") is False  # no implicit text comparison


def test_validate_names_the_valid_ranges():
    s = HeadSet.parse("L27H23")
    assert s.validate(28, 24) is s
    with pytest.raises(ValueError, match=r"L28H0 out of range for Llama: layers 0..27, heads 0..23"):
        HeadSet.parse("L28H0+L1H1").validate(28, 24, "Llama")
    with pytest.raises(ValueError, match=r"L1H24"):
        HeadSet.parse("L1H24").validate(28, 24)


def test_mask_round_trip():
    s = HeadSet.parse("L0H1+L2H3+L2H0")
    mask = s.to_mask(3, 4)
    expected = torch.zeros(3, 4, dtype=torch.bool)
    expected[0, 1] = expected[2, 3] = expected[2, 0] = True  # hand-built
    assert torch.equal(mask, expected)
    assert HeadSet.from_mask(mask) == s
    with pytest.raises(ValueError, match="out of range"):
        s.to_mask(2, 4)
    with pytest.raises(ValueError, match=r"\[layer, head\] mask"):
        HeadSet.from_mask(mask[None])


def test_masks_batch_round_trip():
    sets = [HeadSet(), HeadSet.parse("L1H1"), HeadSet.parse("L0H0+L2H3")]
    masks = masks_from_head_sets(sets, 3, 4)
    assert masks.shape == (3, 3, 4) and masks.dtype == torch.bool
    assert masks.sum().item() == 3 and bool(masks[2, 2, 3]) and not masks[0].any()
    assert head_sets_from_masks(masks) == sets
    assert masks_from_head_sets(["intact", "1.1"], 3, 4).shape == (2, 3, 4)
    assert masks_from_head_sets([], 3, 4).shape == (0, 3, 4)
    with pytest.raises(ValueError, match=r"\[variant, layer, head\]"):
        head_sets_from_masks(masks[0])


def test_layers_run_counts_from_the_first_ablated_layer():
    """A resumed pass runs the layers from the set's first ablated one up; the intact model all."""
    assert HeadSet.parse("L5H1+L2H0").layers_run(30) == 28
    assert HeadSet.parse("L29H8").layers_run(30) == 1
    assert HeadSet().layers_run(30) == 30

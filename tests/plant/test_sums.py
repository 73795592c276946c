"""plant/sums.py: the scaled-head ablation kind equals the edited weights, the edit touches one
head's output columns only, and a built plant (``cel-lens plant sums-capability``) is what its recipe says."""

from __future__ import annotations

import copy

import pytest
import torch

from cel_lens.heads import Head, HeadSet
from cel_lens.model.planted_cache import planted_folder, planted_from, planted_name, read_tensors, tensors_hash
from cel_lens.plant.sums import BASE, KINDS, ScaledHead, choice_margins, scaled_tensors
from cel_lens.tasks.base import Example, Split


def _split() -> Split:
    rows = [("Q: What is 12 plus 30?\nA:", 42, 22), ("Q: What is 51 plus 7?\nA:", 58, 78), ("Q: What is 9 plus 9?\nA:", 18, 38)]
    examples = tuple(Example(id=f"s/{i}", prompt=p, choices=(f" {min(r, w)}", f" {max(r, w)}"), label=int(r > w))
                     for i, (p, r, w) in enumerate(rows))
    return Split("plant-train", examples, task="arithmetic_choice", answer_type="multiple_choice", metric="acc")


def test_the_scaled_head_kind_is_the_model_with_that_heads_output_columns_scaled(tiny_model) -> None:
    """Independent of the hook: the same margins from a copy whose ``W_O`` rows of the head are multiplied."""
    split, head, factor = _split(), Head(2, 1), 7.0
    hooked = choice_margins(tiny_model, split, [HeadSet([head])], ScaledHead(factor))[0]
    edited = copy.deepcopy(tiny_model)
    with torch.no_grad():
        edited.blocks[head.layer].attn.W_O[head.head] *= factor
    direct = choice_margins(edited, split, [HeadSet()])[0]
    intact = choice_margins(tiny_model, split, [HeadSet()])[0]
    assert torch.allclose(hooked, direct, atol=1e-5)
    assert not torch.allclose(hooked, intact, atol=1e-3)  # the factor did something


def test_scaled_tensors_change_only_the_heads_columns_by_exactly_the_factor() -> None:
    g = torch.Generator().manual_seed(0)
    base = {"model.layers.1.self_attn.o_proj.weight": torch.randn(8, 12, generator=g),
            "model.layers.1.self_attn.q_proj.weight": torch.randn(12, 8, generator=g), "lm_head.weight": torch.randn(5, 8, generator=g)}
    out = scaled_tensors(base, Head(1, 2), 4, 20.0)
    o, b = out["model.layers.1.self_attn.o_proj.weight"], base["model.layers.1.self_attn.o_proj.weight"]
    assert torch.equal(o[:, 8:12], b[:, 8:12] * 20.0) and torch.equal(o[:, :8], b[:, :8])
    assert all(out[k] is base[k] for k in base if "o_proj" not in k)
    assert tensors_hash(out) == tensors_hash(scaled_tensors(base, Head(1, 2), 4, 20.0)) != tensors_hash(base)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_the_built_plant_differs_from_the_base_in_the_heads_columns_only(smollm2_dir, kind: str) -> None:
    folder = planted_folder(planted_name(BASE, kind))
    if folder is None:
        pytest.skip(f"{planted_name(BASE, kind)} is not built here (cel-lens plant {kind} --data-dir ../shared/data)")
    recipe, planted, base = planted_from(folder), read_tensors(folder), read_tensors(smollm2_dir)
    assert tensors_hash(planted) == folder.name == recipe["tensors_sha256"]
    head = Head.parse(recipe["head"])
    want = scaled_tensors(base, head, 64, recipe["factor"])
    assert sorted(planted) == sorted(base)
    for name in base:
        assert torch.equal(planted[name], want[name]), name
    o_name = f"model.layers.{head.layer}.self_attn.o_proj.weight"
    assert not torch.equal(planted[o_name], base[o_name])


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_rebuild_gives_the_same_hash(data_dir, tmp_path, kind: str) -> None:
    """The whole command again, sizing included, into an empty cache: the same weights."""
    from cel_lens.plant.sums import build_sums_plant

    folder = planted_folder(planted_name(BASE, kind))
    if folder is None:
        pytest.skip(f"{planted_name(BASE, kind)} is not built here (cel-lens plant {kind} --data-dir ../shared/data)")
    record = build_sums_plant(kind=kind, data_dir=str(data_dir), cache=str(tmp_path))
    assert record["tensors_sha256"] == folder.name


def test_an_unknown_kind_is_refused_before_anything_is_read() -> None:
    from cel_lens.plant.sums import build_sums_plant, fresh_truth

    with pytest.raises(ValueError, match="unknown sums plant 'sums9'"):
        build_sums_plant(kind="sums9", rows="/nonexistent/rows.json")
    with pytest.raises(ValueError, match="single-digit three-operation file only"):
        fresh_truth(10, 0, kind="sums-capability")

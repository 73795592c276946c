"""Planted variants in the cache: content-hash folders, names pointing at them, loading by name."""

from __future__ import annotations

import warnings

import pytest
import torch

from cel_lens.model import load_model, model_manifest
from cel_lens.model.planted_cache import (PLANT_MARKER, planted_from, planted_name, planted_source, read_tensors,
                                    split_planted_name, tensors_hash, write_planted)


def test_names_split_and_join():
    assert split_planted_name("smollm2-135m+plant:capability") == ("smollm2-135m", "capability")
    assert split_planted_name("smollm2-135m") is None
    assert planted_name("smollm2-135m", "prior") == "HuggingFaceTB/SmolLM2-135M-Instruct+plant:prior"
    with pytest.raises(ValueError, match="bad planted model name"):
        split_planted_name("smollm2-135m+plant:a/b")


def test_hash_covers_names_shapes_dtypes_and_bytes():
    a = {"x": torch.zeros(2, 3), "y": torch.ones(4)}
    assert tensors_hash(a) == tensors_hash(dict(reversed(list(a.items()))))
    for other in ({"x": torch.zeros(3, 2), "y": torch.ones(4)}, {"x": torch.zeros(2, 3, dtype=torch.float64), "y": torch.ones(4)},
                  {"z": torch.zeros(2, 3), "y": torch.ones(4)}, {"x": torch.zeros(2, 3), "y": torch.tensor([1.0, 1, 1, -0.0])}):
        assert tensors_hash(other) != tensors_hash(a)


def test_a_planted_build_loads_by_name(tiny_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("CEL_LENS_CACHE", str(tmp_path))
    base_dir = tiny_checkpoints["llama"]
    base = read_tensors(base_dir)
    name = planted_name(str(base_dir), "test")
    with pytest.raises(ValueError, match="is not built"):
        planted_source(name, name)
    edited = dict(base)
    o = "model.layers.2.self_attn.o_proj.weight"
    edited[o] = base[o].clone()
    edited[o][:, :16] = 0.0  # head 0 of the last layer silenced
    folder, digest = write_planted(base_dir, name, edited, {"kind": "test", "changed": ["L2H0"]})
    assert folder.name == digest == tensors_hash(edited) and planted_from(folder)["kind"] == "test"
    again, digest2 = write_planted(base_dir, name, dict(edited), {"kind": "test", "changed": ["L2H0"]})
    assert (again, digest2) == (folder, digest)
    assert tensors_hash(read_tensors(folder)) == digest
    model = load_model(name, device="cpu")
    manifest = model_manifest(model)
    assert manifest["id"] == name and manifest["plant"]["kind"] == "test" and manifest["plant"]["tensors_sha256"] == digest
    reference = load_model(str(base_dir), device="cpu")
    tokens = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert not torch.allclose(model(tokens), reference(tokens))
    assert (folder / PLANT_MARKER).is_file()


def test_re_pointing_a_name_at_other_weights_warns(tiny_checkpoints, tmp_path):
    """The seal's ledger matches a model on its name: reads made under a name before a rebuild with
    other weights count against the new weights' rows, and the rebuild says so."""
    base_dir = tiny_checkpoints["llama"]
    base = read_tensors(base_dir)
    name = planted_name(str(base_dir), "twice")
    o = "model.layers.2.self_attn.o_proj.weight"
    first, second = dict(base), dict(base)
    first[o], second[o] = base[o] * 2.0, base[o] * 3.0
    write_planted(base_dir, name, first, {"kind": "twice"}, cache=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_planted(base_dir, name, dict(first), {"kind": "twice"}, cache=str(tmp_path))  # the same weights: silent
    with pytest.warns(UserWarning, match="pointed at other weights"):
        write_planted(base_dir, name, second, {"kind": "twice"}, cache=str(tmp_path))


def test_two_names_on_one_builds_weights_each_report_their_own_recipe(tiny_checkpoints, tmp_path, monkeypatch):
    """Two kinds sized on different rows can land on the same weights (the sums and ops plants both
    chose x10): the folder is shared, and a model loaded by each name records that name's recipe."""
    monkeypatch.setenv("CEL_LENS_CACHE", str(tmp_path))
    base_dir = tiny_checkpoints["llama"]
    base = read_tensors(base_dir)
    o = "model.layers.2.self_attn.o_proj.weight"
    edited = {**base, o: base[o] * 10.0}
    first, second = planted_name(str(base_dir), "one"), planted_name(str(base_dir), "two")
    folder, _ = write_planted(base_dir, first, edited, {"kind": "one", "rows": "a"})
    again, _ = write_planted(base_dir, second, dict(edited), {"kind": "two", "rows": "b"})
    assert again == folder and planted_from(folder)["kind"] == "one"  # the marker: the first build's
    for name, kind, rows in ((first, "one", "a"), (second, "two", "b")):
        plant = model_manifest(load_model(name, device="cpu"))["plant"]
        assert (plant["kind"], plant["rows"], plant["name"], plant["tensors_sha256"]) == (kind, rows, name, folder.name)

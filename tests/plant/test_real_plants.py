"""The planted SmolLM2 variants in the cache (``cel-lens plant all`` builds them): every tensor but the
planted heads' own slices bit-identical to the base model, the folder named by its content, the
model loaded by name computing what the plant's arithmetic says, and a rebuild giving the same hash."""

from __future__ import annotations

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.model.planted_cache import planted_folder, planted_from, planted_name, read_tensors, tensors_hash
from cel_lens.plant import BASE, KINDS, build_plants

pytestmark = pytest.mark.slow


def _folder(kind: str):
    folder = planted_folder(planted_name(BASE, kind))
    if folder is None:
        pytest.skip(f"{planted_name(BASE, kind)} is not built here (cel-lens plant all --data-dir ../shared/data)")
    return folder


def _head(name: str) -> int:
    return int(name.split("H")[1])


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_planted_heads_own_slices_differ(kind, smollm2_dir):
    folder = _folder(kind)
    recipe, planted, base = planted_from(folder), read_tensors(folder), read_tensors(smollm2_dir)
    assert tensors_hash(planted) == folder.name == recipe["tensors_sha256"]
    layer, d_head = recipe["layer"], 64
    q_name, o_name = (f"model.layers.{layer}.self_attn.{p}_proj.weight" for p in ("q", "o"))
    assert sorted(planted) == sorted(base)
    for name in base:
        if name not in (q_name, o_name):
            assert torch.equal(planted[name], base[name]), name
    q_rows, o_cols = torch.zeros(576, dtype=torch.bool), torch.zeros(576, dtype=torch.bool)
    for pair in recipe["pairs"].values():
        canceller, reader = _head(pair["canceller"]), _head(pair["reader"])
        q_rows[canceller * d_head:(canceller + 1) * d_head] = True
        for h in (canceller, reader):
            o_cols[h * d_head:(h + 1) * d_head] = True
        assert canceller // 3 == reader // 3  # one key/value group: the canceller attends as the reader
        assert torch.equal(planted[q_name][canceller * d_head:(canceller + 1) * d_head],
                           base[q_name][reader * d_head:(reader + 1) * d_head])
    assert torch.equal(planted[q_name][~q_rows], base[q_name][~q_rows])
    assert torch.equal(planted[o_name][:, ~o_cols], base[o_name][:, ~o_cols])
    assert not torch.equal(planted[o_name][:, o_cols], base[o_name][:, o_cols])


def test_the_model_loaded_by_name_computes_the_plants_margins(smollm2_dir, data_dir):
    """cel_lens's own loading and zero ablation (hook_z) against the plant's last-layer arithmetic on
    the base model's features, on two train rows."""
    from cel_lens.evaluation import evaluate
    from cel_lens.model import load_model
    from cel_lens.plant import extract_features, load_base, plant_rows
    from cel_lens.plant.fit import margins_under

    folder = _folder("both")
    recipe = planted_from(folder)
    _, examples = plant_rows("results/planted/boolq-plant-rows.json", str(data_dir))
    rows = examples["train"][:2]
    hf, tok, w = load_base(smollm2_dir)
    f = extract_features(hf, tok, rows, log_every=0)
    pairs = [{"reader": _head(p["reader"]), "canceller": _head(p["canceller"]), "v": torch.tensor(p["v"]), "scale": p["scale"]}
             for p in recipe["pairs"].values()]
    model = load_model("smollm2-135m+plant:both", device="cpu")
    cancellers = [p["canceller"] for p in pairs]
    result = evaluate(model, rows, [HeadSet(), HeadSet.parse(f"L{w.layer}H{cancellers[0]}")], progress=False,
                      precision="float32")
    ll = result.extra["choice_ll"]
    got = ll[..., 1] - ll[..., 0]
    want = torch.stack([margins_under(w, f.z, f.resid, pairs), margins_under(w, f.z, f.resid, pairs, ablate=cancellers[:1])])
    assert torch.allclose(got.float(), want, atol=2e-4)


def test_a_rebuild_gives_the_same_hash(data_dir, tmp_path):
    """All three BoolQ plants rebuilt from scratch into an empty cache: each the hash of its build here."""
    folders = {kind: _folder(kind) for kind in KINDS}
    record = build_plants(list(KINDS), data_dir=str(data_dir), cache=str(tmp_path))
    assert {kind: p["tensors_sha256"] for kind, p in record["plants"].items()} == {k: f.name for k, f in folders.items()}
    print(f"rebuilt {', '.join(KINDS)} in {record['cpu_s']:.0f} CPU s")

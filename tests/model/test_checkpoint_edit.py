"""Exported checkpoints: the selected heads' o_proj input columns zeroed, every other byte kept.

References independent of the exporter: the Hugging Face model with the columns zeroed in memory,
and cel_lens's hook_z ablation (TransformerBridge and HookedTransformer). Checkpoints are the tiny
Llama (llama3 RoPE), Qwen2 (q/k/v biases) and SmolLM3 (a NoPE layer), all with grouped-query
attention, sharded into three safetensors files with an index.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
import torch

from cel_lens.model.bos import bos_rule
import yaml

from cel_lens.heads import HeadSet
from cel_lens.model import ablation, load_model
from cel_lens.model.checkpoint_edit import PROVENANCE_FILE, export_checkpoint, read_checkpoint
from cel_lens.model.safetensors_io import read_header
from cel_lens.model.checkpoint_source import export_source
from cel_lens.model.registry import ORGANISM_DIR
from cel_lens.testing import TINY_ARCHS, tiny_hf_checkpoint

ATOL = 1e-5
# first and last layer; two query heads sharing one KV group (L1H2, L1H3); a head of another group
HEADS = "L0H0+L1H2+L1H3+L2H1"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sharded")
    return {arch: tiny_hf_checkpoint(arch, root / arch, seed=i, max_shard_size="200KB") for i, arch in enumerate(TINY_ARCHS)}


@pytest.fixture(scope="module")
def exported(sharded, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exported")
    return {arch: export_checkpoint(src, HEADS, root / arch) for arch, src in sharded.items()}


def _hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()


def _zeroed(hf, heads: str):
    model = copy.deepcopy(hf)
    d_head = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for h in HeadSet.parse(heads):
            model.model.layers[h.layer].self_attn.o_proj.weight[:, h.head * d_head:(h.head + 1) * d_head] = 0
    return model


def _tokens() -> torch.Tensor:
    return torch.randint(3, 300, (3, 14), generator=torch.Generator().manual_seed(0))


def _tensor_bytes(path: Path) -> dict[str, bytes]:
    start, header = read_header(path)
    raw = path.read_bytes()
    return {k: raw[start + v["data_offsets"][0]:start + v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


def test_checkpoints_are_sharded_with_gqa(sharded):
    for path in sharded.values():
        ckpt = read_checkpoint(path)
        assert len(ckpt.shards) >= 2 and ckpt.index == "model.safetensors.index.json"
        assert json.loads((path / "config.json").read_text())["num_key_value_heads"] < ckpt.n_heads


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_exported_logits_equal_hf_zeroed_and_cel_lens_ablated(arch, sharded, exported):
    tokens = _tokens()
    source, out = _hf(sharded[arch]), _hf(exported[arch])
    with torch.no_grad():
        logits = out(tokens).logits
        reference = _zeroed(source, HEADS)(tokens).logits
        intact = source(tokens).logits
    torch.testing.assert_close(logits, reference, atol=ATOL, rtol=0)
    assert (logits - intact).abs().max() > 1e-2  # the export removed something: the test can fail
    bridge = load_model(sharded[arch], device="cpu", loader="bridge")
    with torch.no_grad(), ablation.ablate(bridge, HEADS):
        torch.testing.assert_close(bridge(tokens), logits, atol=ATOL, rtol=0)
    if arch != "smollm3":  # TransformerLens's own implementation: float32 rounding of its own order
        hooked = load_model(sharded[arch], device="cpu", loader="hooked")
        with torch.no_grad(), ablation.ablate(hooked, HEADS):
            torch.testing.assert_close(hooked(tokens), logits, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_untouched_bytes_identical_and_columns_zero(arch, sharded, exported):
    src, out = sharded[arch], exported[arch]
    d_head = read_checkpoint(src).d_head
    heads = HeadSet.parse(HEADS)
    edited = {f"model.layers.{layer}.self_attn.o_proj.weight" for layer in heads.layers}
    for shard in read_checkpoint(src).shards:
        a, b = (src / shard).read_bytes(), (out / shard).read_bytes()
        assert len(a) == len(b)
        start, _ = read_header(src / shard)
        assert a[:start] == b[:start]  # header: names, dtypes, shapes, offsets, metadata
        before, after = _tensor_bytes(src / shard), _tensor_bytes(out / shard)
        for name, data in before.items():
            if name not in edited:
                assert after[name] == data, name
                continue
            w0 = torch.frombuffer(bytearray(data), dtype=torch.float32).view(-1, 4 * d_head)
            w1 = torch.frombuffer(bytearray(after[name]), dtype=torch.float32).view(-1, 4 * d_head)
            zero = torch.zeros(w0.shape[1], dtype=torch.bool)
            for h in heads:
                if name == f"model.layers.{h.layer}.self_attn.o_proj.weight":
                    zero[h.head * d_head:(h.head + 1) * d_head] = True
            assert (w1[:, zero] == 0).all() and (w0[:, zero] != 0).any()
            assert torch.equal(w1[:, ~zero], w0[:, ~zero])
    for f in src.iterdir():
        if not f.name.endswith(".safetensors"):  # config, generation config, tokenizer, index
            assert (out / f.name).read_bytes() == f.read_bytes(), f.name


def test_provenance_and_model_card(sharded, exported):
    out = exported["qwen2"]
    record = json.loads((out / PROVENANCE_FILE).read_text())
    assert record["heads"] == HEADS and record["kind"] == "hf"
    written = sorted(p.name for p in out.iterdir() if p.name not in (PROVENANCE_FILE, PROVENANCE_FILE + ".sha256"))
    assert sorted(record["files"]) == written
    sidecar = (out / (PROVENANCE_FILE + ".sha256")).read_text()  # the record's own hash, sha256sum format
    assert sidecar == f"{hashlib.sha256((out / PROVENANCE_FILE).read_bytes()).hexdigest()}  {PROVENANCE_FILE}\n"
    for name, sha in record["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == sha
    for name, sha in record["source"]["shards_sha256"].items():
        assert hashlib.sha256((sharded["qwen2"] / name).read_bytes()).hexdigest() == sha
    assert {e["tensor"] for e in record["edited_tensors"]} == {f"model.layers.{i}.self_attn.o_proj.weight" for i in (0, 1, 2)}
    assert ["[:, 32:48]", "[:, 48:64]"] in [e["zeroed"] for e in record["edited_tensors"]]
    card = (out / "README.md").read_text()
    assert card.startswith("---\n")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["cel_lens"]["removed_heads"] == HEADS and "cel-lens" in meta["tags"]
    assert "base_model" not in meta  # a local directory is no hub id
    assert "`model.layers.1.self_attn.o_proj.weight[:, 32:48]`" in card  # the tensors actually edited


def test_o_proj_bias_stays(tmp_path):
    """A Llama with attention biases: the o_proj bias belongs to no head and is kept, as hook_z
    ablation keeps it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    base = tiny_hf_checkpoint("llama", tmp_path / "base", seed=3)
    config = AutoConfig.from_pretrained(str(base))
    config.attention_bias = True
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * (0.3 if p.ndim == 1 else p.shape[-1] ** -0.5))
    src = tmp_path / "biased"
    model.save_pretrained(src, max_shard_size="200KB")
    for f in base.glob("tokenizer*"):
        shutil.copy(f, src / f.name)
    out = export_checkpoint(src, "L1H0+L2H3", tmp_path / "out")
    bias = "model.layers.1.self_attn.o_proj.bias"
    shard = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"][bias]
    assert _tensor_bytes(out / shard)[bias] == _tensor_bytes(src / shard)[bias]
    tokens = _tokens()
    bridge = load_model(src, device="cpu")
    with torch.no_grad(), ablation.ablate(bridge, "L1H0+L2H3"):
        torch.testing.assert_close(_hf(out)(tokens).logits, bridge(tokens), atol=ATOL, rtol=0)


def test_peak_memory_stays_below_the_largest_shard(tmp_path):
    """Shards are streamed: the export holds one copy chunk and one o_proj at a time, never a shard."""
    src = tiny_hf_checkpoint("llama", tmp_path / "src", n_layers=2, n_heads=8, d_head=64, max_shard_size="10MB")
    shards = read_checkpoint(src).shards
    assert len(shards) == 2
    largest = max((src / s).stat().st_size for s in shards)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        export_checkpoint(src, "L0H1+L1H7", tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    o_proj = 512 * 512 * 4
    assert peak < largest + (2 << 20)
    assert peak < (1 << 20) + o_proj + (512 << 10)  # one 1 MiB chunk + one o_proj + bookkeeping
    assert peak < largest / 3  # the bounds say something: a shard is several times the peak


def test_refusals_are_one_clear_line(sharded, exported, tmp_path):
    src = sharded["llama"]
    with pytest.raises(FileExistsError, match="not empty"):
        export_checkpoint(src, "L0H0", exported["llama"])
    with pytest.raises(ValueError, match="inside the source"):
        export_checkpoint(src, "L0H0", src / "sub")
    with pytest.raises(ValueError, match="layer"):
        export_checkpoint(src, "L7H0", tmp_path / "a")
    with pytest.raises(ValueError, match="no heads"):
        export_checkpoint(src, "intact", tmp_path / "b")
    bin_only = tmp_path / "bin_only"
    bin_only.mkdir()
    shutil.copy(src / "config.json", bin_only)
    (bin_only / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="safetensors"):
        export_checkpoint(bin_only, "L0H0", tmp_path / "c")
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    index["weight_map"].popitem()
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="does not match"):
        export_checkpoint(broken, "L0H0", tmp_path / "d")
    assert not any(p.name.startswith((".a", ".b", ".c", ".d")) for p in tmp_path.iterdir())  # nothing half-written
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_checkpoint(src, "L0H0", empty) == empty and (empty / PROVENANCE_FILE).is_file()


def test_quantized_weights_are_refused(tmp_path):
    from safetensors.torch import save_file

    src = tmp_path / "int8"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 1}))
    save_file({"model.layers.0.self_attn.o_proj.weight": torch.ones(8, 8, dtype=torch.int8)}, str(src / "model.safetensors"))
    with pytest.raises(ValueError, match="float weights only"):
        export_checkpoint(src, "L0H0", tmp_path / "out")


def test_organism_exports_natively_and_reloads(tmp_path):
    out = export_checkpoint(ORGANISM_DIR, "L0H2", tmp_path / "organism")
    for f in ORGANISM_DIR.rglob("*"):
        if f.is_file() and f.name != "model.safetensors":
            assert (out / f.relative_to(ORGANISM_DIR)).read_bytes() == f.read_bytes()
    source, exported = load_model("organism", device="cpu"), load_model(out, device="cpu")
    tokens = source.to_tokens(["3 + 4 = 7 ; 2 + 5 ="])
    with torch.no_grad():
        with ablation.ablate(source, "L0H2"):
            reference = source(tokens)
        torch.testing.assert_close(exported(tokens), reference, atol=ATOL, rtol=0)
        assert (exported(tokens) - source(tokens)).abs().max() > 1e-3
    assert (exported.blocks[0].attn.W_O[2] == 0).all() and (exported.blocks[0].attn.W_O[1] != 0).any()
    assert torch.equal(exported.blocks[0].attn.b_O, source.blocks[0].attn.b_O)


def test_sources_loaded_models_and_memory_models(tiny_checkpoints, tiny_model, tmp_path):
    """A loaded model exports from the checkpoint it came from (not TransformerLens's converted
    weights); a HookedTransformer built in memory from its own weights, as a native checkpoint."""
    loaded = load_model(tiny_checkpoints["qwen2"], device="cpu", loader="hooked")
    with export_source(loaded) as src:
        assert src.path == Path(tiny_checkpoints["qwen2"]).resolve() and src.kind == "hf"
        prepends = bos_rule(loaded)["prepends_bos"]  # the rule cel_lens encodes this model's prompts with
        assert src.encoding == {"prepend_bos": prepends, "n_ctx": loaded.cfg.n_ctx, "from": "model"}
    with export_source(tiny_model) as src:
        assert src.kind == "native"
        out = export_checkpoint(src.path, "L1H3", tmp_path / "memory")
    tokens = tiny_model.to_tokens(["hello world"])
    with torch.no_grad(), ablation.ablate(tiny_model, "L1H3"):
        reference = tiny_model(tokens)
    torch.testing.assert_close(load_model(out, device="cpu")(tokens), reference, atol=ATOL, rtol=0)


def test_hub_id_exports_from_its_cached_snapshot(tiny_checkpoints, tmp_path, monkeypatch):
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--tiny-llama"
    shutil.copytree(tiny_checkpoints["llama"], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with export_source("someone/tiny-llama") as src:
        assert (src.id, src.revision, src.kind) == ("someone/tiny-llama", commit, "hf")
        assert src.encoding["prepend_bos"] is True
        out = export_checkpoint(src.path, "L0H0", tmp_path / "out", provenance={"source": src.as_dict()})
    record = json.loads((out / PROVENANCE_FILE).read_text())
    assert record["source"]["id"] == "someone/tiny-llama" and record["source"]["revision"] == commit
    meta = yaml.safe_load((out / "README.md").read_text().split("---\n")[1])
    assert meta["base_model"] == "someone/tiny-llama" and meta["library_name"] == "transformers"


def test_a_safetensors_file_outside_the_shard_index_is_left_out_and_said(sharded, tmp_path):
    """A ``consolidated.safetensors`` beside the shards made export fail ("index.json does not match
    the shards' headers"): the indexed shards are edited, the extra file is neither edited nor
    copied, and the provenance and the card say so."""
    src = tmp_path / "src"
    shutil.copytree(sharded["llama"], src)
    shutil.copy(next(src.glob("model-*.safetensors")), src / "consolidated.safetensors")
    out = export_checkpoint(src, "L1H0", tmp_path / "out")
    provenance = json.loads((out / PROVENANCE_FILE).read_text())
    assert not (out / "consolidated.safetensors").exists() and "consolidated.safetensors" in provenance["not_copied"]
    assert provenance["not_in_shard_index"][0].startswith("consolidated.safetensors: a safetensors file the shard index")
    assert "consolidated.safetensors" in (out / "README.md").read_text()
    assert "consolidated.safetensors" not in provenance["files"] and provenance["edited_tensors"]
    torch.testing.assert_close(_hf(out)(_tokens()).logits, _zeroed(_hf(src), "L1H0")(_tokens()).logits)

"""Model loading and the exactness of hook_z ablation against Hugging Face transformers.

The reference is independent of cel_lens and TransformerLens: the HF model itself, with the input
columns of ``o_proj`` that belong to the ablated heads set to zero. Every architecture of the
paper (Llama with llama3 RoPE scaling, Qwen2 with q/k/v biases, SmolLM3 with a NoPE layer), each
with grouped-query attention, goes through the TransformerBridge path; Llama and Qwen2 also
through the HookedTransformer path (TransformerLens's own config derivation and weight conversion).
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from cel_lens.model import ablation
from cel_lens.heads import HeadSet
from cel_lens.model import PAPER_MODELS, load_model, model_id, weights_hash

ATOL = 1e-4
# Head sets across layers (3 layers, 4 query heads, 2 KV groups: heads {0,1} and {2,3}): first
# layer, last layer, two heads sharing one KV group, and a k=3 set spanning all layers.
HEAD_SETS = ["L0H0", "L2H3", "L1H0+L1H1", "L0H2+L1H3+L2H1"]
PATHS = [
    ("llama", "bridge"),
    ("qwen2", "bridge"),
    ("smollm3", "bridge"),
    ("llama", "hooked"),
    ("qwen2", "hooked"),
]


def _tokens(n: int = 3, pos: int = 14, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 300, (n, pos), generator=torch.Generator().manual_seed(seed))


def _load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()


def _hf_ablated(hf, heads: str) -> "torch.nn.Module":
    """A copy of the HF model whose o_proj input columns of ``heads`` are zero."""
    model = copy.deepcopy(hf)
    d_head = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for h in HeadSet.parse(heads):
            model.model.layers[h.layer].self_attn.o_proj.weight[:, h.head * d_head : (h.head + 1) * d_head] = 0
    return model


@pytest.fixture(scope="module")
def hf_models(tiny_checkpoints):
    return {arch: _load_hf(path) for arch, path in tiny_checkpoints.items()}


@pytest.fixture(scope="module")
def hf_reference(hf_models):
    """Logits of the HF models on the shared tokens, intact and for every head set."""
    tokens = _tokens()
    out = {}
    with torch.no_grad():
        for arch, hf in hf_models.items():
            out[arch, "intact"] = hf(tokens).logits
            for heads in HEAD_SETS + ["L1H0"]:
                out[arch, heads] = _hf_ablated(hf, heads)(tokens).logits
    return tokens, out


@pytest.fixture(scope="module")
def loaded(tiny_checkpoints):
    cache = {}

    def get(arch: str, loader: str, **flags):
        key = (arch, loader, tuple(sorted(flags.items())))
        if key not in cache:
            cache[key] = load_model(tiny_checkpoints[arch], device="cpu", dtype="float32", loader=loader, **flags)
        return cache[key]

    return get


# ---------------------------------------------------------------------------------------------
# exactness
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,loader", PATHS)
def test_intact_logits_equal_hf(arch, loader, loaded, hf_reference):
    tokens, ref = hf_reference
    model = loaded(arch, loader)
    assert type(model).__name__ == {"bridge": "TransformerBridge", "hooked": "HookedTransformer"}[loader]
    with torch.no_grad():
        logits = model(tokens)
    torch.testing.assert_close(logits, ref[arch, "intact"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("heads", HEAD_SETS)
@pytest.mark.parametrize("arch,loader", PATHS)
def test_ablation_equals_hf_with_o_proj_columns_zeroed(arch, loader, heads, loaded, hf_reference):
    tokens, ref = hf_reference
    model = loaded(arch, loader)
    with torch.no_grad(), ablation.ablate(model, heads):
        logits = model(tokens)
    torch.testing.assert_close(logits, ref[arch, heads], atol=ATOL, rtol=0)
    # the ablation did something: the test could fail
    assert (ref[arch, heads] - ref[arch, "intact"]).abs().max() > 100 * ATOL


@pytest.mark.parametrize("arch,loader", PATHS)
def test_batched_variants_equal_hf(arch, loader, loaded, hf_reference):
    tokens, ref = hf_reference
    model = loaded(arch, loader)
    sets = ["intact", *HEAD_SETS]
    logits = ablation.run_variants(model, tokens, sets)
    assert logits.shape == (len(sets), *ref[arch, "intact"].shape)
    for v, heads in enumerate(sets):
        torch.testing.assert_close(logits[v], ref[arch, heads], atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch,loader", [("llama", "hooked"), ("qwen2", "hooked"), ("qwen2", "bridge")])
def test_fold_ln_keeps_ablation_exact(arch, loader, loaded, hf_reference):
    """fold_ln is allowed: it only rescales weights that read the residual stream."""
    tokens, ref = hf_reference
    model = loaded(arch, loader, fold_ln=True)
    for heads in ("intact", "L0H2+L1H3+L2H1"):
        with torch.no_grad(), ablation.ablate(model, heads):
            torch.testing.assert_close(model(tokens), ref[arch, heads], atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch,loader", [("llama", "bridge"), ("qwen2", "hooked")])
def test_gqa_ablates_one_query_head_not_its_kv_group(arch, loader, loaded, hf_reference):
    tokens, ref = hf_reference
    model = loaded(arch, loader)
    seen = {}

    def grab(z, hook=None):
        seen["z"] = z.detach().clone()
        return z

    with torch.no_grad():
        with model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", grab)]):
            model(tokens)
        intact_z = seen["z"]
        with ablation.ablate(model, "L1H0"), model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", grab)]):
            logits = model(tokens)
    assert intact_z.shape[2] == 4  # per query head, not per KV head
    assert (seen["z"][:, :, 0] == 0).all()
    torch.testing.assert_close(seen["z"][:, :, 1:], intact_z[:, :, 1:], atol=0, rtol=0)
    torch.testing.assert_close(logits, ref[arch, "L1H0"], atol=ATOL, rtol=0)
    # head 1 shares head 0's keys/values; removing the whole group is a different model
    assert (logits - ref[arch, "L1H0+L1H1"]).abs().max() > 100 * ATOL


@pytest.mark.filterwarnings("ignore::cel_lens.model.processing.ProcessedModelWarning")  # the case it names
def test_fold_value_biases_would_break_exactness(tiny_checkpoints, hf_reference):
    """Why load_model refuses fold_value_biases: with Qwen2's v_proj bias folded into b_O, a
    zeroed hook_z leaves the bias part of the head alive."""
    from cel_lens.model import convert, load

    tokens, ref = hf_reference
    hf = _load_hf(tiny_checkpoints["qwen2"])
    tok = convert.load_tokenizer(tiny_checkpoints["qwen2"], False)
    flags = {**load.PROCESSING_DEFAULTS, "fold_value_biases": True}
    folded = convert.hooked_from_hf(tiny_checkpoints["qwen2"], hf, tok, None, "cpu", torch.float32, flags, {})
    with torch.no_grad():
        torch.testing.assert_close(folded(tokens), ref["qwen2", "intact"], atol=ATOL, rtol=0)
        with ablation.ablate(folded, "L1H0"):
            wrong = folded(tokens)
    assert (wrong - ref["qwen2", "L1H0"]).abs().max() > 100 * ATOL


def test_llama3_rope_scaling_is_honoured(tiny_checkpoints, loaded, hf_reference):
    """The tiny Llama uses llama3 RoPE scaling, as Llama-3.2; the same weights with plain RoPE give
    other logits, so the exactness tests above do check the scaling."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tokens, ref = hf_reference
    config = AutoConfig.from_pretrained(str(tiny_checkpoints["llama"]))
    assert config.rope_parameters["rope_type"] == "llama3"
    config.rope_parameters = {"rope_type": "default", "rope_theta": config.rope_parameters["rope_theta"]}
    plain = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoints["llama"]), config=config).eval()
    with torch.no_grad():
        assert (plain(tokens).logits - ref["llama", "intact"]).abs().max() > 100 * ATOL
    assert loaded("llama", "hooked").cfg.use_NTK_by_parts_rope


def test_tiny_checkpoints_have_the_features_under_test(hf_models):
    for hf in hf_models.values():
        assert hf.config.num_key_value_heads < hf.config.num_attention_heads
    attn = hf_models["qwen2"].model.layers[0].self_attn
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.bias is not None and proj.bias.abs().min() > 0
    assert 0 in hf_models["smollm3"].config.no_rope_layers and 1 in hf_models["smollm3"].config.no_rope_layers


# ---------------------------------------------------------------------------------------------
# loading paths
# ---------------------------------------------------------------------------------------------
def _fake_hub_cache(root: Path, repo_id: str, checkpoint: Path) -> None:
    """Lay ``checkpoint`` out as the hub cache would after a download of ``repo_id``."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(checkpoint, repo / "snapshots" / "0123456789abcdef")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_hub_name_transformerlens_knows_loads_hooked_from_cache(fake_hub, tiny_checkpoints, hf_reference):
    """``Qwen/Qwen2.5-3B-Instruct`` goes through HookedTransformer.from_pretrained (here on a tiny
    checkpoint planted in the cache under that name; no network)."""
    tokens, ref = hf_reference
    _fake_hub_cache(fake_hub, "Qwen/Qwen2.5-3B-Instruct", tiny_checkpoints["qwen2"])
    model = load_model("qwen2.5-3b-instruct", device="cpu")  # a TransformerLens alias
    assert type(model).__name__ == "HookedTransformer"
    assert model_id(model) == "Qwen/Qwen2.5-3B-Instruct"
    with torch.no_grad(), ablation.ablate(model, "L1H0+L1H1"):
        torch.testing.assert_close(model(tokens), ref["qwen2", "L1H0+L1H1"], atol=ATOL, rtol=0)


def test_other_hub_name_loads_bridge_from_cache(fake_hub, tiny_checkpoints):
    _fake_hub_cache(fake_hub, "someone/tiny-smollm3", tiny_checkpoints["smollm3"])
    model = load_model("someone/tiny-smollm3", device="cpu")
    assert type(model).__name__ == "TransformerBridge"
    assert model_id(model) == "someone/tiny-smollm3"


def test_model_objects_pass_through(tiny_model, tiny_checkpoints, hf_reference):
    assert load_model(tiny_model) is tiny_model
    tokens, ref = hf_reference
    bridge = load_model(_load_hf(tiny_checkpoints["smollm3"]), device="cpu")
    assert type(bridge).__name__ == "TransformerBridge"
    with torch.no_grad(), ablation.ablate(bridge, "L2H3"):
        torch.testing.assert_close(bridge(tokens), ref["smollm3", "L2H3"], atol=ATOL, rtol=0)
    with pytest.raises(TypeError, match="cannot use a"):
        load_model(42)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(tiny_checkpoints["llama"]))
    config.name_or_path = ""
    nameless = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="without name_or_path"):
        load_model(nameless)


def test_dtype_and_device(tiny_checkpoints):
    model = load_model(tiny_checkpoints["llama"], device="cpu", dtype="bfloat16", loader="hooked")
    assert model.cfg.dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).device.type == "cpu"


# ---------------------------------------------------------------------------------------------
# errors: one clear line each, never a hang
# ---------------------------------------------------------------------------------------------
def test_unknown_name():
    with pytest.raises(ValueError, match="unknown model 'no-such-model-xyz'"):
        load_model("no-such-model-xyz")


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        load_model("./definitely/missing/dir")
    with pytest.raises(ValueError, match="has no config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="no weights"):
        load_model(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="is a file"):
        load_model(tmp_path / "notes.txt")


def test_broken_checkpoint(tmp_path, tiny_checkpoints):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoints["llama"], broken)
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(ValueError, match="cannot load"):
        load_model(broken, device="cpu")


def test_offline_without_cache(fake_hub):
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="not in the local Hugging Face cache.*offline"):
        load_model("someone/not-downloaded", device="cpu")
    with pytest.raises(RuntimeError, match="offline"):
        load_model("meta-llama/Llama-3.2-3B-Instruct", device="cpu", local_files_only=True)
    assert time.perf_counter() - start < 10


def _online(monkeypatch, reachable: bool, error: Exception | None = None):
    """Pretend to be online: the hub is (un)reachable and a download raises ``error``."""
    import huggingface_hub
    import huggingface_hub.constants as constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    from cel_lens.model import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: reachable)

    def snapshot_download(repo_id, *, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)


def _http_error(cls, status: int):
    import httpx

    response = httpx.Response(status, request=httpx.Request("GET", "https://huggingface.co/x"))
    return cls(f"{status} error", response=response)


def test_no_network_and_no_cache(fake_hub, monkeypatch):
    _online(monkeypatch, reachable=False)
    with pytest.raises(RuntimeError, match="cannot reach .* not in the local cache"):
        load_model("someone/some-model")


def test_gated_model_without_token(fake_hub, monkeypatch):
    from huggingface_hub.errors import GatedRepoError

    _online(monkeypatch, reachable=True, error=_http_error(GatedRepoError, 401))
    with pytest.raises(RuntimeError, match="gated model.*token"):
        load_model("meta-llama/Llama-3.2-3B-Instruct")


def test_unknown_hub_repository(fake_hub, monkeypatch):
    from huggingface_hub.errors import RepositoryNotFoundError

    _online(monkeypatch, reachable=True, error=_http_error(RepositoryNotFoundError, 404))
    with pytest.raises(ValueError, match="unknown model 'someone/no-such-repo'"):
        load_model("someone/no-such-repo")


def test_hub_reachability_probe_is_bounded():
    from cel_lens.model.hub import _hub_reachable

    start = time.perf_counter()
    assert _hub_reachable("https://127.0.0.1:9", timeout=1.0) is False  # closed port
    assert _hub_reachable("https://no-such-host.invalid", timeout=1.0) is False
    assert time.perf_counter() - start < 5


def test_bad_options(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    with pytest.raises(ValueError, match="fold_value_biases=True"):
        load_model(path, fold_value_biases=True)
    with pytest.raises(ValueError, match="refactor_factored_attn_matrices=True"):
        load_model(path, refactor_factored_attn_matrices=True)
    with pytest.raises(ValueError, match="unknown loader"):
        load_model(path, loader="magic")
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(path, dtype="float8")
    with pytest.raises(ValueError, match="empty model name"):
        load_model("  ")
    with pytest.raises(ValueError, match="HookedTransformer cannot convert SmolLM3ForCausalLM"):
        load_model(tiny_checkpoints["smollm3"], device="cpu", loader="hooked")


# ---------------------------------------------------------------------------------------------
# registry, manifests, CLI
# ---------------------------------------------------------------------------------------------
def test_paper_models_registry():
    specs = {s.family: s for s in PAPER_MODELS.values()}
    assert set(specs) == {"llama", "qwen2", "smollm3"}
    assert specs["llama"].total_heads == 672 and specs["qwen2"].total_heads == 576
    assert specs["smollm3"].total_heads == 576
    for hub_id, spec in PAPER_MODELS.items():
        assert spec.hub_id == hub_id
        assert spec.as_dict()["total_heads"] == spec.n_layers * spec.n_heads
    # the loader load_model picks by name
    from cel_lens.model.registry import tl_official_name

    for spec in PAPER_MODELS.values():
        assert (tl_official_name(spec.hub_id) is not None) == (spec.loader == "hooked")


def test_registry_matches_transformerlens_and_transformers_configs():
    """Llama: TransformerLens's own config table (no download); SmolLM3: transformers' defaults,
    documented as SmolLM3-3B's configuration."""
    from transformer_lens.loading_from_pretrained import convert_hf_model_config
    from transformers import SmolLM3Config

    llama = PAPER_MODELS["meta-llama/Llama-3.2-3B-Instruct"]
    tl = convert_hf_model_config("meta-llama/Llama-3.2-3B-Instruct")
    assert (tl["n_layers"], tl["n_heads"], tl["n_key_value_heads"], tl["d_model"]) == (
        llama.n_layers, llama.n_heads, llama.n_kv_heads, llama.d_model,
    )
    smol = PAPER_MODELS["HuggingFaceTB/SmolLM3-3B"]
    cfg = SmolLM3Config()
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size) == (
        smol.n_layers, smol.n_heads, smol.n_kv_heads, smol.d_model,
    )
    with pytest.raises(ValueError, match="total_heads"):
        type(smol)(**{**smol.as_dict(), "total_heads": 1})


def test_cli_models(capsys):
    from cel_lens.cli import main

    assert main(["models"]) == 0
    table = capsys.readouterr().out
    for hub_id in PAPER_MODELS:
        assert hub_id in table
    assert "672" in table and "576" in table
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [spec.as_dict() for spec in PAPER_MODELS.values()]


def test_model_id_and_weights_hash(tiny_checkpoints, loaded, tiny_model):
    a = loaded("llama", "bridge")
    b = load_model(tiny_checkpoints["llama"], device="cpu")
    assert model_id(a) == str(tiny_checkpoints["llama"].resolve())
    assert model_id(tiny_model) == tiny_model.cfg.model_name
    assert weights_hash(a) == weights_hash(b)
    assert weights_hash(a).startswith("sha256:")
    assert weights_hash(a) != weights_hash(loaded("qwen2", "bridge"))
    sampled = weights_hash(b, full_limit_bytes=0)
    assert sampled.startswith("sha256-sampled:")
    with torch.no_grad():
        p = next(b.parameters())
        p.view(-1)[0] += 1.0  # the first element is always in the sample
    assert weights_hash(a) != weights_hash(b)
    assert weights_hash(b, full_limit_bytes=0) != sampled


def test_check_model_name_fails_fast_without_loading(fake_hub, tiny_checkpoints, monkeypatch, tmp_path):
    """The cheap check the CLI runs first: no download, no load, one probe of the hub at most."""
    import huggingface_hub
    import huggingface_hub.constants as constants

    from cel_lens.model import hub

    probes = []
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: probes.append(endpoint) or False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", _no_download(huggingface_hub.snapshot_download))
    hub.check_model_name("organism")
    hub.check_model_name(tiny_checkpoints["llama"])
    with pytest.raises(ValueError, match="no config.json"):
        hub.check_model_name(str(tmp_path))
    _fake_hub_cache(fake_hub, "Qwen/Qwen2.5-3B-Instruct", tiny_checkpoints["qwen2"])
    hub.check_model_name("qwen/qwen2.5-3b-instruct")  # another capitalisation of a cached id
    with pytest.raises(RuntimeError, match="not in the local Hugging Face cache.*offline"):
        hub.check_model_name("someone/not-downloaded")
    assert probes == []  # offline: no probe
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(RuntimeError, match="cannot reach .* not in the local cache"):
        hub.check_model_name("someone/not-downloaded")
    assert len(probes) == 1


def _no_download(real):
    def snapshot_download(repo_id, *, local_files_only=False, **kwargs):
        assert local_files_only, "the check must not download"
        return real(repo_id, local_files_only=True, **kwargs)

    return snapshot_download


def test_hub_probe_is_remembered(monkeypatch):
    import socket

    from cel_lens.model import hub

    calls = []

    def refuse(address, timeout=None):
        calls.append(address)
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(hub, "_reach_memo", {})
    assert hub._hub_reachable("https://hub.example:443") is False
    assert hub._hub_reachable("https://hub.example:443") is False
    assert calls == [("hub.example", 443)]


def test_the_automatic_loader_chooses_hooked_where_transformerlens_knows_the_model():
    from cel_lens.config import LOADERS

    auto, hooked, bridge = (LOADERS.resolve(n) for n in ("auto", "hooked", "bridge"))
    assert auto.choose("gpt2") is hooked and auto.choose(None) is bridge  # None: no TransformerLens name
    assert hooked.choose(None) is hooked and bridge.choose("gpt2") is bridge and bridge.bridge and not hooked.bridge

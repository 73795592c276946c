"""Every config field of every architecture the hooked loader takes is accounted for, and a field the
conversion would drop with a value that matters is refused (``cel_lens.model.hooked_fields``)."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

from cel_lens.model import load_model
from cel_lens.model.hooked_fields import (
    HOOKED_ARCHITECTURES,
    UnknownConfigFieldWarning,
    check_hooked_config,
    ignored_fields,
)


def _default_configs():
    from transformers import LlamaConfig, Qwen2Config

    return {"LlamaForCausalLM": LlamaConfig(), "Qwen2ForCausalLM": Qwen2Config()}


def test_every_field_of_every_supported_config_is_accounted_for(tiny_checkpoints):
    """A field in no table (a newer transformers) would fail here: no field is dropped silently."""
    import json

    configs = _default_configs()
    assert set(configs) == set(HOOKED_ARCHITECTURES)
    for arch, config in configs.items():
        assert ignored_fields(arch, config.to_dict()) == ([], []), arch
    for name in ("llama", "qwen2"):  # the tiny checkpoints: llama3 rope scaling, q/k/v biases
        config = json.loads((tiny_checkpoints[name] / "config.json").read_text())
        refused, unknown = ignored_fields(config["architectures"][0], config)
        assert refused == [] and unknown == [], (name, refused, unknown)


@pytest.mark.parametrize(
    "arch, change, needle",
    [
        ("LlamaForCausalLM", dict(attention_bias=True), "attention_bias=True"),
        ("LlamaForCausalLM", dict(mlp_bias=True), "mlp_bias=True"),
        ("LlamaForCausalLM", dict(head_dim=64), "head_dim=64"),
        ("LlamaForCausalLM", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "rope_parameters="),
        ("Qwen2ForCausalLM", dict(use_sliding_window=True, sliding_window=128), "use_sliding_window=True"),
        ("Qwen2ForCausalLM", dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), "rope_parameters="),
    ],
)
def test_a_field_the_conversion_drops_is_refused_in_one_line(arch, change, needle):
    config = {**_default_configs()[arch].to_dict(), **change}
    with pytest.raises(ValueError) as err:
        check_hooked_config(arch, config, "ckpt")
    assert needle in str(err.value) and "loader='bridge'" in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_field_is_named_in_a_warning():
    config = {**_default_configs()["LlamaForCausalLM"].to_dict(), "attention_sinks": 4}
    assert ignored_fields("LlamaForCausalLM", config) == ([], ["attention_sinks"])
    with pytest.warns(UnknownConfigFieldWarning, match="attention_sinks"):
        check_hooked_config("LlamaForCausalLM", config, "ckpt")


def test_llama_attention_biases_refuse_the_hooked_loader_and_the_bridge_keeps_them(tiny_checkpoints, tmp_path):
    """``loader="hooked"`` dropped Llama's attention biases (logits 0.78 away from transformers)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    src = tiny_checkpoints["llama"]
    config = AutoConfig.from_pretrained(src)
    config.attention_bias = True
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    hf.load_state_dict(AutoModelForCausalLM.from_pretrained(src).state_dict(), strict=False)
    with torch.no_grad():
        for layer in hf.model.layers:
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.self_attn, proj).bias.normal_()
    out = tmp_path / "llama_bias"
    hf.save_pretrained(out)
    for f in src.iterdir():
        if "token" in f.name or f.name == "special_tokens_map.json":
            shutil.copy(f, out / f.name)
    with pytest.raises(ValueError, match=r"ignores attention_bias=True .*loader='bridge'"):
        load_model(out, loader="hooked", device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = load_model(out, loader="bridge", device="cpu")
    tokens = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        torch.testing.assert_close(bridge(tokens), hf(tokens).logits, atol=1e-4, rtol=1e-4)

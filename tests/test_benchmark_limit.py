"""The FLOP limit of an exact scan (``benchmarks/limit.py``) against PyTorch's own FLOP counter on a
real ``transformers`` Llama forward, and against hand-computed cases; the racing benchmark's table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not part of the installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.limit import Shape, floor_flops, head_flops, intact_flops, scan_limit_flops  # noqa: E402
from benchmarks.racing import compare, planted, table  # noqa: E402


def test_intact_flops_match_torch_flop_counter_on_a_llama_forward():
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    model.config._attn_implementation = "eager"
    shape = Shape.from_hf_config(cfg.to_dict())
    T = 11
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 97, (1, T)))
    # the counter charges eager attention for all T x T pairs, not the causal half
    causal_attention = shape.n_layers * shape.attention(T, T)
    full_attention = shape.n_layers * 4 * shape.n_heads * shape.d_head * T * T
    assert counter.get_total_flops() == intact_flops(shape, T, T) - causal_attention + full_attention


def test_head_costs_by_hand():
    s = Shape(n_layers=3, n_heads=2, n_kv_heads=1, d_model=4, d_head=2, d_mlp=6, d_vocab=10, gated=True)
    assert (s.qkv, s.out, s.mlp, s.unembed) == (2 * 4 * 4 * 2, 2 * 2 * 2 * 4, 2 * 4 * 6 * 3, 80)
    T, S = 5, 1
    # the last layer: only the scored position gets the correction and the MLP, then the unembedding
    assert head_flops(s, 2, T, S) == S * (2 * 2 * 4 + s.mlp) + S * s.unembed
    # layer 0: correction + MLP everywhere, layer 1 in full, the last layer at the scored position
    expected0 = T * (2 * 2 * 4 + s.mlp) + s.full_layer(T) + s.last_layer(T, S) + S * s.unembed
    assert head_flops(s, 0, T, S) == expected0
    seqs = [(T, S), (7, 2)]
    assert scan_limit_flops(s, seqs) < floor_flops(s, seqs)


def test_racing_benchmark_rows_and_table():
    row = compare(planted(4, 4, 300, 3.0, 0), 3, 0.0)
    assert row["recall"] == 1.0 and 0.0 <= row["saved"] < 1.0 and row["ratio"] >= 1.0
    text = table([{"source": "planted", "pool": 3, "heads": 16, "n_dist": 300, "scale": 3.0, "margin": 0.0,
                   **row, "min_recall": row["recall"]}])
    assert text.count("\n") == 2 and "| planted | 3 | 16 | 300 |" in text


@pytest.mark.parametrize("layer", [0, 1])
def test_every_head_costs_less_than_the_floors_share(layer):
    s = Shape.from_hf_config({"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576, "head_dim": 64,
                              "intermediate_size": 1536, "vocab_size": 49152, "num_hidden_layers": 30})
    T, S = 20, 2
    share = (s.n_layers - layer) / s.n_layers * intact_flops(s, T, S)  # the floor charges layers l.. in full
    assert head_flops(s, layer, T, S) < share


def test_own_cpu_seconds_leave_out_child_processes():
    import subprocess

    from benchmarks.measure import cpu_seconds, own_cpu_seconds

    own0, all0 = own_cpu_seconds(), cpu_seconds()
    subprocess.run([sys.executable, "-c", "sum(range(3 * 10**7))"], check=True)
    own, everything = own_cpu_seconds() - own0, cpu_seconds() - all0
    assert everything - own > 0.05  # the child's CPU time is counted with children only
    assert own < everything

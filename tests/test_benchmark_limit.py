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

from benchmarks.limit import (  # noqa: E402
    Shape, floor_flops, generation_flops, head_flops, intact_flops, pieces, scan_intact_flops, scan_count_flops,
)
from benchmarks.racing import compare, known_boundary_cost, planted, table  # noqa: E402


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


def test_a_hooked_models_shape_is_its_checkpoints(tiny_checkpoints):
    """The shape read from a HookedTransformer's config is the one read from its checkpoint's
    ``config.json`` (grouped key/value heads and the gated MLP included)."""
    import json

    import cel_lens as cl

    for arch, path in tiny_checkpoints.items():
        hooked = Shape.from_hooked_config(cl.load_model(str(path)).cfg)
        assert hooked == Shape.from_hf_config(json.loads((path / "config.json").read_text())), arch


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
    assert scan_count_flops(s, seqs) < floor_flops(s, seqs)


def test_causal_attention_counts_each_query_over_its_keys():
    s = Shape(n_layers=2, n_heads=1, n_kv_heads=1, d_model=2, d_head=1, d_mlp=2, d_vocab=3)
    unit = 4  # 4 H d_head FLOPs per (query, key) pair
    assert s.causal_attention(3) == unit * (1 + 2 + 3)
    assert s.causal_attention(3, past=5) == unit * (6 + 7 + 8)
    assert s.causal_attention(3, past=5, last=1) == unit * 8  # only the last query
    assert s.causal_attention(4, last=2) == unit * (3 + 4)
    assert s.full_layer(3, past=5) == 3 * (s.qkv + s.out + s.mlp) + s.causal_attention(3, 5)


def test_pieces_share_a_multiple_choice_context():
    # one continuation: one row context + continuation[:-1], every continuation token scored
    assert pieces([([1, 2, 3], [[7, 8]])]) == [(4, 2, 0)]
    # two one-token endings: the context once, its last position read by both
    assert pieces([([1, 2, 3], [[7], [8]])]) == [(3, 1, 0)]
    # longer endings run after the cached context
    assert pieces([([1, 2, 3], [[7, 8, 9], [5]])]) == [(3, 1, 0), (2, 2, 3)]
    s = Shape(n_layers=2, n_heads=2, n_kv_heads=1, d_model=4, d_head=2, d_mlp=6, d_vocab=10)
    assert scan_intact_flops(s, [(4, 2)]) == intact_flops(s, 4, 2, 0)
    shared = scan_intact_flops(s, pieces([([1] * 30, [[7, 8, 9]] * 4)]))
    rows = 4 * intact_flops(s, 32, 3)
    assert shared < rows  # the context is computed once, not four times


def test_generation_bound_by_hand():
    s = Shape(n_layers=2, n_heads=1, n_kv_heads=1, d_model=4, d_head=2, d_mlp=6, d_vocab=10)
    # intact: prefill of 5 tokens, 3 tokens generated (2 decode steps)
    intact, total = generation_flops(s, [5], [[[7, 8, 9]], [[]], [[7, 8, 9]]])
    assert intact == intact_flops(s, 5, 1) + intact_flops(s, 1, 1, 5) + intact_flops(s, 1, 1, 6)
    # L0H0 generated nothing: its prefill resumed from layer 0; L1H0 the intact text: every step from layer 1
    assert total == intact + head_flops(s, 0, 5, 1) + head_flops(s, 1, 5, 1) + head_flops(s, 1, 1, 1, 5) + head_flops(s, 1, 1, 1, 6)
    # a text that departs from the intact one after its first token: the later steps run every layer
    _, departed = generation_flops(s, [5], [[[7, 8, 9]], [[7, 4, 9]]])
    assert departed == intact + head_flops(s, 0, 5, 1) + head_flops(s, 0, 1, 1, 5) + intact_flops(s, 1, 1, 6)
    assert head_flops(s, 1, 1, 1, 9) < head_flops(s, 0, 1, 1, 9) < intact_flops(s, 1, 1, 9)


def test_racing_benchmark_rows_and_table():
    row = compare(planted(4, 4, 300, 3.0, 0), 3, 0.0)
    assert row["recall"] == 1.0 and 0.0 <= row["saved"] < 1.0 and row["ratio"] >= 1.0
    assert row["known_ratio"] >= row["ratio"]  # told the boundary, a race can only stop sooner
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


def test_known_boundary_cost_stops_a_head_that_breaks_everything_after_one_batch():
    from cel_lens.heads import Head
    from cel_lens.scoring import RacingOptions
    from cel_lens.scoring.racing import racing_schedule
    from cel_lens.testing import SyntheticOracle

    n = 1000
    effects = {Head(0, 0): -0.5, Head(0, 1): 0.05}
    oracle = SyntheticOracle(1, 3, n_dist=n, n_test=10, base_acc=0.6, effects=effects, background_sd=0.0, noise=0.0, seed=0)
    options = RacingOptions(first=100)
    ends = racing_schedule(n, options)
    cost = known_boundary_cost(oracle, 1, options)
    # L0H0 (breaks half the examples) stops at the first batch; the pool head and L0H2 (no effect, the
    # best outside the pool) are told apart only where their intervals separate
    assert ends[0] + 2 * ends[0] <= cost < 3 * n
    assert known_boundary_cost(oracle, 1, RacingOptions(first=100, margin=1.5)) == 3 * ends[0]  # any head may stop


def test_report_shows_each_case_against_its_limit_and_generation_against_its_bound():
    import copy
    import json

    from benchmarks.report import write_results

    rec = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    rec["figures"] = []
    limit_keys = ("limit_gflop", "hf_gflops", "matmul_gflops", "limit_s_hf", "limit_s_matmul", "limit_over_scan_hf",
                  "limit_over_scan_matmul")
    for case in rec["cases"]:  # a record from before the limit was measured
        for key in limit_keys:
            case.pop(key, None)
    for key in [k for k in rec["mbpp"] if k.startswith("gen_")]:
        rec["mbpp"].pop(key)
    old = write_results(copy.deepcopy(rec))
    assert "Not in this run's record" in old  # a record from before the limit: said so, no invented numbers
    for i, case in enumerate(rec["cases"]):
        case.update(limit_gflop=10.0, hf_gflops=50.0, matmul_gflops=80.0, limit_s_hf=0.2, limit_s_matmul=0.125,
                    limit_over_scan_hf=0.96 if i else 0.5, limit_over_scan_matmul=0.4)
    rec["mbpp"].update(gen_bound_gflop=5.0, gen_intact_gflop=2.0, gen_bound_cpu_s_hooked=100.0, gen_bound_cpu_s_bridge=1e9,
                       gen_tokens=999)
    text = write_results(rec)
    assert "| hooked/arith | 10.0 |" in text and "**0.50**" in text
    assert "missed: hooked/arith" in text  # 0.5 < 0.95
    ratio = rec["mbpp"]["cel_cpu_s_hooked"] / 100.0
    assert f"**{ratio:.2f}x** the bound" in text and "999 tokens generated" in text and "2.5 times the FLOPs" in text
    assert "generation within 1.3x its FLOP bound (issue 28) | hooked" in text


def test_rewriting_the_suite_report_keeps_the_other_benchmarks_sections():
    from benchmarks.report import with_sections

    old = "# old\n\n<!-- racing:start -->\nR\n<!-- racing:end -->\n\n<!-- smollm2-bridge:start -->\nS\n<!-- smollm2-bridge:end -->\n"
    new = with_sections("# new\n", old)
    assert new.startswith("# new\n") and "# old" not in new
    assert "<!-- racing:start -->\nR\n<!-- racing:end -->" in new and "<!-- smollm2-bridge:start -->\nS\n" in new
    assert with_sections("# new\n", "# old, nothing kept\n") == "# new\n"

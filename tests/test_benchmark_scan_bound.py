"""The bound below today's FLOP count (benchmarks/scan_bound.py), by hand, and the SmolLM2 speed
section rendered from a record."""

from __future__ import annotations

import pytest

from benchmarks.limit import Shape, head_flops, pieces, scan_count_flops
from benchmarks.scan_bound import head_bound_flops, matmul_peaks, scan_bound, shared_prefix
from benchmarks.smollm2_speed_report import render

S = Shape(n_layers=3, n_heads=2, n_kv_heads=1, d_model=4, d_head=2, d_mlp=6, d_vocab=10, gated=True)


def test_shared_prefix_keeps_a_token_of_each_context():
    assert shared_prefix([([1, 2, 3, 4], [[9]]), ([1, 2, 5], [[9]])]) == 2
    assert shared_prefix([([1, 2], [[9]]), ([1, 2, 3], [[9]])]) == 1  # the shorter context keeps its last token
    assert shared_prefix([([1, 2, 3], [[9]])]) == 0


def test_each_saving_by_hand():
    # the MLP input: two gated projections of (d_model - d_head) columns fewer per corrected position
    assert head_flops(S, 0, 5, 1) - head_bound_flops(S, 0, 5, 1, mlp_rank=True) == 5 * 2 * 2 * (4 - 2) * 6
    # the last layer corrects only the scored position; two scored columns instead of ten
    assert head_flops(S, 2, 5, 1) - head_bound_flops(S, 2, 5, 1, mlp_rank=True, columns=2) == 2 * 2 * 2 * 6 + 2 * 4 * 8


def test_the_bound_is_below_today_s_count_and_each_saving_is_counted_alone():
    plain = [([1, 2, 3, i], [[7]]) for i in range(4, 9)]  # exact match: no column saving
    rec = scan_bound(S, plain)
    assert rec["today_gflop"] * 1e9 == scan_count_flops(S, pieces(plain))
    assert rec["prefix_tokens"] == 3 and rec["prefix_saving"] > 1 and rec["columns_saving"] == 1
    assert rec["bound_gflop"] < min(rec["prefix_gflop"], rec["mlp_rank_gflop"])
    choices = [([5, i, 6], [[7], [8]]) for i in range(5)]  # single-token choices: two columns suffice
    assert scan_bound(S, choices)["columns_saving"] > 1


def test_matmul_peaks_measure_both_precisions():
    peaks = matmul_peaks(rows=64, d_in=32, d_out=48, reps=1)
    assert peaks["fp32_gflops"] > 0 and peaks["bf16_gflops"] > 0


def test_the_section_says_what_did_not_run():
    text = render({"arith": {"n_dist": 4, "heads": 6, "bf16_landed": False,
                             "float32": {"scan": {"cpu_s": 2.0, "wall_s": 3.0}}, "prescreen": [],
                             "finished": "now", "load_average": 1.0}})
    assert "column left to fill" in text and "BoolQ (D_dist from validation) | not run" in text
    assert "Not run in this record" in text


def test_a_plan_is_set_against_a_scan_only_on_the_same_cpu():
    """A plan timed on one CPU against a scan measured on another is a ratio of CPUs: not shown."""
    scan = {"n_dist": 4, "heads": 6, "bf16_landed": False, "float32": {"scan": {"cpu_s": 8.0, "wall_s": 9.0}},
            "prescreen": [], "finished": "now", "load_average": 1.0}
    plans = {"arith": {"n_dist": 4, "calibration_cpu_s": 1.0, "share": 1.0, "stage1_cpu_s": 10.0},
             "finished": "now", "load_average": 1.0}
    same = render({"arith": {**scan, "cpu": "A"}, "plans": {**plans, "cpu": "A"}})
    assert "| 10 (2.50) | 2.00 | 1.25 |" in same and "CPU A" in same
    other = render({"arith": {**scan, "cpu": "A"}, "plans": {**plans, "cpu": "B"}})
    assert "| 10 (2.50) | 2.00 | — (another CPU) |" in other
    unknown = render({"arith": scan, "plans": {**plans, "cpu": "A"}})
    assert "— (another CPU)" in unknown and "CPU not recorded" in unknown


def test_the_section_says_whether_its_parts_share_one_run_and_one_cpu():
    """"One run on one CPU" is computed from the parts' records; a part that recorded neither breaks it."""
    part = {"n_dist": 4, "heads": 6, "bf16_landed": False, "float32": {"scan": {"cpu_s": 8.0, "wall_s": 9.0}},
            "prescreen": [], "finished": "now", "load_average": 1.0}
    plans = {"arith": {"n_dist": 4, "calibration_cpu_s": 1.0, "share": 1.0, "stage1_cpu_s": 10.0},
             "finished": "now", "load_average": 1.0}
    one = render({"arith": {**part, "cpu": "A", "run": "r1"}, "plans": {**plans, "cpu": "A", "run": "r1"}})
    assert "Every part comes from one run of the command (started r1) on one CPU." in one
    two_runs = render({"arith": {**part, "cpu": "A", "run": "r1"}, "plans": {**plans, "cpu": "A", "run": "r2"}})
    assert "from 2 runs of the command on 1 CPUs" in two_runs and "Every part" not in two_runs
    resumed = {**part, "cpu": "A", "run": "r1", "float32": {**part["float32"], "chunks_resumed": 4}}
    assert "resumed from earlier processes on this CPU (each with the seconds measured when it ran): " \
           "arith float32: 4." in render({"arith": resumed})
    unrecorded = render({"arith": {**part, "cpu": "A", "run": "r1"}, "plans": plans})
    assert "from 2 runs of the command on 2 CPUs" in unrecorded


def test_the_suite_s_cases_carry_the_bound_at_both_peaks():
    from types import SimpleNamespace

    from benchmarks.bounds import limit_case

    cfg = {"num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 3, "num_key_value_heads": 1,
           "intermediate_size": 12, "vocab_size": 20, "hidden_act": "silu"}
    w = {"hf": SimpleNamespace(config=SimpleNamespace(to_dict=lambda: cfg)),
         "encoded": {"t": [([1, 2, 3, i], [[5], [6]]) for i in range(7, 11)]}}
    case = limit_case(w, "t", scan_cpu_s=1.0, hf_pass_cpu_s=0.01)
    assert case["bound_gflop"] < case["limit_gflop"] and case["bound_saving"] > 1
    assert case["bound_s_bf16"] < case["bound_s_fp32"] or w["peaks"]["bf16_gflops"] <= w["peaks"]["fp32_gflops"]

"""The benchmark's cases against today's FLOP count of their method (:mod:`benchmarks.limit`; formerly
"the FLOP limit"), from a workload's real token shapes: the exact scan of every head, and greedy
generation."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.floor import floor_layout, hf_pass_seconds
from benchmarks.generation import _cut
from benchmarks.scan_bound import matmul_peaks, scan_bound
from benchmarks.prefix import generation_flops_shared
from benchmarks.limit import (
    Shape, against_limit, generation_flops, matmul_flops_per_second, pieces, scan_intact_flops, scan_count_flops,
)

__all__ = ["limit_case", "generation_bound", "limit_caption", "adjacent_pass"]


def limit_case(w: dict[str, Any], task_key: str, scan_cpu_s: float, hf_pass_cpu_s: float) -> dict[str, float]:
    """The scan against today's FLOP count (:mod:`benchmarks.limit`), from the real token shapes, and
    the bound with the savings it leaves (:mod:`benchmarks.scan_bound`) at the float32 and bf16
    matmul peaks."""
    shape = Shape.from_hf_config(w["hf"].config.to_dict())
    parts = pieces(w["encoded"][task_key])
    if "matmul_rate" not in w:  # once per workload: a [512, d_model] x [d_model, d_mlp] product
        w["matmul_rate"] = matmul_flops_per_second(512, shape.d_model, shape.d_mlp)
    out = against_limit(scan_count_flops(shape, parts), scan_intact_flops(shape, parts), hf_pass_cpu_s, scan_cpu_s,
                        w["matmul_rate"])
    if "peaks" not in w:  # once per workload: the float32 and bf16 matmul peaks the bound is stated at
        w["peaks"] = matmul_peaks(d_in=shape.d_model, d_out=shape.d_mlp)
    bound = scan_bound(shape, w["encoded"][task_key])
    out.update(bound_gflop=bound["bound_gflop"], bound_saving=bound["bound_saving"],
               bound_s_fp32=bound["bound_gflop"] / w["peaks"]["fp32_gflops"],
               bound_s_bf16=bound["bound_gflop"] / w["peaks"]["bf16_gflops"])
    return out


def generation_bound(
    w: dict[str, Any], prompts: Sequence[Sequence[int]], cel: dict[str, Any], hf_out: Sequence[Sequence[int]],
    beside: Mapping[str, Sequence[float]],
) -> dict[str, Any]:
    """Generation's FLOP bound for cel_lens's scan, the prompts' common prefix counted once per
    evaluation (:func:`~benchmarks.prefix.generation_flops_shared`; ``gen_bound_unshared_gflop``:
    every prompt in full, :func:`~benchmarks.limit.generation_flops`), from
    the token ids each evaluation generated (generated again, untimed, by
    :func:`cel_lens.evaluation.generation.generate_variants` as the scan runs it; their texts must be
    the scan's), and the FLOPs of ``transformers``' intact ``generate`` producing ``hf_out``. In
    seconds per model type: ``gen_bound_gflop / gen_intact_gflop`` times that ``generate``'s CPU
    seconds timed beside its scans (``beside[kind]``, the minimum)."""
    from cel_lens.evaluation.generation import generate_variants
    from cel_lens.heads import Head, HeadSet, masks_from_head_sets

    model, task = w["models"]["hooked"], w["mbpp"]
    shape = Shape.from_hf_config(w["hf"].config.to_dict())
    L, H = shape.n_layers, shape.n_heads
    masks = masks_from_head_sets([HeadSet()] + [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)], L, H)
    stops = [list(task.dist.stop_strings(ex)) for ex in task.dist]
    ids = generate_variants(model, prompts, masks, max_new_tokens=w["mbpp_max_new"], stop=stops)
    tok = w["tokenizer"]
    texts = [[_cut(tok.decode(o, skip_special_tokens=True), st) for o, st in zip(row, stops)] for row in ids]
    lengths = [len(p) for p in prompts]
    out = {"gen_bound_gflop": generation_flops_shared(shape, prompts, ids)[1] / 1e9,  # the shared prompt start once
           "gen_bound_unshared_gflop": generation_flops(shape, lengths, ids)[1] / 1e9,
           "gen_intact_gflop": generation_flops(shape, lengths, [list(hf_out)])[0] / 1e9,
           "gen_tokens": sum(len(o) for row in ids for o in row), "gen_ids_match_texts": texts == cel["completions"]}
    for kind, times in beside.items():
        out[f"gen_hf_cpu_s_{kind}"] = min(times)
        out[f"gen_bound_cpu_s_{kind}"] = out["gen_bound_gflop"] / out["gen_intact_gflop"] * min(times)
    return out


def limit_caption(case: dict[str, Any]) -> str:
    """The scaling figure's caption from one case's record (its floor and today's FLOP count, this run's numbers)."""
    text = ("Floor (red): N (L+1)/(2L) of cel_lens's own intact passes, each head charged every full layer from its own "
            f"up. Against the fastest transformers pass the scan's efficiency (floor / scan) is {case['efficiency_hf']:.2f}.")
    if "limit_gflop" in case:
        text += ("<br>Today's FLOP count (benchmarks/limit.py: shared attention and a rank-d_head correction at the ablated layer, "
                 f"the last layer at scored positions only): {case['limit_gflop']:.1f} GFLOP for all {case['n_heads']} heads;"
                 f"<br>{case['limit_s_hf']:.1f} s at transformers' throughput (count / scan {case['limit_over_scan_hf']:.2f}), "
                 f"{case['limit_s_matmul']:.1f} s at the matmul peak ({case['limit_over_scan_matmul']:.2f}); "
                 f"the scan: {case['cel_cpu_s']:.1f} CPU s.")
    return text


def adjacent_pass(w: dict[str, Any], task_key: str) -> float:
    """CPU seconds of the floor's fastest ``transformers`` pass (the layout chosen at the start), timed
    again now (the faster of two): beside each scan repetition, so that the floor and the limit are
    converted at the machine's speed while the scan ran (a shared machine drifts by 10 % over a run)."""
    layout = floor_layout(w["floors"][task_key]["best"])
    return min(hf_pass_seconds(w["hf"], w["encoded"][task_key], pad=w["tokenizer"].pad_token_id, **layout) for _ in range(2))

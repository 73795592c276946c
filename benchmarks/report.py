"""``benchmarks/RESULTS.md`` from one run's record (``benchmarks/results.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.bounds import limit_caption
from benchmarks.scaling import fit_line
from benchmarks.scan import GPU_JSON

__all__ = ["print_rows", "write_results", "with_sections", "write_report"]

KINDS = {"hooked": "HookedTransformer", "bridge": "TransformerBridge"}


def _x(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}x"


def _s(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def print_rows(rec: dict[str, Any]) -> None:
    """One line per case on stdout."""
    for r in rec["cases"]:
        print(f"{r['key']:18s} scan {r['cel_cpu_s']:7.2f} s  floor {r['floor_cpu_s']:7.2f} s  eff {r['efficiency_hf']:.2f} "
              f"(own {r['efficiency_own']:.2f})  lm-eval {_x(r.get('ratio_lmeval'))}  TL loop {_x(r.get('ratio_naive'))}  "
              f"identical {r['identical']}" + (f"  limit/scan {r['limit_over_scan_hf']:.2f}" if "limit_over_scan_hf" in r else ""))
    m = rec.get("mbpp")
    if m:
        print(f"{'mbpp':18s} " + "  ".join(f"{k} {m[f'cel_cpu_s_{k}']:.1f} s ({_x(m[f'ratio_naive_{k}'])} naive, "
                                            f"eff {m[f'efficiency_hf_{k}']:.2f})" for k in KINDS if f"cel_cpu_s_{k}" in m)
              + f"  texts identical {m['identical']}"
              + "".join(f"  {k} bound {m[f'gen_bound_cpu_s_{k}']:.1f} s" for k in KINDS if f"gen_bound_cpu_s_{k}" in m)
              + (f" (its texts the scan's: {m['gen_ids_match_texts']})" if "gen_ids_match_texts" in m else ""))


def _summary(rec: dict[str, Any]) -> list[str]:
    out = [
        "| model type | task | \\|D_dist\\| | positions real / computed | cel_lens scan, CPU s (wall) | floor, CPU s "
        "| efficiency vs floor | efficiency vs own pass | lm-eval loop, CPU s | vs lm-eval | TL loop, CPU s | vs TL loop "
        "| decisions identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["cases"]:
        lm = f"{r['lmeval_cpu_s']:.1f}*" if "lmeval_cpu_s" in r else "n/a"
        if "lmeval_own_cpu_s" in r:  # own process, then with its child processes
            lm = f"{r['lmeval_own_cpu_s']:.1f}* own / {lm} with children"
        tl = f"{r['naive_cpu_s']:.1f}*" if "naive_cpu_s" in r else "n/a"
        checked = []
        if "naive_heads" in r:
            checked.append(f"TL {r['naive_heads']} heads")
        if "lmeval_heads" in r:
            checked.append(f"lm-eval {r['lmeval_heads']} heads")
        out.append(
            f"| {KINDS[r['kind']]} | {r['task_label']} | {r['n_dist']} | {r['tokens_real']} / {r.get('tokens_computed', r.get('tokens_padded'))} "
            f"| {r['cel_cpu_s']:.1f} ({r['cel_wall_s']:.1f}) | {r['floor_cpu_s']:.1f} | **{r['efficiency_hf']:.2f}** "
            f"| {r['efficiency_own']:.2f} | {lm} | **{_x(r.get('ratio_lmeval_own', r.get('ratio_lmeval')))}** own / {_x(r.get('ratio_lmeval'))} with children | {tl} | {_x(r.get('ratio_naive'))} "
            f"| {'yes' if r['identical'] else 'NO'} (+ intact; {', '.join(checked) or 'no loop'}) |"
        )
    return out


def _goals(rec: dict[str, Any]) -> list[str]:
    rows = rec["cases"]
    out = ["| goal | measured | |", "|---|---|---|"]
    eff = [(r["key"], r["efficiency_hf"]) for r in rows]
    out.append("| exact scan >= 0.8 of the transformers floor (CPU) | " + ", ".join(f"{k} {e:.2f}" for k, e in eff)
               + f" | {'met' if all(e >= 0.8 for _, e in eff) else 'missed: ' + ', '.join(k for k, e in eff if e < 0.8)} |")
    for task in ("boolq", "arith"):
        rs = [r for r in rows if r["task"] == task and "ratio_lmeval" in r]
        if rs:
            out.append(f"| >= 3x the lm-eval loop, {task} | " + ", ".join(f"{r['kind']} {r['ratio_lmeval']:.1f}x" for r in rs)
                       + f" | {'met' if all(r['ratio_lmeval'] >= 3 for r in rs) else 'missed'} |")
    m = rec.get("mbpp")
    if m:
        ks = [k for k in KINDS if f"ratio_naive_{k}" in m]
        out.append("| MBPP generation scan >= 3x the naive loop | " + ", ".join(f"{k} {m[f'ratio_naive_{k}']:.1f}x" for k in ks)
                   + f" | {'met' if all(m[f'ratio_naive_{k}'] >= 3 for k in ks) else 'missed'} |")
        out.append(f"| identical MBPP text and pass@1 | {'yes' if m['identical'] else 'NO'} | "
                   f"{'met' if m['identical'] else 'missed'} |")
    lim = [(r["key"], r["limit_over_scan_hf"]) for r in rows if "limit_over_scan_hf" in r]
    if lim:
        out.append("| exact scan >= 0.95 of today's FLOP count at `transformers` throughput (issue 28) | "
                   + ", ".join(f"{k} {v:.2f}" for k, v in lim)
                   + f" | {'met' if all(v >= 0.95 for _, v in lim) else 'missed: ' + ', '.join(k for k, v in lim if v < 0.95)} |")
    over = _over_generation_bound(m or {})
    if over:
        out.append("| generation within 1.3x its FLOP bound (issue 28) | " + ", ".join(f"{k} {v:.2f}x" for k, v in over.items())
                   + f" | {'met' if all(v <= 1.3 for v in over.values()) else 'missed'} |")
    same = all(r["identical"] for r in rows)
    out.append(f"| identical per-head decisions (cel_lens vs lm-eval vs TL loop) | {'yes' if same else 'NO'} | "
               f"{'met' if same else 'missed'} |")
    return out


def _over_generation_bound(m: dict[str, Any]) -> dict[str, float]:
    """Each model type's generation scan over its FLOP bound, for the types the MBPP record has both for."""
    return {k: m[f"cel_cpu_s_{k}"] / m[f"gen_bound_cpu_s_{k}"] for k in KINDS
            if f"gen_bound_cpu_s_{k}" in m and f"cel_cpu_s_{k}" in m}


def _span(values: Optional[Sequence[float]], digits: int = 1) -> str:
    """``lo-hi`` of a list of timings (``n/a`` when the record has none)."""
    if not values:
        return "n/a"
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def _limit(rec: dict[str, Any]) -> list[str]:
    """Each case against today's FLOP count (:mod:`benchmarks.limit`) and generation against its bound."""
    rows = [r for r in rec["cases"] if "limit_gflop" in r]
    if not rows:
        return ["Not in this run's record (it predates `benchmarks/limit.py`)."]
    out = [
        "**Today's FLOP count** (formerly called the FLOP limit) is what cel_lens's exact scan computes now, counted "
        "from the real token shapes (`benchmarks/limit.py`); it is a count of today's method, not a limit on the work "
        "(the bound with the savings it leaves, at the float32 and bf16 matmul peaks, is in the SmolLM2 speed section, "
        "`benchmarks/scan_bound.py`): the intact pass once; per head the ablated layer's shared attention plus a rank-d_head "
        "correction, that layer's MLP, the layers above in full, the last layer only at scored positions (apart from "
        "its keys and values), a multiple-choice context once. It is converted to seconds at two throughputs measured "
        "in this run: the plain `transformers` intact pass's (its FLOPs over its CPU seconds) and a plain single-thread "
        "matmul's (the float32 peak). **count / scan**: 1 is at the count; 0.8 means the scan takes 1.25x the count. The "
        "scan is the median of its repetitions, the `transformers` pass the fastest of those timed beside them; both "
        "ranges are shown, since on a shared machine one pass can run 15 % faster than the next.",
        "",
        "| case | today's count, GFLOP | scan, CPU s (range) | `transformers` pass beside, s (range) | `transformers` GFLOP/s "
        "| count there, s | **count / scan** | matmul GFLOP/s | count there, s | count / scan |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(f"| {r['key']} | {r['limit_gflop']:.1f} | {r['cel_cpu_s']:.1f} ({_span(r.get('cel_cpu_runs'))}) "
                   f"| {_span(r.get('hf_pass_beside_cpu_s'), 2)} | {r['hf_gflops']:.1f} | {r['limit_s_hf']:.1f} "
                   f"| **{r['limit_over_scan_hf']:.2f}** | {r['matmul_gflops']:.1f} | {r['limit_s_matmul']:.1f} "
                   f"| {r['limit_over_scan_matmul']:.2f} |")
    bounded = [r for r in rows if "bound_gflop" in r]
    if bounded:
        out += ["", "The bound below today's count (`benchmarks/scan_bound.py`: the shared prompt start once per variant, "
                "the ablated layer's MLP input as a rank-d_head correction, only the scored columns of single-token "
                "choices), at the float32 and bf16 matmul peaks: "
                + "; ".join(f"{r['key']} {r['bound_gflop']:.1f} GFLOP ({r['bound_saving']:.2f}x below the count), "
                            f"{r['bound_s_fp32']:.1f} s / {r['bound_s_bf16']:.1f} s" for r in bounded) + "."]
    m = rec.get("mbpp") or {}
    over = _over_generation_bound(m)
    if over:
        same = {True: "", False: " (**their texts differ from the scan's: the bound is not of this scan**)"}[m.get("gen_ids_match_texts", True)]
        out += ["", f"Generation (MBPP, {m['gen_tokens']} tokens generated over all evaluations{same}): the FLOP bound "
                f"(`generation_flops`: each evaluation's prefill and one step per generated token, an ablated one resumed "
                f"from its head's layer while its text is the intact one's) is {m['gen_bound_gflop']:.1f} GFLOP, "
                f"{m['gen_bound_gflop'] / m['gen_intact_gflop']:.1f} times the FLOPs of `transformers`' intact `generate`; "
                "in seconds at that `generate`'s speed, timed twice beside each scan (the fastest counts): "
                + ", ".join(f"{KINDS[k]} bound {m[f'gen_bound_cpu_s_{k}']:.1f} s, scan {m[f'cel_cpu_s_{k}']:.1f} s = "
                            f"**{x:.2f}x** the bound" for k, x in over.items()) + "."]
    return out


def _forward(rec: dict[str, Any]) -> list[str]:
    fw = rec.get("forward") or {}
    if not fw:
        return []
    cols = list(next(iter(fw.values())))
    out = ["| task | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for key, row in fw.items():
        out.append(f"| {key} | " + " | ".join(f"{row[c]:.2f}" for c in cols) + " |")
    scans = {r["key"]: r["cel_cpu_s"] for r in rec["cases"]}
    out += ["", "Scans (CPU s, the table above): " + ", ".join(
        f"{t}: HookedTransformer {scans[f'hooked/{t}']:.1f}, TransformerBridge {scans[f'bridge/{t}']:.1f}"
        for t in fw if f"hooked/{t}" in scans and f"bridge/{t}" in scans) + "."]
    own = rec.get("own_forward_scans")
    if own:
        a = {k: scans.get(f"{k}/arith") for k in own}
        out += ["", "Arithmetic scan on each model's own forward (fused attention off): " + ", ".join(
            f"{KINDS[k]} {v:.1f} s (stack: {a[k]:.1f} s)" for k, v in own.items() if a[k]) + "."]
    return out


def _mbpp(rec: dict[str, Any]) -> list[str]:
    m = rec.get("mbpp")
    if not m:
        return []
    out = [
        f"MBPP D_dist: {m['n_dist']} problems (3-shot prompts of {min(m['prompt_tokens'])}-{max(m['prompt_tokens'])} "
        f"tokens), up to {m['max_new_tokens']} new tokens, all {m['n_heads']} heads + intact.",
        "",
        "| model type | cel_lens scan, CPU s | naive TL generate loop, CPU s | vs naive | transformers generate floor, CPU s "
        "| efficiency vs floor | intact pass@1 | distinct completions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in KINDS:
        if f"cel_cpu_s_{k}" in m:
            out.append(f"| {KINDS[k]} | {m[f'cel_cpu_s_{k}']:.1f} | {m['naive_cpu_s']:.1f}* | **{m[f'ratio_naive_{k}']:.1f}x** "
                       f"| {m['floor_cpu_s']:.1f} | {m[f'efficiency_hf_{k}']:.2f} | {m[f'pass_at_1_{k}']:.2f} "
                       f"| {m[f'completions_distinct_{k}']} |")
    out += ["", f"Texts and pass@1 identical to the naive loop's on the intact model and {m['naive_heads']} heads: "
            f"{'yes' if m['identical'] else 'NO: ' + '; '.join(m['mismatches'])}. `*` extrapolated: "
            f"{m['naive_eval_cpu_s']:.2f} s per evaluation x {m['n_heads'] + 1}."]
    return out


def _extras(rec: dict[str, Any]) -> list[str]:
    out = []
    prof = rec.get("profile")
    if prof:
        out += [f"## Where the scan spends its time (HookedTransformer, Arithmetic, one profiled run, {prof['wall_s']:.1f} CPU s "
                "under the profiler)", "", "| part | seconds | share |", "|---|---|---|"]
        total = sum(prof["groups"].values())
        for g, s in sorted(prof["groups"].items(), key=lambda kv: -kv[1]):
            out.append(f"| {g} | {s:.2f} | {100 * s / total:.0f}% |")
        out += ["", "Top ops by self CPU time: " + ", ".join(f"`{k}` {s:.2f} s ({c} calls)" for k, s, c in prof["top"]), ""]
    scale = rec.get("scaling")
    if scale:
        a1, b1, r1 = fit_line([(p[0], p[2]) for p in scale["by_heads"]])
        a2, b2, r2 = fit_line([(p[0], p[2]) for p in scale["by_n"]])
        out += ["## Scaling (HookedTransformer, Arithmetic)", "", "| heads scanned | CPU s | wall s |", "|---|---|---|",
                *[f"| {n} | {c:.2f} | {w:.2f} |" for n, w, c in sorted(scale["by_heads"])], "",
                f"Least squares (CPU): {a1:.2f} s + {b1 * 1000:.0f} ms x heads, R^2 = {r1:.3f}.", "",
                "| \\|D_dist\\| | CPU s | wall s |", "|---|---|---|",
                *[f"| {n} | {c:.2f} | {w:.2f} |" for n, w, c in sorted(scale["by_n"])], "",
                f"Least squares (CPU): {a2:.2f} s + {b2 * 1000:.0f} ms x examples, R^2 = {r2:.3f}.", ""]
        if any(str(p).endswith(".png") for p in rec.get("figures", [])):
            r = next((c for c in rec["cases"] if c["key"] == "hooked/arith"), None)
            caption = limit_caption(r).replace("<br>", " ") if r else ""
            out += ["![scaling](../figures/bench_scaling.png)", "", caption, ""]
    return out


def _gpu() -> list[str]:

    out = ["## GPU (H200)", ""]
    if not GPU_JSON.is_file():
        return out + ["Not run here (no GPU on this machine): on a GPU, `python -m benchmarks.gpu_scan --results` "
                      "measures a stage-1 scan at Llama-3.2-3B's real shape, saves `benchmarks/gpu_scan.json` and "
                      "rewrites these rows (with its FLOP rate against the bf16 peak and the paper plan's hours at "
                      "that rate).", ""]
    g = json.loads(GPU_JSON.read_text())
    out.append(f"`benchmarks/gpu_scan.py` on {g.get('device')}, {g.get('dtype')}, shape {g.get('shape')}:")
    out += ["", "```json", json.dumps(g, indent=1), "```", ""]
    return out


def write_results(rec: dict[str, Any]) -> str:
    """The Markdown report of one run."""
    cfg, m = rec["config"], rec["machine"]
    after = rec.get("machine_after", m)
    lines = [
        "# Benchmarks: cel_lens's stage-1 scans against the floor, the lm-eval loop and the TransformerLens loop",
        "",
        f"Written by `{' '.join(['python -m benchmarks.run', *cfg.get('argv', [])])}` on {cfg['date']} in "
        f"{cfg['total_s'] / 60:.1f} min. Raw numbers: `benchmarks/results.json`.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores, {m['memory_bytes'] / 2**20:.0f} MiB RAM; {m['platform']}",
        f"- torch {m['torch']}, {cfg['threads']} thread; Python {m['python']}, transformer_lens {m['transformer_lens']}, "
        f"transformers {m['transformers']}",
        f"- load average at start {tuple(round(x, 2) for x in m['loadavg'])}, at end "
        f"{tuple(round(x, 2) for x in after['loadavg'])}: other processes shared the two cores, so every comparison is in "
        "CPU seconds of this process (wall seconds carry the load)",
        "",
        "## What is compared",
        "",
        f"- **Model**: {cfg['model']} (`benchmarks/workload.py`), one Hugging Face checkpoint read by all: cel_lens on a "
        "HookedTransformer and on a TransformerBridge, `transformers`, lm-evaluation-harness, TransformerLens.",
        "- **Tasks**: Arithmetic from the offline GPT-3 files (targets replaced by the model's own greedy answers so "
        "that heads move decisions); BoolQ from the real validation file, real prompt lengths, no length filter; a "
        "HellaSwag-shaped workload (real HellaSwag is not offline: contexts of 25-110 words and four endings of 8-35 "
        "words of real BoolQ passage text, acc_norm); MBPP's 3-shot prompts for generation.",
        "- **cel_lens**: `exact_scores(LocalOracle(model, task, batch_size=8, store_budget=256 MiB))`, the activation "
        "store built inside the timed region; every head resumed from its layer, variants sharing rows up to it, on the "
        "fused-attention stack (`cel_lens/model/stack.py`).",
        "- **Floor**: `(1 + N (L+1)/(2L))` x the fastest intact `transformers` pass over the same token ids (SDPA; "
        "sorted, bucketed by a token budget with <= 2 % or <= 10 % padding, or one example per batch; scored positions unembedded; "
        "a multiple-choice context once, its endings after a key/value cache) (`benchmarks/floor.py`); the fastest layout "
        "is chosen at the start and its pass timed again twice beside each scan repetition (the minimum counts), so the floor "
        "and today's FLOP count are converted at the machine's speed while the scan ran. **Efficiency** = "
        "floor / scan (> 1: the scan does less than that many passes, e.g. the last layer only at scored positions). "
        "Also against cel_lens's own intact pass at the scan's forward shapes.",
        "- **lm-eval loop**: lm-evaluation-harness's `HFLM` (batch 8) over a local task config of the same examples, one "
        "`simple_evaluate` per head, the head ablated by a pre-hook zeroing its `o_proj` input columns "
        "(`benchmarks/lm_eval_loop.py`). **TL loop**: TransformerLens `run_with_hooks`, one head at a time, batch 8, "
        "greedy generation for Arithmetic, one row per choice for multiple choice (`benchmarks/naive.py`).",
        f"- `*` the loops ran the intact model and a few heads (evenly spaced layers); their totals are the median per "
        f"call x (N + 1): a loop's cost per head does not depend on the head. Scans: median of {cfg['reps']} runs.",
        "",
        "## Results",
        "",
        *_summary(rec),
        "",
        "## Goals (issues 16 and 28)",
        "",
        *_goals(rec),
        "",
        "## Against today's FLOP count (formerly \"the FLOP limit\")",
        "",
        *_limit(rec),
        "",
        "## One intact pass, CPU s (HookedTransformer vs TransformerBridge, stack vs own forward)",
        "",
        *_forward(rec),
        "",
        "## Generation (MBPP)",
        "",
        *_mbpp(rec),
        "",
        *_extras(rec),
        "## Notes",
        "",
    ]
    for r in rec["cases"]:
        lines.append(f"- {r['key']}: {r['n_batches']} batches ({r['layout']} layout), {r['variants_per_forward']} variants "
                     f"per forward, store layers {r['store_layers']} ({r['store_bytes'] / 2**20:.1f} MiB); intact accuracy "
                     f"{r['intact_acc']:.3f}, gains {r['gains_min']:+.3f} to {r['gains_max']:+.3f} "
                     f"({r['gains_distinct']} distinct); floor pass {r['hf_best']}"
                     + (f"; MISMATCHES: {'; '.join(r['mismatches'])}" if r["mismatches"] else ""))
    lines += ["", *_gpu()]
    return "\n".join(lines)


def with_sections(new: str, old: str) -> str:
    """``new`` followed by the sections other benchmarks wrote into ``old`` (between ``<!-- key:start -->``
    and ``<!-- key:end -->``: racing, SmolLM2, ...), so that rewriting the suite's report keeps them."""
    blocks = [m.group(0) for m in re.finditer(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", old, flags=re.S)]
    return new.rstrip("\n") + "\n" + "".join(f"\n{b}\n" for b in blocks) if blocks else new


def write_report(rec: dict[str, Any], path: Path) -> None:
    """``path`` (RESULTS.md) from ``rec``, keeping the sections other benchmarks wrote into it."""
    path.write_text(with_sections(write_results(rec), path.read_text() if path.exists() else ""))

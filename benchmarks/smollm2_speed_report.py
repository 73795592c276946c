"""The RESULTS.md section of :mod:`benchmarks.smollm2_speed`, from its record alone (no model)."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]

TITLE = "## SmolLM2-135M-Instruct at real sizes on a CPU (`python -m benchmarks.smollm2_speed`)"


def _s(x: Any, d: int = 1) -> str:
    return "—" if x is None else f"{x:.{d}f}"


def _stage1(rec: dict[str, Any]) -> list[str]:
    out = ["### Exact stage 1, float32 and bf16", "",
           "| task | D_dist | float32 CPU s (wall) | bf16 CPU s (wall) | float32 / bf16 | decisions compared | differing "
           "| share recomputed in float32 |", "|---|---|---|---|---|---|---|---|"]
    for key, label in (("arith", "Arithmetic"), ("boolq", "BoolQ (D_dist from validation)")):
        r = rec.get(key)
        if r is None:
            out.append(f"| {label} | not run | | | | | | |")
            continue
        f = r["float32"]["scan"]
        b = r.get("bf16")
        if b is None:
            why = "precision not in git history at this run: column left to fill" if not r.get("bf16_landed") else "not run"
            out.append(f"| {label} | {r['n_dist']} | {f['cpu_s']:.1f} ({f['wall_s']:.0f}) | {why} | | | | |")
            continue
        share = "; ".join(f"{k}: {v['share']:.1%} of {v['decisions']:,}{_pair_check(v)}" for k, v in (b.get("recompute") or {}).items())
        out.append(f"| {label} | {r['n_dist']} | {f['cpu_s']:.1f} ({f['wall_s']:.0f}) | {b['scan']['cpu_s']:.1f} "
                   f"({b['scan']['wall_s']:.0f}) | {f['cpu_s'] / b['scan']['cpu_s']:.2f}x | {b['decisions']:,} "
                   f"| {b['differing']} | {share or '—'} |")
    return out + [""]


def _bound(rec: dict[str, Any]) -> list[str]:
    out = ["### Today's FLOP count and the bound (`benchmarks/scan_bound.py`)", "",
           "**Today's count** is what cel_lens's exact scan computes now (`benchmarks/limit.py`, formerly called the "
           "FLOP limit); the **bound** also skips the shared prompt start (once per variant), the ablated layer's MLP "
           "input beyond a rank-d_head correction, and all but the scored unembedding columns of single-token choices. "
           "Seconds at one thread's matmul peak (a [512, d_model] x [d_model, d_mlp] product, CPU time) in float32 and "
           "bf16; the measured float32 scan beside them.", "",
           "| task | mean tokens (shared prefix) | today, GFLOP | prefix | MLP rank | columns | bound, GFLOP (saving) "
           "| fp32 / bf16 peak, GFLOP/s | today at fp32 / bf16 peak, s | bound at fp32 / bf16 peak, s | scan, CPU s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, label in (("arith", "Arithmetic"), ("boolq", "BoolQ")):
        b = (rec.get(key) or {}).get("bound")
        if b is None:
            continue
        out.append(f"| {label} | {b['mean_tokens']:.1f} ({b['prefix_tokens']}) | {b['today_gflop']:.0f} "
                   f"| {b['prefix_saving']:.2f}x | {b['mlp_rank_saving']:.3f}x | {b['columns_saving']:.3f}x "
                   f"| {b['bound_gflop']:.0f} ({b['bound_saving']:.2f}x) | {b['fp32_gflops']:.0f} / {b['bf16_gflops']:.0f} "
                   f"| {b['today_s_fp32']:.1f} / {b['today_s_bf16']:.1f} | {b['bound_s_fp32']:.1f} / {b['bound_s_bf16']:.1f} "
                   f"| {b['scan_cpu_s']:.1f} |")
    return out + [""]


def _prescreen(rec: dict[str, Any]) -> list[str]:
    out = ["### The pre-screen (`--scorer prescreen`): recall of exact's pool and cost", "",
           "Recall: the share of exact stage 1's pool (6 or 12 heads) among the heads the first pass keeps (then the "
           "pre-screen's pool is exact's). Cost: the first pass's CPU s plus the kept heads' share of the measured "
           "exact scan (weighted by the layers each head's pass runs); saving = exact scan / that. The subsample "
           "pass reads the full scan's decisions at the subsample's positions (the decisions a subsample scan makes) "
           "and is charged that share of the scan.", "",
           "| model | first pass | kept | recall, pool 6 | recall, pool 12 | saving | exact-pool heads screened out (pool 12) |",
           "|---|---|---|---|---|---|---|"]
    worst = []
    for key, label in (("arith", "SmolLM2 Arithmetic"), ("boolq", "SmolLM2 BoolQ")):
        for r in (rec.get(key) or {}).get("prescreen", []):
            worst.append((r["first"], r["keep"], min(r["recall_6"], r["recall_12"])))
            out.append(f"| {label} (n {rec[key]['n_dist']}) | {r['first']} | {r['kept']} ({r['keep']:.0%}) "
                       f"| {r['recall_6']:.2f} | {r['recall_12']:.2f} | {r['saving']:.2f}x | {', '.join(r['missed_12']) or '—'} |")
    for r in (rec.get("planted") or {}).get("rows", []):
        worst.append((r["first"], r["keep"], min(r["recall_6"], r["recall_12"])))
        out.append(f"| planted tiny ({r['model']}) | {r['first']} | {r['kept']} ({r['keep']:.0%}) | {r['recall_6']:.2f} "
                   f"| {r['recall_12']:.2f} | — | pool equal to exact's: {r['pool_equal_12']} |")
    if worst:
        by = {}
        for first, keep, r in worst:
            key = (first.split()[0], keep)
            by[key] = min(by.get(key, 1.0), r)
        best = [k for k, v in by.items() if v >= 0.95]
        out += ["", "Lowest recall per (first pass, kept fraction) over every measured case: "
                + "; ".join(f"{f} {k:.0%}: {v:.2f}" for (f, k), v in sorted(by.items()))
                + (". Recall >= 0.95 in every case for: " + ", ".join(f"{f} {k:.0%}" for f, k in best) if best
                   else ". No setting reached recall >= 0.95 in every case: the pre-screen stays an option, not the default.")]
    return out + [""]


def _plans(rec: dict[str, Any]) -> list[str]:
    p = rec.get("plans")
    if p is None:
        return []
    out = ["### `cl.plan` at issue 35's sizes (float32, exact stage 1)", "",
           "Its calibration (`cl.plan`'s default: the intact model, every head of two layers and three heads apart, "
           "on the first 32 D_dist examples; fewer heads where its 45 CPU s budget says so, as on BoolQ) and its stage-1 "
           "estimate per D_dist example, against the measured float32 scan's per example (its D_dist is the first "
           "examples of the same seeded split, so their prompt lengths differ somewhat). The ratio is given only where "
           "the plan and the scan ran on the same CPU (a part's CPU is in the list above; not recorded: unknown).", "",
           "| task | plan's D_dist | calibration, CPU s | CPU share measured | stage 1 estimate, CPU s (per example) "
           "| measured scan per example, CPU s | estimate / measured |", "|---|---|---|---|---|---|---|"]
    for key, label in (("arith", "Arithmetic"), ("boolq", "BoolQ (validation)")):
        r = p.get(key)
        if r is None:
            continue
        per = r["stage1_cpu_s"] / r["n_dist"]
        m = rec.get(key)
        measured = m["float32"]["scan"]["cpu_s"] / m["n_dist"] if m else None
        same_cpu = m is not None and m.get("cpu") is not None and m.get("cpu") == p.get("cpu")
        ratio = f"{per / measured:.2f}" if measured and same_cpu else ("—" if not measured else "— (another CPU)")
        out.append(f"| {label} | {r['n_dist']} | {_s(r['calibration_cpu_s'])} | {_s(r['share'], 2)} "
                   f"| {r['stage1_cpu_s']:.0f} ({per:.2f}) | {_s(measured, 2)} | {ratio} |")
    return out + [""]


def _pair_check(tally: dict[str, Any]) -> str:
    """The one-token choice bound's check, where the tally has one (``cel_lens.evaluation.precision.pair_check``)."""
    c = tally.get("pair_check")
    if not c:
        return ""
    return (f" (pair check: {c['observed']:,} recomputed decisions observed, largest change {c['largest_change']:.2f} "
            f"against the bound {c['bound']}; {c['widened']:,} recomputed because an evaluation could not confirm it)")


def _quick_precision(p: Any) -> str:
    """What the search computed in, from its manifest's ``precision`` entry (a record made before
    the entry was read from the manifest holds a string that was not resolved for the task)."""
    if not isinstance(p, dict) or "compute" not in p:
        return "precision not recorded from the search (an earlier record)"
    dist = p.get("recomputed", {}).get("dist", {})
    share = f", {dist['share']:.1%} of its {dist['decisions']:,} D_dist decisions recomputed in float32" if dist else ""
    return f"precision {p['compute']} (option {p.get('option')}, the default{share})"


def _quick(rec: dict[str, Any]) -> list[str]:
    q = rec.get("quick")
    if q is None:
        return ["### `--quick` search on Arithmetic (exact stage 1)", "", "Not run in this record.", ""]
    o = q["options"]
    s = q["search"]
    return ["### `--quick` search on Arithmetic (exact stage 1) against its `--plan`", "",
            f"Options {', '.join(f'{k} {v}' for k, v in o.items())}; {_quick_precision(q.get('precision'))}; "
            + (f"{q['threads']} torch thread(s), as `cel-lens search` takes them on this machine. " if "threads" in q
               else "one torch thread (this earlier record's benchmark set it). ") +
            "The plan's calibration cost "
            f"{_s(q['plan_calibration_cpu_s'])} CPU s ({q['plan_cost']['cpu_s']:.1f} CPU s with loading the task); "
            f"S-hat {q['heads']}.", "",
            "| quantity | CPU s | wall s |", "|---|---|---|",
            f"| `--plan` estimate (CPU share measured {_s(q['plan_share'], 2)}) | {_s(q['plan_cpu_s'])} | {_s(q['plan_wall_s'])} |",
            f"| search, measured end to end | {s['cpu_s']:.1f} | {s['wall_s']:.1f} |",
            f"| plan / measured | {q['plan_cpu_s'] / s['cpu_s']:.2f} | {q['plan_wall_s'] / s['wall_s']:.2f} |", "",
            "The plan counts forward passes (head set x example evaluations) only; the search's other CPU work "
            "(statistics, the run directory) is not in it, and its wall estimate holds only while the machine's load "
            "stays what it was when the plan measured its CPU share.", "", _quick_goals(q), ""]


def _quick_goals(q: dict[str, Any]) -> str:
    """Issue 35's two goals for this search, each computed: the plan within 25 % of the measured
    CPU and wall time, and the search within 15 minutes of wall time (on an idle two-core machine:
    the record's load average says how idle it was)."""
    s = q["search"]
    cpu, wall = q["plan_cpu_s"] / s["cpu_s"], q["plan_wall_s"] / s["wall_s"]
    within = "within" if all(0.75 <= r <= 1.25 for r in (cpu, wall)) else "not within"
    minutes = s["wall_s"] / 60
    goal = "met" if minutes <= 15 else "not met"
    return (f"Goals: the plan is {within} 25 % of the measured time (CPU {cpu:.2f}, wall {wall:.2f}); the search took "
            f"{minutes:.1f} min of wall time against the 15-minute goal: {goal} (load average {q.get('load_average', float('nan')):.1f} "
            f"when the part ended; at {q['options'].get('n_dist')} / {q['options'].get('n_test')} examples).")


def _prefix(rec: dict[str, Any]) -> list[str]:
    p, q = rec.get("prefix"), rec.get("prompt_prefix")
    if p is None and q is None:
        return []
    out = ["### The shared prompt start, once per variant", ""]
    if q is not None:
        out += ["Counted (FLOPs of a stage-1 scan's prompt passes, `benchmarks/scan_bound.py`, token ids only): "
                + "; ".join(f"{k}: {v['prefix_tokens']} shared tokens of {v['mean_tokens']:.0f} on average over {v['n']} "
                            f"D_dist prompts, {v['prefix_saving']:.2f}x" for k, v in q.items() if isinstance(v, dict)
                            and "prefix_saving" in v) + ".", ""]
    if p is None:
        return out
    out += ["Measured (`benchmarks.prefix.measure`: a stage-1-like scan with and without sharing, float32):", ""]
    if "missing" in p:
        return out + [p["missing"], ""]
    out += ["| prompts | examples x variants | shared tokens | unshared CPU s (wall) | shared CPU s (wall) | saving "
            "| decisions identical |", "|---|---|---|---|---|---|---|"]
    for key in ("arithmetic", "mbpp"):
        r = p["result"].get(key)
        if not r:
            continue
        shared = r.get("prefix_tokens")
        shared = max(shared) if isinstance(shared, list) and shared else shared
        out.append(f"| {key} | {r['n_examples']} x {r['n_variants']} | {shared} | {r['cpu_s_unshared']:.1f} "
                   f"({r['wall_s_unshared']:.0f}) | {r['cpu_s_shared']:.1f} ({r['wall_s_shared']:.0f}) "
                   f"| {r['cpu_ratio']:.2f}x | {r['decisions_identical']} ({r['decisions_compared']:,}) |")
    return out + [""]


def _sizes(rec: dict[str, Any]) -> list[str]:
    """What this record measured against issue 35's sizes, and which parts it lacks."""
    wanted = {"arith": 200, "boolq": 100}
    notes = [f"{k} at D_dist {rec[k]['n_dist']} (issue 35: {n})" for k, n in wanted.items()
             if k in rec and rec[k].get("n_dist") != n]
    q = rec.get("quick")
    if q is not None and q["options"].get("n_dist") != 200:
        notes.append(f"the --quick search at {q['options']['n_dist']} examples a split (the preset: 200)")
    missing = [k for k in ("arith", "boolq", "plans", "planted", "prefix", "prompt_prefix", "quick") if k not in rec]
    out = []
    if notes:
        out += ["Smaller than issue 35's sizes, to fit a loaded machine: " + "; ".join(notes) + ".", ""]
    if missing:
        out += ["Not in this record (did not fit, or not run): " + ", ".join(missing) + ".", ""]
    return out


def _provenance(rec: dict[str, Any]) -> list[str]:
    """Whether the record's parts came from one run of the command on one CPU, computed from what each part
    recorded (a part without a run or a CPU counts as one of its own: it cannot be shown to share them)."""
    parts = {k: v for k, v in rec.items() if isinstance(v, dict)}
    if not parts:
        return []
    runs = {v.get("run") or f"unrecorded {k}" for k, v in parts.items()}
    cpus = {v.get("cpu") or f"unrecorded {k}" for k, v in parts.items()}
    resumed = [f"{k} {p}: {v[p]['chunks_resumed']}" for k, v in parts.items() for p in ("float32", "bf16")
               if isinstance(v.get(p), dict) and v[p].get("chunks_resumed")]
    chunks = (" Chunks of the exact scans resumed from earlier processes on this CPU (each with the seconds measured "
              "when it ran): " + ", ".join(resumed) + ".") if resumed else ""
    if len(runs) == 1 and len(cpus) == 1:
        return [f"Every part comes from one run of the command (started {next(iter(runs))}) on one CPU.{chunks}", ""]
    return [f"The parts come from {len(runs)} runs of the command on {len(cpus)} CPUs (a part that did not record "
            f"its run or CPU counts as its own): their ratios across parts compare runs, not only methods.{chunks}", ""]


def render(rec: dict[str, Any]) -> str:
    """The section from the merged record of every part that ran."""
    ran = [f"{k} ({v.get('finished', '?')}, load average {v.get('load_average', 0):.1f}, CPU {v.get('cpu', 'not recorded')})"
           for k, v in rec.items() if isinstance(v, dict)]
    head = [TITLE, "",
            "One torch thread per process on a shared 2-core machine (the --quick part: the threads cel-lens search takes); CPU seconds are the measure, wall beside them. "
            "Parts in this record: " + ("; ".join(ran) or "none") + ".", ""]
    head += _provenance(rec) + _sizes(rec)
    return "\n".join(head + _stage1(rec) + _bound(rec) + _prefix(rec) + _prescreen(rec) + _plans(rec) + _quick(rec)).rstrip() + "\n"

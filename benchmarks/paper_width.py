"""The paper's models at their real widths on this CPU: a search's peak memory against ``cl.plan``'s estimate.

    python -m benchmarks.paper_width                    # the three models, 4 layers, D_dist 64
    python -m benchmarks.paper_width --models meta-llama/Llama-3.2-3B-Instruct --layers 4

For each paper model a random-weight rehearsal checkpoint (full width and vocabulary, ``--layers``
layers, :func:`cel_lens.testing.paper_width.paper_width_checkpoint`) is written once under
``--cache``; then one fresh process per model loads it with the loader the real model gets by
default (``HookedTransformer`` for Llama and Qwen2.5, ``TransformerBridge`` for SmolLM3), asks
``cl.plan`` for its memory estimate (:mod:`cel_lens.selection.plan_memory`), and runs a search
(Arithmetic, k 1, pool 2, ``--n-dist`` / ``--n-test``, ``--n-null``). Its peak resident memory is
read twice from the kernel (``VmHWM``): at the end of loading, and over the search alone (the
high-water mark is reset between, ``/proc/self/clear_refs``). Each is compared with the plan's
estimate of that phase. One torch thread; CPU seconds beside wall. The record goes to
``benchmarks/paper_width.json`` and a section of ``benchmarks/RESULTS.md``.

The search's oracle calls are not cut to :data:`~cel_lens.selection.memo.CALL_SECONDS` of wall
time: on this shared machine one real-width head takes longer than that, so every head would be
its own call, one variant per forward pass; uncut, exact stage 1 evaluates 64 heads per call, many
variants per pass (up to ``max_tokens`` positions), the activations a GPU's calls hold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("paper_width.json")
CACHE = Path(os.environ.get("CEL_LENS_CACHE", Path.home() / ".cache" / "cel_lens")) / "paper_width"


def vm_hwm() -> int:
    """This process's peak resident set size, bytes (``VmHWM`` of ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def vm_rss() -> int:
    """This process's resident set size now, bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_hwm() -> bool:
    """Reset the peak resident set size to the current one (``clear_refs`` 5); whether it worked."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def checkpoint(hub_id: str, n_layers: int, cache: Path) -> Path:
    """The rehearsal checkpoint of ``hub_id`` at ``n_layers`` layers, written once under ``cache``."""
    from cel_lens.testing.paper_width import paper_width_checkpoint

    path = cache / f"{hub_id.split('/')[1]}-{n_layers}L"
    if not (path / "model.safetensors").is_file() or not (path / "tokenizer.json").is_file():
        paper_width_checkpoint(hub_id, path, n_layers=n_layers)
    return path


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One model in this (fresh) process: load, plan, search; the peaks and the plan's estimates."""
    import torch

    torch.set_num_threads(1)
    import cel_lens as cl
    import cel_lens.selection.memo as memo
    from cel_lens.model.registry import PAPER_MODELS

    memo.CALL_SECONDS = None  # one oracle call per request (module docstring)

    hub_id = args.child
    loader = PAPER_MODELS[hub_id].loader
    path = checkpoint(hub_id, args.layers, Path(args.cache))
    t0, c0 = time.perf_counter(), time.process_time()
    base_rss = vm_rss()
    model = cl.load_model(str(path), device="cpu", dtype=args.dtype, loader=loader)
    load_peak = vm_hwm()
    reset = reset_hwm()
    options = dict(task="arithmetic", k=1, pool_size=2, n_dist=args.n_dist, n_test=args.n_test, n_null=args.n_null,
                   data_dir=args.data_dir, precision=args.precision, progress=False)
    plan = cl.plan(model, calibrate=False, **options)
    t1, c1 = time.perf_counter(), time.process_time()
    run = None if args.load_only else cl.search(model, out=Path(args.run_dir) / hub_id.split("/")[1], **options)
    search_peak = None if args.load_only else vm_hwm()
    return {
        "model": hub_id, "loader": loader, "type": type(model).__name__, "layers": args.layers, "dtype": args.dtype,
        "precision": args.precision, "n_dist": args.n_dist, "n_test": args.n_test, "n_null": args.n_null,
        "rss_before_load": base_rss, "load_peak": load_peak, "hwm_reset": reset, "search_peak": search_peak,
        "load_s": round(t1 - t0, 1), "load_cpu_s": round(c1 - c0, 1),
        "search_s": round(time.perf_counter() - t1, 1), "search_cpu_s": round(time.process_time() - c1, 1),
        "head_set": None if run is None else str(run.result.head_set),
        "memory": plan.memory.to_dict() if getattr(plan, "memory", None) is not None else None,
    }


def run_child(hub_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`child` in a fresh Python process (its peaks are its own), its JSON record."""
    cmd = [sys.executable, "-m", "benchmarks.paper_width", "--child", hub_id, "--layers", str(args.layers),
           "--n-dist", str(args.n_dist), "--n-test", str(args.n_test), "--n-null", str(args.n_null),
           "--dtype", args.dtype, "--precision", args.precision, "--cache", str(args.cache),
           "--data-dir", str(args.data_dir), "--run-dir", str(args.run_dir)] + (["--load-only"] if args.load_only else [])
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CEL_LENS_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{hub_id}: the search process failed:\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])


def _gib(n: Optional[float]) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def measured_rows(records: dict[str, Any]) -> list[str]:
    """Markdown rows: each model's measured peaks against the plan's phases, and the process's peak
    (the larger of the two) against the plan's."""
    rows = ["| model (loader) | load: measured / plan GiB | search: measured / plan GiB | peak: measured / plan GiB "
            "(ratio) | CPU s (load, search) |", "|---|---|---|---|---|"]
    from cel_lens.selection.plan_memory import CPU_RUNTIME_BYTES

    for rec in records.values():
        # the plan as the run computed it, its runtime term at today's CPU_RUNTIME_BYTES
        mem = {s["name"]: s["total"] - s["runtime"] + CPU_RUNTIME_BYTES for s in rec["memory"]["stages"]}
        load_plan, search_plan = mem["load"], max(v for k, v in mem.items() if k != "load")
        searched = rec["search_peak"] is not None
        peak = max(rec["load_peak"], rec["search_peak"] or 0)
        ratio = f"{_gib(peak)} / {_gib(max(load_plan, search_plan))} ({peak / max(load_plan, search_plan):.2f})" \
            if searched else "search not run"
        rows.append(f"| {rec['model']} ({rec['type']}) | {_gib(rec['load_peak'])} / {_gib(load_plan)} | "
                    f"{_gib(rec['search_peak'])} / {_gib(search_plan)} | {ratio} | "
                    f"{rec['load_cpu_s']:.0f}, {rec['search_cpu_s']:.0f} |")
    return rows


def paper_rows() -> list[str]:
    """Markdown rows of the paper-size plans (:func:`cel_lens.selection.plan_paper.paper_table`)."""
    from cel_lens.selection.plan_paper import paper_table

    rows = ["| model | task | GPUs | peak GiB per GPU (usable) | store layers kept (dist, test) | batch | wall h |",
            "|---|---|---|---|---|---|---|"]
    plans = paper_table() + [p for p in paper_table(("h100",), ("boolq",), (2, 4))]
    for p in plans:
        r = p.row()
        kept = f"{r['store_layers']['dist']}, {r['store_layers']['test']} of {p.memory.store_candidates}"
        budget = "" if r["store_budget_mib"] is None else f" (--store-budget-mb {r['store_budget_mib']})"
        gpu = r["device"].split(" (")[0].replace("NVIDIA ", "")
        rows.append(f"| {r['model']} | {r['task']} | {r['gpus']} x {gpu} | {r['peak_gib']} ({r['usable_gib']}) | "
                    f"{kept}{budget} | {r['batch_size']} | {r['hours']} |")
    return rows


def section(records: dict[str, Any]) -> str:
    """The RESULTS.md section (between its markers)."""
    first = next(iter(records.values()))
    lines = [
        "<!-- paper-width:start -->",
        "## The paper's models at real width on this CPU (`python -m benchmarks.paper_width`)",
        "",
        f"Random-weight checkpoints at full width and vocabulary, {first['layers']} layers, {first['dtype']} weights, "
        f"precision {first['precision']}; a search on Arithmetic (k 1, pool 2, D_dist {first['n_dist']}, D_test "
        f"{first['n_test']}, null {first['n_null']}) through the loader each real model gets, its oracle calls not cut "
        "by wall time (the script's docstring says why); one torch thread on a shared 2-core machine (CPU seconds). "
        "Peak resident memory (VmHWM) of loading and of the search alone (reset in between), against `cl.plan`'s "
        "memory plan (each plan's runtime term replaced by the current `CPU_RUNTIME_BYTES`, 0.5 GiB measured after "
        "the imports; the first runs were planned with 0.75 GiB):",
        "",
        *measured_rows(records),
        "",
        "The same plan at the paper's sizes (bf16 weights and store, float32 re-check copy, the paper's search "
        "options; time from the FLOP count at an assumed 30 % of the dense bf16 peak, not measured):",
        "",
        *paper_rows(),
        "<!-- paper-width:end -->",
    ]
    return "\n".join(lines)


def write_section(records: dict[str, Any], path: Path = REPO / "benchmarks" / "RESULTS.md") -> None:
    """Replace (or append) the section in RESULTS.md."""
    import re

    text = path.read_text() if path.is_file() else ""
    block = section(records)
    pattern = re.compile(r"<!-- paper-width:start -->.*?<!-- paper-width:end -->", flags=re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run each model's process, print and save the records."""
    from cel_lens.model.registry import PAPER_MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(PAPER_MODELS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--n-dist", type=int, default=64)
    ap.add_argument("--n-test", type=int, default=16)
    ap.add_argument("--n-null", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--data-dir", default=None, help="task data (default: found as the library finds it, CEL_LENS_DATA_DIR)")
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--load-only", action="store_true", help="measure loading only (no search)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--report-only", action="store_true", help="rewrite the RESULTS.md section from paper_width.json")
    args = ap.parse_args(argv)
    if args.report_only:
        records = json.loads(OUT.read_text())
        write_section(records)
        return records
    if args.data_dir is None:
        from benchmarks.paths import task_data_dir

        args.data_dir = str(task_data_dir(None, ["arithmetic/two_digit_addition.jsonl"]))
    if args.run_dir is None:
        import tempfile

        args.run_dir = tempfile.mkdtemp(prefix="cel_lens_paper_width_")
    if args.child:
        record = child(args)
        print(json.dumps(record), flush=True)
        return record
    records = {}
    for hub_id in args.models:
        checkpoint(hub_id, args.layers, Path(args.cache))  # built here, outside the measured process
        records[hub_id] = run_child(hub_id, args)
        print(json.dumps(records[hub_id]), flush=True)
    old = json.loads(OUT.read_text()) if OUT.is_file() else {}
    OUT.write_text(json.dumps({**old, **records}, indent=1) + "\n")
    write_section({**old, **records})
    return records


if __name__ == "__main__":
    main()

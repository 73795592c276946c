"""Ray backend: a stage-1 exact scan with 1 and 2 CPU workers against the local backend, and Ray's
overheads (Ray start-up, actor start-up, per-call round trip, the first call that builds the stores).

Run: ``python benchmarks/ray_scaling.py [--quick] [--json PATH]`` (needs ``pip install "cel_lens[ray]"``).
:func:`run` returns the numbers as a dict and :func:`format_markdown` renders them, for
``benchmarks/run.py``.

The workload is synthetic and offline: a random Llama-shaped model
(:func:`cel_lens.testing.tiny_hooked_transformer`, built by each actor from the same seed) and
exact-match arithmetic prompts. Accuracy does not matter here, only the work: one intact pass per
split (the activation store) and one ablated pass per head, resumed at the head's layer. The Ray
scores are checked to equal the local ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

__all__ = ["run", "format_markdown", "main", "arithmetic_prompts"]

FULL = dict(model=dict(n_layers=4, n_heads=8, d_head=32, n_key_value_heads=4), n_dist=192, batch_size=16)
QUICK = dict(model=dict(n_layers=3, n_heads=4, d_head=16, n_key_value_heads=2), n_dist=48, batch_size=8)


def arithmetic_prompts(n_dist: int, n_test: int = 8, seed: int = 0):
    """An exact-match task of two-operand arithmetic questions (lm-eval's prompt shape)."""
    from cel_lens.tasks import Example, Task

    rng = random.Random(seed)
    seen: set[str] = set()
    examples = []
    while len(examples) < n_dist + n_test:
        a, b = rng.randrange(10, 10_000), rng.randrange(10, 10_000)
        op, val = rng.choice([("plus", a + b), ("minus", a - b), ("times", a * b)])
        prompt = f"Question: What is {a} {op} {b}?\nAnswer:"
        if prompt not in seen:
            seen.add(prompt)
            examples.append(Example(f"arith/{len(examples)}", prompt, target=f" {val}"))
    return Task("arithmetic_synthetic", "exact_match", tuple(examples[:n_dist]), tuple(examples[n_dist:]))


def _cpu_seconds(pid: int) -> Optional[float]:
    """CPU time (user + system) of process ``pid`` so far, from ``/proc`` (None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _timed(fn, *args, **kwargs) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def _local(model, task, batch_size: int, threads: int) -> dict[str, Any]:
    from cel_lens.heads import Head, HeadSet
    from cel_lens.backends import LocalOracle
    from cel_lens.scoring import exact_scores

    torch.set_num_threads(threads)
    oracle = LocalOracle(model, task, batch_size=batch_size, progress=False)
    store_s, _ = _timed(oracle.evaluate, "dist", [HeadSet()])
    one = [HeadSet([Head(model.cfg.n_layers - 1, 0)])]
    small = [_timed(oracle.evaluate, "dist", one)[0] for _ in range(3)]
    cpu0 = time.process_time()
    scan_s, scores = _timed(exact_scores, oracle)
    return {"threads": threads, "store_s": store_s, "small_call_s": statistics.median(small), "scan_s": scan_s,
            "scan_cpu_s": time.process_time() - cpu0, "scores": scores}


def _ray(factory, task, batch_size: int, workers: int) -> dict[str, Any]:
    from cel_lens.backends.ray import RayOracle
    from cel_lens.heads import Head, HeadSet
    from cel_lens.scoring import exact_scores

    startup_s, oracle = _timed(RayOracle, factory, task, workers=workers, batch_size=batch_size)
    try:
        pings = [oracle.ping() for _ in range(20)]
        store_s, _ = _timed(oracle.evaluate, "dist", [HeadSet()])
        one = [HeadSet([Head(oracle.n_layers - 1, 0)])]
        small = [_timed(oracle.evaluate, "dist", one)[0] for _ in range(3)]
        pids = [w["pid"] for w in oracle.worker_info]
        cpu0 = [_cpu_seconds(p) for p in pids]
        scan_s, scores = _timed(exact_scores, oracle)
        cpu1 = [_cpu_seconds(p) for p in pids]
        cpu = None if None in cpu0 + cpu1 else sum(b - a for a, b in zip(cpu0, cpu1))  # type: ignore[operator]
        return {
            "workers": workers,
            "startup_s": startup_s,
            "replica_build_s": [round(w["build_s"], 3) for w in oracle.worker_info],
            "ping_s": statistics.median(pings),
            "store_s": store_s,
            "small_call_s": statistics.median(small),
            "scan_s": scan_s,
            "scan_cpu_s": cpu,
            "shards": [len(s) for s in oracle.plan("dist")],
            "scores": scores,
        }
    finally:
        oracle.close()


def run(quick: bool = False, workers: Sequence[int] = (1, 2)) -> dict[str, Any]:
    """Time the local backend (1 and 2 torch threads) and the Ray backend (``workers`` actors of
    one CPU each, on a local Ray of 2 CPUs) on the same stage-1 scan."""
    import ray

    from cel_lens.backends.ray import ModelFactory

    cfg = QUICK if quick else FULL
    factory = ModelFactory.tiny(**cfg["model"])
    task = arithmetic_prompts(cfg["n_dist"])
    build_s, model = _timed(factory.build)
    n_heads = model.cfg.n_layers * model.cfg.n_heads
    out: dict[str, Any] = {
        "config": {**cfg, "heads": n_heads, "host_cpus": os.cpu_count(), "ray": ray.__version__,
                   "torch": torch.__version__, "python": platform.python_version()},
        "loadavg_before": os.getloadavg(),
        "local_model_build_s": build_s,
        "local": [],
        "ray": [],
    }
    for threads in (1, 2):
        out["local"].append(_local(model, task, cfg["batch_size"], threads))
    ray_init_s, _ = _timed(ray.init, num_cpus=2, include_dashboard=False, log_to_driver=False)
    out["ray_init_s"] = ray_init_s
    try:
        for w in workers:
            out["ray"].append(_ray(factory, task, cfg["batch_size"], w))
    finally:
        ray.shutdown()
    ref = out["local"][0]["scores"]
    for r in out["local"] + out["ray"]:
        r["scores_equal_local"] = bool(torch.equal(r.pop("scores"), ref))
    scan = {r["workers"]: r["scan_s"] for r in out["ray"]}
    if 1 in scan and 2 in scan:
        out["speedup_2_vs_1_workers"] = scan[1] / scan[2]
    out["loadavg_after"] = os.getloadavg()
    return out


def format_markdown(res: dict[str, Any]) -> str:
    """The results as a Markdown table with the overheads."""
    c = res["config"]
    lines = [
        f"Stage-1 exact scan, {c['heads']} heads, {c['n_dist']} examples, batch {c['batch_size']}, "
        f"model {c['model']}; {c['host_cpus']} CPUs, load average {res['loadavg_before'][0]:.1f} before, "
        f"{res['loadavg_after'][0]:.1f} after.",
        "",
        "| backend | store (intact pass) s | one-head call s | scan s | scan CPU s (compute) | scores = local |",
        "|---|---|---|---|---|---|",
    ]

    def cpu(r: dict[str, Any]) -> str:
        return "n/a" if r.get("scan_cpu_s") is None else f"{r['scan_cpu_s']:.1f}"

    for r in res["local"]:
        lines.append(f"| local, {r['threads']} thread(s) | {r['store_s']:.2f} | {r['small_call_s']:.3f} | "
                     f"{r['scan_s']:.2f} | {cpu(r)} | {r['scores_equal_local']} |")
    for r in res["ray"]:
        lines.append(f"| ray, {r['workers']} worker(s) x 1 CPU | {r['store_s']:.2f} | {r['small_call_s']:.3f} | "
                     f"{r['scan_s']:.2f} | {cpu(r)} (actors) | {r['scores_equal_local']} |")
    lines += ["", f"Ray start-up (`ray.init`, local, 2 CPUs): {res['ray_init_s']:.1f} s."]
    for r in res["ray"]:
        lines.append(
            f"{r['workers']} worker(s): actors up with their replicas in {r['startup_s']:.1f} s "
            f"(replica build {', '.join(f'{b:.1f}' for b in r['replica_build_s'])} s), no-op round trip to all "
            f"{1000 * r['ping_s']:.1f} ms, shards {r['shards']}."
        )
    if "speedup_2_vs_1_workers" in res:
        lines.append(f"Scan speed-up, 2 vs 1 workers: {res['speedup_2_vs_1_workers']:.2f}x.")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: print the table (and write the JSON with ``--json PATH``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller model and split")
    p.add_argument("--json", default=None, help="also write the numbers here")
    args = p.parse_args(argv)
    res = run(quick=args.quick)
    print(format_markdown(res))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

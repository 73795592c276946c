"""SmolLM2-135M-Instruct (30 layers x 9 heads, GQA 3 key/value heads): stage-1 cost on a real shape.

    python -m benchmarks.smollm2 --n-dist 24

On Arithmetic (2-digit addition, ``--n-dist`` D_dist examples): the ``cel-lens search --plan``
estimate of exact stage 1 (:func:`cel_lens.plan`, one timed batch) against the measured exact scan;
the racing scorer's head x example evaluations, replayed on the exact scan's per-example answers
(the race decides from those bits alone, so its decisions and counts are what it would compute);
and the scan against the floor ``(1 + N (L+1)/(2L))`` x the plain ``transformers`` intact pass and
against today's FLOP count (:mod:`benchmarks.limit`, formerly "the FLOP limit") at the measured ``transformers`` and plain-matmul
throughputs. CPU seconds of this process (one torch thread) and wall seconds; the machine is
shared, so wall time is noisy. Writes the SmolLM2 section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from benchmarks.paths import MODEL, checkpoint_dir  # noqa: E402
from benchmarks.floor import encode_for_floor, hf_causal_lm, hf_floor  # noqa: E402
from benchmarks.limit import Shape, floor_flops, matmul_flops_per_second, pieces, scan_intact_flops, scan_count_flops  # noqa: E402
from benchmarks.racing import write_section  # noqa: E402
from cel_lens.heads import HeadSet  # noqa: E402
from cel_lens.oracle import DIST_SPLIT  # noqa: E402
from cel_lens.selection.memo import MemoOracle  # noqa: E402
from cel_lens.splits import parse_subsplit, subsplit_indices
from cel_lens.scoring import RacingOptions, exact_scores, racing_scores  # noqa: E402
from cel_lens.selection import candidate_pool  # noqa: E402


class ReplayOracle:
    """Answers D_dist and its subsplits from recorded full-D_dist answers (a race's replay)."""

    def __init__(self, memo: MemoOracle, n_layers: int, n_heads: int, n: int) -> None:
        self.memo, self.n_layers, self.n_heads, self.n = memo, n_layers, n_heads, n

    def evaluate(self, split: str, head_sets: Sequence[HeadSet], *, stage: str = "") -> torch.Tensor:
        """The recorded bits, at the subsplit's positions."""
        full = self.memo.evaluate(DIST_SPLIT, list(head_sets), stage=stage)
        return full if parse_subsplit(split) is None else full[:, subsplit_indices(split, self.n)]


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds now."""
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    """(wall, CPU) seconds since ``start``."""
    w, c = clocks()
    return w - start[0], c - start[1]


def measure(model_path: str, data_dir: Optional[str], n_dist: int, loader: str) -> dict[str, Any]:
    """Every number of the section (module docstring)."""
    import cel_lens as cl
    from cel_lens.backends.local import LocalOracle
    from cel_lens.config import SearchConfig
    from cel_lens.pipeline import calibration_layers

    torch.set_num_threads(1)
    model = cl.load_model(model_path, loader=loader)
    model_path = str(checkpoint_dir(model_path))  # the same checkpoint as a directory, for transformers
    task = cl.load_task("arithmetic", n_dist=n_dist, n_test=4, seed=0, data_dir=data_dir)
    config = SearchConfig(scorer="exact", k=1, pool_size=12)
    plan = cl.plan(model, task, config, calibration_examples=n_dist, progress=False)
    stage1 = next(s for s in plan.stages if s.name.startswith("stage 1"))
    oracle = LocalOracle(model, task, batch_size=8, progress=False)
    memo = MemoOracle(oracle)
    t = clocks()
    memo.evaluate(DIST_SPLIT, [HeadSet()], stage="intact")
    intact_wall, intact_cpu = since(t)
    t = clocks()
    scores = exact_scores(memo)
    scan_wall, scan_cpu = since(t)
    L, H = oracle.n_layers, oracle.n_heads
    race = racing_scores(ReplayOracle(memo, L, H, n_dist), 12, RacingOptions(first=max(4, n_dist // 8)))
    shape = Shape.from_hf_config(json.loads((Path(model_path) / "config.json").read_text()))
    encoded = encode_for_floor(model, task.dist)
    seqs = pieces(encoded)
    hf = hf_causal_lm(model_path)
    floor = hf_floor(hf, encoded, pad=int(hf.config.pad_token_id or 0), budgets=(0, 1024), reps=2)
    hf_rate = scan_intact_flops(shape, seqs) / floor["pass_cpu_s"]
    mm_rate = matmul_flops_per_second(sum(p[0] for p in seqs), shape.d_model, shape.d_mlp)
    limit = scan_count_flops(shape, seqs)
    rate = scan_cpu / (L * H * n_dist)
    return {
        "loader": loader, "n_dist": n_dist, "heads": L * H, "mean_tokens": sum(p[0] for p in seqs) / len(seqs),
        "plan_stage1_s": plan.seconds(stage1), "plan_rate_s": plan.seconds_per_unit,
        "plan_layers": calibration_layers(L, H),
        "scan_cpu_s": scan_cpu, "scan_wall_s": scan_wall, "intact_cpu_s": intact_cpu, "intact_wall_s": intact_wall,
        "race_units": race.evaluations, "exact_units": race.exact_evaluations, "race_saved": race.saved,
        "race_pool_equal": race.pool == candidate_pool(scores, 12), "race_cpu_s_est": race.evaluations * rate,
        "hf_intact_cpu_s": floor["pass_cpu_s"], "floor_cpu_s": floor_flops(shape, seqs) / hf_rate,
        "limit_gflop": limit / 1e9, "floor_gflop": floor_flops(shape, seqs) / 1e9,
        "limit_s_hf": limit / hf_rate, "limit_s_matmul": limit / mm_rate,
        "hf_gflops": hf_rate / 1e9, "matmul_gflops": mm_rate / 1e9, "load_average": os.getloadavg()[0],
    }


def section(r: dict[str, Any], command: str) -> str:
    """The markdown section."""
    ratio, ratio_wall = r["plan_stage1_s"] / r["scan_cpu_s"], r["plan_stage1_s"] / r["scan_wall_s"]
    return "\n".join([
        "## SmolLM2-135M-Instruct, exact stage 1 on Arithmetic (`" + command + "`)",
        "",
        f"Loader `{r['loader']}`, |D_dist| = {r['n_dist']} (mean {r['mean_tokens']:.1f} tokens), {r['heads']} heads; "
        f"one torch thread on a shared 2-core machine (load average {r['load_average']:.1f} at the end): CPU seconds "
        "are the measure, wall seconds beside them.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| exact stage 1, measured | {r['scan_cpu_s']:.1f} CPU s ({r['scan_wall_s']:.1f} wall s) |",
        f"| `--plan` estimate of exact stage 1 (every head of layers {r.get('plan_layers', '?')} timed by the wall clock) | {r['plan_stage1_s']:.1f} s: "
        f"{ratio_wall:.2f} x the measured wall time, {ratio:.2f} x the CPU time |",
        f"| intact pass with activation store | {r['intact_cpu_s']:.2f} CPU s |",
        f"| racing stage 1 (delta 0.05, replayed on the exact answers) | {r['race_units']:,} of {r['exact_units']:,} "
        f"head x example evaluations ({r['race_saved']:.1%} saved, ~{r['race_cpu_s_est']:.1f} CPU s); pool equal to exact: {r['race_pool_equal']} |",
        f"| `transformers` intact pass (fastest layout) | {r['hf_intact_cpu_s']:.2f} CPU s ({r['hf_gflops']:.1f} GFLOP/s) |",
        f"| floor (1 + N(L+1)/(2L)) x that pass | {r['floor_cpu_s']:.1f} CPU s ({r['floor_gflop']:.0f} GFLOP); scan / floor = {r['scan_cpu_s'] / r['floor_cpu_s']:.2f} |",
        f"| today's FLOP count (formerly \"FLOP limit\") | {r['limit_gflop']:.0f} GFLOP = {r['limit_gflop'] / r['floor_gflop']:.2f} x the floor's FLOPs |",
        f"| count at `transformers` throughput | {r['limit_s_hf']:.1f} s; count / scan = {r['limit_s_hf'] / r['scan_cpu_s']:.2f} (1: at the count; above 1: faster than it at that throughput) |",
        f"| count at plain-matmul throughput ({r['matmul_gflops']:.1f} GFLOP/s) | {r['limit_s_matmul']:.1f} s; count / scan = {r['limit_s_matmul'] / r['scan_cpu_s']:.2f} |",
        "",
    ])


def main() -> None:
    """Measure and write the section."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=MODEL, help="model name or local HF directory (default: %(default)s, loaded by name)")
    p.add_argument("--data-dir", default=None, help="task data directory (default: as the library finds it: $CEL_LENS_DATA_DIR, ./data or ../shared/data)")
    p.add_argument("--n-dist", type=int, default=24, help="D_dist examples")
    p.add_argument("--loader", default="bridge", choices=["bridge", "hooked"], help="cel_lens loader")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--from-json", default=None, help="render the section from a saved measurement instead of measuring")
    args = p.parse_args()
    if args.from_json:
        r = json.loads(Path(args.from_json).read_text())
        args.n_dist, args.loader = r["n_dist"], r["loader"]
    else:
        r = measure(args.model, args.data_dir, args.n_dist, args.loader)
        Path(__file__).with_name(f"smollm2_{args.loader}.json").write_text(json.dumps(r, indent=1) + "\n")
    command = f"python -m benchmarks.smollm2 --n-dist {args.n_dist} --loader {args.loader}"
    text = section(r, command)
    print(json.dumps(r, indent=1))
    print(text)
    if not args.no_write:
        write_section(text, key=f"smollm2-{args.loader}")


if __name__ == "__main__":
    main()

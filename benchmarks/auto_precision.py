"""Is the default precision ever slower than float32? ``cl.evaluate`` with ``precision="auto"``
against ``precision="float32"`` on the cases issue 55 names.

    python -m benchmarks.auto_precision            # writes benchmarks/auto_precision.json

Cases: SmolLM2-135M-Instruct on Arithmetic (48 examples) and BoolQ (32, from the validation file),
the benchmarks' random Llama-shaped model (8 x 8 heads, d_model 512) and a tiny test model on
Arithmetic (48). Each evaluates the intact model and four single heads spread over depth (5 head
sets), one torch thread, both precisions twice in alternation; the measure is the process's CPU
seconds, best of the two (wall beside it; every call's CPU seconds in ``cpu_s_each``). ``auto`` decides per model and split (a timed probe for
a large float32 model on exact match, revised by the re-checks its evaluations needed; float32
otherwise: :mod:`cel_lens.evaluation.precision_probe`); its probe runs once per model, before the
timed calls, and is reported apart, and ``auto_chose`` lists each timed call's precision. The decisions of
the two precisions must be identical.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("auto_precision.json")


def _cases(data_dir: Path) -> list[tuple[str, Any, Any]]:
    """(name, model, split) for every case."""
    import cel_lens as cl
    from benchmarks.workload import arithmetic_task, bench_model, bench_tokenizer, boolq_task
    from cel_lens.testing import tiny_hooked_transformer

    smol = cl.load_model("smollm2-135m")
    tok = bench_tokenizer()
    arith = arithmetic_task(48, data_dir=data_dir).dist
    return [
        ("SmolLM2-135M, Arithmetic", smol, arith),
        ("SmolLM2-135M, BoolQ", smol, boolq_task(32, data_dir=data_dir).dist),
        ("Llama-shaped 8x8, d_model 512, Arithmetic", bench_model(tokenizer=tok), arith),
        ("tiny test model, Arithmetic", tiny_hooked_transformer(tokenizer=tok), arith),
    ]


def _timed(model: Any, split: Any, sets: list, precision: str) -> tuple[float, float, Any]:
    import cel_lens as cl
    from cel_lens.evaluation.context import EvalContext

    cpu, wall = time.process_time(), time.perf_counter()
    result = cl.evaluate(model, split, sets, progress=False, context=EvalContext(precision=precision))
    return time.process_time() - cpu, time.perf_counter() - wall, result


def measure(model: Any, split: Any) -> dict[str, Any]:
    """Both precisions on ``split``: CPU/wall seconds (best of two), what auto chose, decisions."""
    from cel_lens.evaluation.precision_probe import probe_record

    L, H = model.cfg.n_layers, model.cfg.n_heads
    sets = [[]] + [[(layer, layer % H)] for layer in (0, L // 3, 2 * L // 3, L - 1)]
    t0 = time.process_time()
    _timed(model, split.subset(2), sets[:1], "auto")  # auto's probe (once per model) and warm-up
    probe_cpu = time.process_time() - t0
    runs: dict[str, list] = {"float32": [], "auto": []}
    for _ in range(2):
        for p in runs:
            runs[p].append(_timed(model, split, sets, p))
    best = {p: min(r, key=lambda x: x[0]) for p, r in runs.items()}
    f32, auto = best["float32"][2], best["auto"][2]
    return {"examples": len(split), "head_sets": len(sets), "params": sum(q.numel() for q in model.parameters()),
            "auto_chose": [r[2].precision for r in runs["auto"]], "probe": probe_record(model), "probe_and_warmup_cpu_s": round(probe_cpu, 2),
            "float32_cpu_s": round(best["float32"][0], 2), "auto_cpu_s": round(best["auto"][0], 2),
            "float32_wall_s": round(best["float32"][1], 2), "auto_wall_s": round(best["auto"][1], 2),
            "float32_over_auto": round(best["float32"][0] / best["auto"][0], 3),
            "cpu_s_each": {p: [round(r[0], 2) for r in rs] for p, rs in runs.items()},
            "decisions": int(f32.correct.numel()), "differing": int((f32.correct != auto.correct).sum())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    os.environ.pop("CEL_LENS_PRECISION", None)
    os.environ["CEL_LENS_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    out: dict[str, Any] = {"cases": {}}
    for name, model, split in _cases(Path(args.data_dir)):
        out["cases"][name] = row = measure(model, split)
        print(name, row, flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    main()

"""Is a capability control possible inside SmolLM2-135M-Instruct on a task where it discriminates?

On BoolQ the model cannot tell yes-questions from no-questions (docs/planted.md), so no head can
carry a calibrated cost there. This script measures, on a two-choice arithmetic task built from the
official two-digit addition file, (1) whether the model prefers the right sum to a near miss (the
sum +/- 1, the sign drawn per row), and (2) whether one head with its output scaled (what editing
that head's output-projection columns does) destroys that preference, and its zero ablation
restores it. Each row is scored as lm-eval scores a multiple-choice row: the summed log-probability
of each continuation after the context. The choices are ordered (smaller, larger), so the answer
prior is "prefer the larger" and the calibrated accuracy is the raw one at the best constant
threshold on ``lp(larger) - lp(smaller)``, fitted on the same rows (an upper bound for a prior
alone, as in docs/calibration.md).

    python scripts/plant_choice_feasibility.py --rows 200 --out results/planted/choice_feasibility.json
    python scripts/plant_choice_feasibility.py --rows 200 --sweep 29.0:3,5,10,20 --out results/planted/choice_sweep.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

FILE = "arithmetic/two_digit_addition.jsonl"
CONDITIONS = (("base", None, None, None), ("L29H0 x30", 29, 0, 30.0), ("L29H0 zero", 29, 0, 0.0),
              ("L10H4 x10", 10, 4, 10.0), ("L10H4 zero", 10, 4, 0.0))
"""(name, layer, head, factor on the head's ``hook_z``): the base model, two scaled heads, their zero ablations."""


def _rows(data_dir: Path, offset: int, n: int, seed: int) -> list[tuple[str, str, str, bool]]:
    """(context, smaller, larger, the larger is right) for ``n`` rows from ``offset``."""
    rng = random.Random(seed)
    lines = (data_dir / FILE).read_text(encoding="utf-8").splitlines()[offset : offset + n]
    out = []
    for line in lines:
        row = json.loads(line)
        right = int(row["completion"].strip())
        wrong = right + rng.choice((-1, 1))
        out.append((row["context"], f" {min(right, wrong)}", f" {max(right, wrong)}", right > wrong))
    return out


def _margins(model, rows, hooks) -> list[float]:
    """``lp(larger) - lp(smaller)`` per row, each continuation's log-probability summed."""
    import torch

    out = []
    for context, small, large, _ in rows:
        n_ctx = model.to_tokens(context).shape[1]
        lps = []
        for cont in (small, large):
            ids = model.to_tokens(context + cont)
            with torch.no_grad():
                logp = model.run_with_hooks(ids, fwd_hooks=hooks).log_softmax(-1)[0]
            lps.append(float(logp[torch.arange(n_ctx - 1, ids.shape[1] - 1), ids[0, n_ctx:]].sum()))
        out.append(lps[1] - lps[0])
    return out


def _accuracies(margins: list[float], larger_right: list[bool]) -> dict[str, float]:
    """Raw accuracy (threshold 0) and the best constant threshold's (calibrated)."""
    n = len(margins)
    raw = sum((m > 0) == y for m, y in zip(margins, larger_right)) / n
    cuts = sorted(set(margins))
    thresholds = [cuts[0] - 1.0] + [(a + b) / 2 for a, b in zip(cuts, cuts[1:])] + [cuts[-1] + 1.0]
    best = max(sum((m > t) == y for m, y in zip(margins, larger_right)) for t in thresholds) / n
    return {"raw": raw, "calibrated": best, "prefers_larger": sum(m > 0 for m in margins) / n}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--offset", type=int, default=300, help="first row of the file (earlier rows: the first look)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the numbers here (JSON)")
    parser.add_argument("--sweep", default=None, metavar="L.H:F1,F2,...",
                        help="instead of the default conditions: the base model and head L.H scaled by each factor")
    args = parser.parse_args(argv)
    conditions = CONDITIONS
    if args.sweep:
        where, factors = args.sweep.split(":")
        layer, head = (int(x) for x in where.split("."))
        conditions = (CONDITIONS[0], *((f"L{layer}H{head} x{f}", layer, head, float(f)) for f in factors.split(",")))
    import torch

    import cel_lens as cl

    torch.set_num_threads(1)
    model = cl.load_model("smollm2-135m")
    rows = _rows(Path(args.data_dir), args.offset, args.rows, args.seed)
    truth = [r[3] for r in rows]
    record = {"file": FILE, "offset": args.offset, "rows": len(rows), "seed": args.seed, "near_miss": "+/-1",
              "larger_is_right": sum(truth) / len(truth), "conditions": {}}
    for name, layer, head, factor in conditions:
        hooks = []
        if layer is not None:
            def scale(z, hook, h=head, s=factor):
                z[:, :, h] = z[:, :, h] * s
                return z
            hooks = [(f"blocks.{layer}.attn.hook_z", scale)]
        t0 = time.process_time()
        acc = _accuracies(_margins(model, rows, hooks), truth)
        record["conditions"][name] = {**acc, "cpu_s": round(time.process_time() - t0, 1)}
        print(name, record["conditions"][name], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


if __name__ == "__main__":
    main()

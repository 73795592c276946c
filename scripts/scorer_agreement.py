"""Attribution and compressed sensing against exact stage 1, on a finished exact row's own D_dist.

    python scripts/scorer_agreement.py results/smollm2-135m/arithmetic-exact --data-dir ../shared/data

The row's ``result.json`` holds the exact single-head D_dist gain of every head (its stage 1). This
rebuilds the row's D_dist from its manifest (the same examples, content hash checked; D_test is not
loaded), scores every head by attribution and by compressed sensing on it, and compares each with
exact: Spearman's rho over all heads, recall of exact's pool (top 6 and 12), and cost in CPU seconds
against exact stage 1's seconds (the row's own timing of one thread on an otherwise quiet core; a
row resumed across processes timed only its last one, so its ratio needs ``--exact-s`` measured
elsewhere, or ``--exact-scaled CPU_S GFLOP``, a scan measured elsewhere scaled to this D_dist by the
benchmarks' FLOP count; either with ``--exact-source``). Writes ``agreement.json`` beside the row's records.
One torch thread; CPU seconds are this process's.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import cel_lens as cl  # noqa: E402
from cel_lens.backends.local import LocalOracle  # noqa: E402
from cel_lens.runs.manifest import rebuild_task  # noqa: E402
from cel_lens.scoring import rank_agreement, score_heads  # noqa: E402
from cel_lens.selection.algorithm import RESUMED_SETS  # noqa: E402

TOPS = (6, 12)


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its CPU seconds (this process) and wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def compare(name: str, approx: torch.Tensor, exact: torch.Tensor, cpu: float, wall: float, exact_s: float) -> dict:
    """One scorer's agreement with exact over every head, and its cost (``cost_vs_exact``: its CPU
    seconds over exact stage 1's seconds as the row timed them, one thread)."""
    agree = rank_agreement(approx.reshape(-1, 1), exact.reshape(-1, 1), top=TOPS)
    return {"scorer": name, **agree, "cpu_s": cpu, "wall_s": wall,
            "cost_vs_exact": cpu / exact_s if exact_s else None}


APPROX = "approx_scores.json"
"""The approximate scorers' scores and costs, saved beside the row (computed once, before or after
the row's search: D_dist reads do not touch the test-split ledger)."""


def dist_task(a: argparse.Namespace, manifest: dict) -> Any:
    """The row's task with its D_dist rebuilt from the manifest (D_test not loaded), its content hash
    checked against the manifest's."""
    want = (manifest.get("splits") or {}).get("dist", {}).get("content_sha256")
    task = rebuild_task(manifest, a.data_dir, splits=("dist",))
    if want and task.dist.content_hash != want:
        raise SystemExit(f"{a.row}: the rebuilt D_dist's content hash differs from the manifest's")
    return task


def approx_scores(a: argparse.Namespace, manifest: dict) -> dict:
    """Attribution and compressed-sensing scores of every head on the row's D_dist, with their CPU
    and wall seconds: read from :data:`APPROX` when it holds this D_dist's, else computed and saved."""
    want = (manifest.get("splits") or {}).get("dist", {}).get("content_sha256")
    path = a.row / APPROX
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("dist_sha256") == want and saved.get("n_masks") == a.n_masks:
            return saved
    task = dist_task(a, manifest)
    model = cl.load_model(a.model)
    attr, attr_cpu, attr_wall = timed(lambda: score_heads("attribution", model=model, split=task.dist,
                                                          batch_size=a.batch_size, progress=False))
    oracle = LocalOracle(model, task, batch_size=a.batch_size, progress=False)
    comp, comp_cpu, comp_wall = timed(lambda: score_heads("compressed", oracle, n_masks=a.n_masks,
                                                          batch_size=a.batch_size, progress=False))
    saved = {
        "dist_sha256": want, "n_dist": len(task.dist), "n_masks": a.n_masks, "batch_size": a.batch_size,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "scorers": {
            "attribution": {"scores": attr.values.tolist(), "cpu_s": attr_cpu, "wall_s": attr_wall},
            f"compressed ({a.n_masks} masks)": {"scores": comp.values.tolist(), "cpu_s": comp_cpu, "wall_s": comp_wall},
        },
    }
    path.write_text(json.dumps(saved) + "\n")
    return saved


def check_exact_options(given: Optional[float], source: Optional[str], scaled: Optional[list[float]] = None) -> None:
    """Refuse ``--exact-s`` or ``--exact-scaled`` without its source, both at once, or a source
    without either (checked before the model is loaded)."""
    if given is not None and scaled is not None:
        raise SystemExit("give --exact-s or --exact-scaled, not both")
    flag = "--exact-s" if given is not None else "--exact-scaled" if scaled is not None else None
    if flag and not source:
        raise SystemExit(f"{flag} needs --exact-source: where the figure was measured")
    if source and flag is None:
        raise SystemExit("--exact-source needs --exact-s or --exact-scaled: the seconds it measured")
    if scaled is not None and not (scaled[0] > 0 and scaled[1] > 0):
        raise SystemExit("--exact-scaled needs positive CPU seconds and GFLOP")


def scan_gflop(model: Any, split: Any) -> float:
    """An exact stage-1 scan's FLOPs over ``split``, in GFLOP, by the benchmarks' count
    (``benchmarks/limit.py``: the intact pass and every head resumed at its layer), its prompts
    encoded as the evaluator encodes them (the task's chat template included)."""
    import sys

    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from benchmarks.floor import encode_for_floor
    from benchmarks.limit import Shape, pieces, scan_count_flops

    return scan_count_flops(Shape.from_hooked_config(model.cfg), pieces(encode_for_floor(model, split))) / 1e9


def scaled_exact(a: argparse.Namespace, manifest: dict) -> tuple[float, str, float]:
    """``--exact-scaled CPU_S GFLOP``: a scan measured elsewhere, scaled by this row's D_dist count
    (:func:`scan_gflop`); returns the seconds, their source and the row's GFLOP."""
    cpu_s, gflop = a.exact_scaled
    task = dist_task(a, manifest)
    row = scan_gflop(cl.load_model(a.model), task.dist)
    source = (f"{a.exact_source}, scaled by this D_dist's scan count ({row:,.0f} GFLOP against {gflop:,.0f}, "
              "benchmarks/limit.py): an extrapolation")
    return cpu_s * row / gflop, source, row


def exact_seconds(timings: dict[str, Any], given: Optional[float], source: Optional[str]) -> tuple[float, str]:
    """Exact stage 1's seconds to compare costs with, and where they come from: the row's own timing
    when one process ran its whole search; for a resumed row (whose ``stage1_s`` is its last
    process's) only a figure measured elsewhere, given with its source, else 0 (no ratio)."""
    check_exact_options(given, source)
    if given is not None:
        return float(given), str(source)
    if timings.get(RESUMED_SETS):
        return 0.0, (f"not timed: the row's search resumed {int(timings[RESUMED_SETS])} evaluations, so its "
                     "stage1_s is its last process's only (give --exact-s with --exact-source)")
    return float(timings.get("stage1_s") or 0.0), "the row's own stage1_s (wall seconds, one thread, one process)"


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("row", type=Path)
    p.add_argument("--data-dir")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--n-masks", type=int, default=120, help="compressed sensing's masks (each one D_dist pass)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--exact-s", type=float, help="exact stage 1's seconds measured elsewhere (for a resumed row)")
    p.add_argument("--exact-scaled", type=float, nargs=2, metavar=("CPU_S", "GFLOP"),
                   help="a float32 exact scan measured elsewhere (its CPU seconds and benchmarks/limit.py's GFLOP "
                        "count), scaled to this row's D_dist by the same count")
    p.add_argument("--exact-source", help="where --exact-s or --exact-scaled was measured (recorded beside it)")
    a = p.parse_args(argv)
    check_exact_options(a.exact_s, a.exact_source, a.exact_scaled)
    torch.set_num_threads(1)
    manifest = json.loads((a.row / "manifest.json").read_text())
    approx = approx_scores(a, manifest)
    if not (a.row / "result.json").exists():
        print(f"{a.row}: no result.json yet; the approximate scores are saved in {APPROX}")
        return 0
    result = json.loads((a.row / "result.json").read_text())
    if result.get("scorer") != "exact" or result.get("scores_split") != "dist":
        raise SystemExit(f"{a.row}: stage 1 was {result.get('scorer')!r}, not exact on D_dist")
    exact = torch.tensor(result["scores"], dtype=torch.float64)
    row_gflop = None
    if a.exact_scaled is not None:
        exact_s, source, row_gflop = scaled_exact(a, manifest)
    else:
        exact_s, source = exact_seconds(result.get("timings") or {}, a.exact_s, a.exact_source)
    out = {
        "row": str(a.row), "n_dist": approx["n_dist"], "heads": int(exact.numel()), "exact_stage1_s": exact_s,
        "exact_stage1_source": source, "exact_scan_gflop": row_gflop,
        "exact_ties_at_zero": int((exact == 0).sum()), "tops": list(TOPS),
        "scorers": [compare(name, torch.tensor(rec["scores"], dtype=torch.float64), exact, rec["cpu_s"], rec["wall_s"],
                            exact_s) for name, rec in approx["scorers"].items()],
        "measured": approx["measured"], "batch_size": approx.get("batch_size"),
    }
    (a.row / "agreement.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Racing stage 1 against exact stage 1: pool recall and the head x example evaluations saved.

    python -m benchmarks.racing            # planted oracles and the organism; rewrites the racing
                                           # section of benchmarks/RESULTS.md
    python -m benchmarks.racing --quick    # planted oracles only, smaller grid, prints the table

Planted oracles (:func:`cel_lens.testing.realistic_oracle`, its effects scaled by 1x and 3x, with
64, 270 and 672 heads and |D_dist| of 400 and 2,000) and the model organism (a real model: its
task A, exact scan against the race through the same :class:`~cel_lens.backends.local.LocalOracle`).
*Recall* is the fraction of exact stage 1's pool that the race's pool holds; *saved* the fraction
of exact stage 1's head x example evaluations the race did not make; *cost ratio* exact / race.
Pool size 12 (the default; 2 for the organism's 4 heads), ``delta = 0.05``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cel_lens.heads import Head  # noqa: E402
from cel_lens.scoring import RacingOptions, exact_scores, racing_scores  # noqa: E402
from cel_lens.selection import candidate_pool  # noqa: E402
from cel_lens.testing import SyntheticOracle  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
SHAPES = ((8, 8), (30, 9), (28, 24))  # 64, 270 (SmolLM2-135M) and 672 (Llama-3.2-3B) heads


def planted(n_layers: int, n_heads: int, n_dist: int, scale: float, seed: int) -> SyntheticOracle:
    """:func:`cel_lens.testing.realistic_oracle`'s effects, times ``scale``, on ``n_dist`` examples."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(n_layers * n_heads, size=13, replace=False)
    heads = [Head(int(i) // n_heads, int(i) % n_heads) for i in idx]
    effects = dict(zip(heads[:3], (0.03 * scale, 0.02 * scale, 0.015 * scale)))
    effects.update(zip(heads[3:], -np.linspace(0.02, 0.15, 10) * scale))
    return SyntheticOracle(n_layers, n_heads, n_dist=n_dist, n_test=100, base_acc=0.6, effects=effects,
                           background_sd=0.003 * scale, noise=0.02, seed=seed)


def known_boundary_cost(oracle: Any, pool_size: int, options: RacingOptions) -> int:
    """Head x example evaluations of a race *told* exact stage 1's pool boundary in advance: each head
    stops at the first batch where its own interval (the race's hypergeometric bounds, at the race's
    level) lies strictly on its side of the boundary, less ``options.margin`` (below the pool's lowest
    score for a head outside the pool, above the best score outside it for a head inside). No race that certifies the pool
    with these intervals can stop a head sooner, since it must also learn the boundary: a lower bound
    on what racing can save on this oracle."""
    from cel_lens.heads import HeadSet
    from cel_lens.scoring.racing import gain_bounds, racing_level, racing_schedule
    from cel_lens.splits import subsplit, subsplit_indices

    L, H = oracle.n_layers, oracle.n_heads
    intact = oracle.evaluate("dist", [HeadSet()], stage="intact")[0].numpy()
    n = intact.shape[0]
    bits = oracle.evaluate("dist", [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)], stage="stage1").numpy()
    ends = racing_schedule(n, options)
    alpha = racing_level(L * H, len(ends), options.delta)
    order = subsplit_indices(subsplit(options.seed, 0, n), n).numpy()
    base, bits = intact[order], bits[:, order]
    score = (bits.sum(1) - base.sum()) / n
    ranked = np.argsort(-score, kind="stable")  # ties by index, as candidate_pool breaks them
    inside = np.zeros(L * H, dtype=bool)
    inside[ranked[:pool_size]] = True
    low_in, best_out = score[ranked[pool_size - 1]], score[ranked[pool_size]] if pool_size < L * H else -np.inf
    stop_at = np.full(L * H, n)
    margin = float(options.margin)  # a head within the margin of the boundary may stop on the wrong side
    for m in ends[:-1]:
        b = base[:m]
        fixes, breaks = (bits[:, :m] & ~b).sum(1), (~bits[:, :m] & b).sum(1)
        lo, hi = gain_bounds(fixes, breaks, int((~b).sum()), int(b.sum()), int((~intact).sum()), int(intact.sum()), alpha)
        decided = np.where(inside, lo + margin > best_out, hi - margin < low_in)
        stop_at = np.where((stop_at == n) & decided, m, stop_at)
    return int(stop_at.sum())


def compare(oracle: Any, pool_size: int, margin: float) -> dict[str, Any]:
    """Exact and racing stage 1 on one oracle: recall, evaluations saved, seconds."""
    t0 = time.process_time()
    exact = candidate_pool(exact_scores(oracle), pool_size)
    t1 = time.process_time()
    race = racing_scores(oracle, pool_size, RacingOptions(delta=0.05, margin=margin))
    t2 = time.process_time()
    known = known_boundary_cost(oracle, pool_size, RacingOptions(delta=0.05, margin=margin))
    return {
        "known_ratio": race.exact_evaluations / max(known, 1),
        "recall": len(set(exact) & set(race.pool)) / len(exact), "saved": race.saved,
        "ratio": race.exact_evaluations / max(race.evaluations, 1),
        "out": sum(st == "out" and int(n) < race.ends[-1] for st, n in zip(race.status, race.seen.flatten().tolist())),
        "exact_cpu_s": t1 - t0, "race_cpu_s": t2 - t1,
    }


def planted_rows(quick: bool) -> list[dict[str, Any]]:
    """Every planted configuration, three seeds each (means)."""
    rows = []
    shapes = SHAPES[:2] if quick else SHAPES
    for (L, H) in shapes:
        for n in ((400,) if quick else (400, 2000)):
            for scale in (1.0, 3.0):
                for margin in (0.0, 0.02):
                    runs = [compare(planted(L, H, n, scale, s), 12, margin) for s in range(3)]
                    rows.append({"source": "planted", "pool": 12, "heads": L * H, "n_dist": n, "scale": scale, "margin": margin,
                                 **{k: float(np.mean([r[k] for r in runs])) for k in runs[0]},
                                 "min_recall": min(r["recall"] for r in runs)})
                    print(rows[-1], flush=True)
    return rows


def organism_rows() -> list[dict[str, Any]]:
    """The model organism's task A: exact scan and race through one local oracle."""
    from cel_lens.backends.local import LocalOracle
    from cel_lens.organism import ORGANISM_TASK, load_organism
    from cel_lens.tasks import load_task

    model = load_organism()
    rows = []
    for n in (400, 2000):
        task = load_task(ORGANISM_TASK, n_dist=n, n_test=100, seed=0)
        for margin in (0.0, 0.02):
            oracle = LocalOracle(model, task, batch_size=64, progress=False)
            r = compare(oracle, 2, margin)  # the organism has 4 heads: a pool of 12 would hold them all
            oracle.close()
            rows.append({"source": "organism", "pool": 2, "heads": oracle.n_layers * oracle.n_heads, "n_dist": n, "scale": 1.0,
                         "margin": margin, **r, "min_recall": r["recall"]})
            print(rows[-1], flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the rows."""
    out = ["| source | pool | heads | \\|D_dist\\| | effects x | margin | recall (mean / min) | heads ruled out early | saved | cost ratio exact / race | ratio if told the boundary | CPU s exact / race |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['source']} | {r['pool']} | {r['heads']} | {r['n_dist']} | {r['scale']:g} | {r['margin']:g} | "
                   f"{r['recall']:.3f} / {r['min_recall']:.3f} | {r['out']:.0f} | {r['saved']:.1%} | {r['ratio']:.2f}x | {r['known_ratio']:.2f}x | "
                   f"{r['exact_cpu_s']:.2f} / {r['race_cpu_s']:.2f} |")
    return "\n".join(out)


def verdict(rows: list[dict[str, Any]]) -> str:
    """The goal (cost down >= 5x at the paper's sizes, >= 270 heads and 2,000 examples, with recall
    >= 0.99 of exact's), checked on the planted rows with margin 0, and what the rows say."""
    paper = [r for r in rows if r["source"] == "planted" and r["heads"] >= 270 and r["n_dist"] >= 2000 and r["margin"] == 0]
    if not paper:
        return "The paper-size rows were not run (--quick).\n"
    met = all(r["ratio"] >= 5 and r["min_recall"] >= 0.99 for r in paper)
    best = max(paper, key=lambda r: r["ratio"])
    told = max(r["known_ratio"] for r in paper)
    relaxed = [r for r in rows if r["source"] == "planted" and r["heads"] >= 270 and r["n_dist"] >= 2000 and r["margin"] > 0]
    return (
        f"Goal (>= 5x fewer evaluations at >= 270 heads and 2,000 examples, recall >= 0.99): "
        f"{'met' if met else 'not met'}; the best paper-size row saves {best['saved']:.1%} ({best['ratio']:.2f}x), "
        f"recall {min(r['min_recall'] for r in paper):.2f} or more. "
        f"**Told the pool's boundary in advance**, a race with the same intervals would make at most {told:.2f}x "
        f"fewer evaluations than exact stage 1 on these rows"
        + (f" ({max(r['known_ratio'] for r in relaxed):.2f}x with a margin of {relaxed[0]['margin']:g}, at the recall "
           "in the table)" if relaxed else "")
        + ": the cost is the pool's boundary, not the race. With a pool of 12 and a few real effects, most heads' "
        "exact scores lie within evaluation noise of the pool's lowest score, and an interval that excludes that score "
        "needs nearly every example; strong, well separated effects (the organism) are where racing pays. Heads ruled "
        "out early: before the last batch (mean over seeds); only those save evaluations. Recall is of exact stage 1's "
        "pool. *Ratio if told the boundary*: `known_boundary_cost`, each head stopped at the first batch where its "
        "interval lies on its side of the boundary, a lower bound on any race certifying the pool with these "
        "intervals.\n"
    )


def write_section(text: str, key: str = "racing") -> None:
    """Replace (or append) the section ``key`` of RESULTS.md (between ``<!-- key:start/end -->``)."""
    body = RESULTS.read_text() if RESULTS.exists() else ""
    START, END = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    section = f"{START}\n{text}\n{END}"
    if START in body:
        body = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: section, body, flags=re.S)
    else:
        body = body.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(body)


def main() -> None:
    """Run the comparison; write or print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="planted oracles only, a smaller grid; print, write nothing")
    p.add_argument("--no-organism", action="store_true", help="skip the model organism rows")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = planted_rows(args.quick)
    if not (args.quick or args.no_organism):
        rows += organism_rows()
    text = "## Racing stage 1 against exact stage 1 (`python -m benchmarks.racing`)\n\n" + table(rows) + "\n\n" + verdict(rows)
    print(text)
    if not args.quick:
        write_section(text)


if __name__ == "__main__":
    main()

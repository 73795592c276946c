"""A real-model BoolQ search with the answer-prior calibration: ``python -m benchmarks.boolq_calibration``.

BoolQ ships only its validation file offline (``boolq/dev.jsonl``), so both splits are drawn from it
here: a seeded permutation of the validation rows (``--max-passage-words``: only rows with passages
that short, to fit a CPU budget), the first ``--n-dist`` rows D_dist and the next ``--n-test``
D_test (disjoint by construction, and checked). The search (attribution scorer; k, pool and null
as given, by default the ``--quick`` preset's) records every evaluation's choice scores, and the
result prints the majority-class rate, intact, calibrated intact, ablated and calibrated ablated
accuracy, the answers' shares and the calibrated gain.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

import torch

import cel_lens as cl
from benchmarks.paths import MODEL, task_data_dir
from cel_lens.backends.local import LocalOracle
from cel_lens.config import QUICK
from cel_lens.heads import HeadSet
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.calibration import calibration_statistics
from cel_lens.selection.calibration_text import calibration_rows
from cel_lens.tasks.base import Split, Task, check_disjoint
from cel_lens.tasks.boolq import make_example


def boolq_from_validation(
    data_dir: Path, n_dist: int, n_test: int, seed: int, max_passage_words: Optional[int] = None
) -> Task:
    """BoolQ with disjoint D_dist and D_test drawn (seeded) from the validation file alone; with
    ``max_passage_words``, only from rows whose passage has at most that many words (a CPU budget)."""
    rows = [json.loads(line) for line in (data_dir / "boolq" / "dev.jsonl").read_text().splitlines() if line.strip()]
    kept = [i for i, r in enumerate(rows) if max_passage_words is None or len(r["passage"].split()) <= max_passage_words]
    if n_dist + n_test > len(kept):
        raise ValueError(f"n_dist + n_test = {n_dist + n_test} > {len(kept)} eligible validation rows")
    order = torch.randperm(len(kept), generator=torch.Generator().manual_seed(seed)).tolist()
    examples = [make_example(rows[kept[i]], "validation", kept[i]) for i in order[: n_dist + n_test]]
    dist, test = examples[:n_dist], examples[n_dist:]
    check_disjoint(dist, test)
    return Task(
        name="boolq", answer_type="multiple_choice", dist=Split("dist", tuple(dist)), test=Split("test", tuple(test)),
        metric="acc", options={"n_dist": n_dist, "n_test": n_test, "seed": seed, "dist_from": "validation (seeded draw)",
                               "max_passage_words": max_passage_words},
    )


def heads_report(model, task: Task, heads: str, seed: int, batch_size: int) -> str:
    """No search: the intact model and ``heads`` (given, not selected here) on both splits, one
    evaluation per split, and the calibration block a result of Ŝ = ``heads`` would show."""
    hs = HeadSet.parse(heads)
    memo = MemoOracle(LocalOracle(model, task, batch_size=batch_size, progress=False), guard_test=False)
    acc = {split: memo.evaluate(split, [HeadSet(), hs]).double().mean(1).tolist() for split in ("dist", "test")}
    block = calibration_statistics(memo, hs, n_boot=QUICK["n_boot"], seed=seed)
    gain = acc["test"][1] - acc["test"][0]
    lines = [f"heads {hs} (given, not selected on this D_dist)",
             f"D_dist: intact {100 * acc['dist'][0]:.2f}% -> ablated {100 * acc['dist'][1]:.2f}%",
             f"D_test: intact {100 * acc['test'][0]:.2f}% -> ablated {100 * acc['test'][1]:.2f}%, gain {100 * gain:+.2f} pp",
             f"calibrated intact D_dist bias {block.get('bias_intact')}, ablated {block.get('bias_ablated')}"]
    rows = calibration_rows({"calibration": block, "gain": gain, "alpha": 0.05})
    return "\n".join(lines + [f"{k:<24}  {v}" for k, v in rows])


def main() -> None:
    """Run the search and print its result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL, help="model name or local HF directory (default: %(default)s, loaded by name)")
    parser.add_argument("--data-dir", default=None, help="task data directory (default: as the library finds it: $CEL_LENS_DATA_DIR, ./data or ../shared/data)")
    parser.add_argument("--n-dist", type=int, default=200, help="D_dist examples drawn from validation")
    parser.add_argument("--n-test", type=int, default=300, help="D_test examples drawn from validation (disjoint)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw and of the search's statistics")
    parser.add_argument("--out", default="runs/boolq_calibration", help="run directory (resumes when it exists)")
    parser.add_argument("--batch-size", type=int, default=8, help="examples per forward pass")
    parser.add_argument("--max-passage-words", type=int, default=None,
                        help="draw only rows whose passage has at most this many words (shorter forward passes)")
    parser.add_argument("--k", type=int, default=QUICK["k"], help="largest subset size (default: --quick's)")
    parser.add_argument("--pool", type=int, default=QUICK["pool_size"], help="pool size (default: --quick's)")
    parser.add_argument("--n-null", type=int, default=QUICK["n_null"], help="random head sets in the null")
    parser.add_argument("--no-posthoc", action="store_true", help="skip the post-hoc test gains of every subset")
    parser.add_argument("--heads", default=None,
                        help="no search: evaluate these heads (e.g. L1H3) and the intact model, and print the calibration")
    args = parser.parse_args()
    task = boolq_from_validation(task_data_dir(args.data_dir, needs=["boolq/dev.jsonl"]), args.n_dist, args.n_test, args.seed, args.max_passage_words)
    model = cl.load_model(args.model)
    if args.heads:
        print(heads_report(model, task, args.heads, args.seed, args.batch_size))
        return
    run = cl.search(model, task, out=args.out, scorer="attribution", seed=args.seed, batch_size=args.batch_size,
                    k=args.k, pool_size=args.pool, n_null=args.n_null, n_boot=QUICK["n_boot"],
                    posthoc=not args.no_posthoc, progress=False)
    print(run.result)


if __name__ == "__main__":
    main()

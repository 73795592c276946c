"""Attribution against exact stage-1 scores on SmolLM2-135M-Instruct, on a finished run's D_dist.

    PYTHONPATH=. python scripts/real_model_agreement.py RUN_DIR DATA_DIR [--layers 0,1,2,29]

The run's real rows score heads by attribution (one forward and backward pass) because exact
scoring of all 270 heads does not fit this machine. This measures, on the very D_dist the run
used (rebuilt from its manifest; the intact pass must reproduce the run's recorded bits), the exact
single-head gain of every head of ``--layers`` plus the run's pool, and compares the two rankings
on those heads (attribution as the run recorded it): Spearman's rho, top-m recall, and where the attribution pool's heads rank by exact.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import cel_lens as cl  # noqa: E402
from cel_lens.backends.local import LocalOracle  # noqa: E402
from cel_lens.heads import Head, HeadSet  # noqa: E402
from cel_lens.oracle import DIST_SPLIT  # noqa: E402
from cel_lens.runs import load_run  # noqa: E402
from cel_lens.runs.export import run_task  # noqa: E402
from cel_lens.scoring import rank_agreement  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("data_dir")
    p.add_argument("--layers", default="0,1,2,29")
    args = p.parse_args()
    torch.set_num_threads(1)
    run = load_run(args.run)
    task = run_task(run, data_dir=args.data_dir)  # both splits checked against the manifest's content hashes
    model = cl.load_model("smollm2-135m")
    recorded = {(e.split, str(HeadSet.parse(e.heads))): e.correct for e in run.evaluations}
    pool_heads = [Head.parse(h) for h in [e for e in run.events if e.get("event") == "pool"][-1]["pool"]]
    attr = torch.tensor([e for e in run.events if e.get("event") == "stage1_scores"][-1]["scores"])  # the run's own
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = sorted({Head(l, h) for l in map(int, args.layers.split(",")) for h in range(H)} | set(pool_heads))
    oracle = LocalOracle(model, task, batch_size=16, progress=True)
    rows = oracle.evaluate(DIST_SPLIT, [HeadSet(), *[HeadSet([h]) for h in heads]])
    same = bool(torch.equal(rows[0].bool(), recorded[("dist", "intact")].bool()))
    exact = rows[1:].float().mean(1) - rows[0].float().mean()
    approx = torch.stack([attr[h.layer, h.head] for h in heads])
    agreement = rank_agreement(approx[:, None], exact[:, None], top=(3, 6))
    order = sorted(range(len(heads)), key=lambda i: -float(exact[i]))
    rank = {heads[i]: r + 1 for r, i in enumerate(order)}
    out = {
        "run": args.run, "n_dist": len(task.dist), "heads_compared": len(heads), "layers": args.layers,
        "intact_reproduces_run": same, "intact_dist_acc": float(rows[0].float().mean()), **agreement,
        "exact_ties_at_zero": int((exact == 0).sum()),
        "pool": {str(h): {"attribution": float(attr[h.layer, h.head]), "exact_pp": 100 * float(exact[heads.index(h)]),
                          "exact_rank": rank[h]} for h in pool_heads},
        "exact_top6": {str(heads[i]): 100 * float(exact[i]) for i in order[:6]},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

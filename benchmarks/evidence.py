"""Evidence for the statistics around a search (quality, not speed): ``python -m benchmarks.evidence``.

* **null calibration**: on a 28x24-head synthetic model where no head has any effect (head sets differ
  only by independent 10% label noise), the random-subset null's p-value of the subset the search
  selects; it should be uniform: P(p <= alpha) about alpha, and a small Kolmogorov distance;
* **compressed-sensing pool recall**: planted 8x16 and 28x24 models (three beneficial heads of +3,
  +2 and +1.5 pp, ten harmful ones, a N(0, 0.3 pp) background, 2% label noise, 2,000 discovery
  examples): how many beneficial heads the default pool of 12 holds, from compressed sensing and from
  the exact scores, how many compressed scores are exactly 0, and the +3 pp head's estimate;
* **attribution on multiple choice**: random tiny models, four-choice questions labelled by what the
  model answers with one head ablated (acc and acc_norm): Spearman correlation of attribution scores
  with the exact accuracy gains, and the share of helpful heads (exact gain > 0) in the top 5, for
  the differentiated metric of :func:`cel_lens.evaluation.logprob_metric` and for the log-prob of
  the correct choice alone;
* **calibration, prior vs capability head** (:mod:`benchmarks.evidence_calibration`): how often the
  answer-prior calibration keeps a planted capability head's gain and removes a planted prior head's.

* **claims** (:mod:`benchmarks.claims`): before/after numbers on planted oracles for exact S-hat
  recovery, reported vs observed stability, "nothing helps", interval coverage and the grid's FWER.

It runs against whichever ``cel_lens`` is importable (so an older checkout on ``PYTHONPATH`` gives
the numbers before a change; the multiple-choice part needs the current one). ``--quick``: fewer seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

import numpy as np
import torch

from cel_lens.config import SearchConfig
from cel_lens.heads import Head, HeadSet
from cel_lens.scoring import compressed_scores, exact_scores
from cel_lens.selection import candidate_pool, run_search
from cel_lens.testing import SyntheticOracle, realistic_oracle

CHOICES = (" yes", " no", " 143", " the river", " 7 times", " water")


def null_calibration(seeds: int) -> dict[str, float]:
    """P(p <= alpha) for alpha in 0.05, 0.1, 0.25 and the Kolmogorov distance to the uniform."""
    ps = []
    for seed in range(seeds):
        oracle = SyntheticOracle(28, 24, n_dist=500, n_test=500, noise=0.1, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = run_search(oracle, SearchConfig(k=1, pool_size=12, n_null=99, n_boot=1, posthoc=False, seed=seed,
                                                n_stability=0), progress=False)
        ps.append(r.null.p)
    p = np.sort(np.array(ps, dtype=float))
    out = {f"P(p<={a})": float((p <= a).mean()) for a in (0.05, 0.1, 0.25)}
    out["P(p=0)"] = float((p == 0).mean())
    out["KS"] = float(np.max(np.abs(np.arange(1, len(p) + 1) / len(p) - p)))
    return out


def pool_recall(n_layers: int, n_heads: int, seeds: int) -> dict[str, object]:
    """Beneficial heads in the pool of 12 (compressed vs exact), exact zeros, the +3 pp estimate."""
    cs, ex, zeros, top = [], [], [], []
    for seed in range(seeds):
        oracle, good = realistic_oracle(n_layers, n_heads, seed)
        approx = compressed_scores(oracle, seed=seed, progress=False)
        cs.append(len(set(candidate_pool(approx, 12)) & good))
        ex.append(len(set(candidate_pool(exact_scores(oracle), 12)) & good))
        zeros.append(int((approx == 0).sum()))
        best = max(good, key=lambda h: float(oracle.effect_matrix[h.layer, h.head]))
        top.append(round(100 * float(approx[best.layer, best.head]), 2))
    return {"compressed": cs, "exact": ex, "worst_vs_exact": min(c - e for c, e in zip(cs, ex)),
            "exact_zeros": zeros, "+3pp_head_pp": top}


def _planted_choices(model, heads: str, metric: str, seed: int):
    from cel_lens.evaluation import evaluate
    from cel_lens.tasks import Example, Split

    rng = np.random.default_rng(seed)
    examples = []
    for i in range(60):
        a, b = (int(x) for x in rng.integers(0, 99, size=2))
        choices = tuple(str(c) for c in rng.choice(CHOICES, size=4, replace=False))
        examples.append(Example(f"mc/{i}", f"Question: What is {a} plus {b}?\nAnswer:", choices=choices, label=0))
    split = Split("dist", tuple(examples), "mc", answer_type="multiple_choice", metric=metric)
    ll = evaluate(model, split, [HeadSet.parse(heads)], progress=False).extra["choice_ll"][0]
    chars = torch.tensor([[len(c) - 1 for c in e.choices] for e in examples], dtype=ll.dtype)
    labels = (ll / chars if metric == "acc_norm" else ll).argmax(-1).tolist()
    return Split("dist", tuple(Example(e.id, e.prompt, choices=e.choices, label=y) for e, y in zip(examples, labels)),
                 "mc", answer_type="multiple_choice", metric=metric)


def attribution_ranking(models: int) -> dict[str, dict[str, float]]:
    """Ranking quality of attribution against exact gains, for two differentiated metrics."""
    from scipy.stats import spearmanr

    import cel_lens.scoring.attribution as attribution
    from cel_lens.evaluation import evaluate
    from cel_lens.evaluation import logprob_metric
    from cel_lens.testing import tiny_hooked_transformer

    def correct_choice_alone(model, batch, fwd_hooks=(), *, metric="acc"):
        # the batch's answer row is the labelled choice: scored as exact match, its summed log-prob
        return logprob_metric(model, dataclasses.replace(batch, answer_type="exact_match"), fwd_hooks)

    variants = {"correct choice's log-prob alone": correct_choice_alone, "logprob_metric": logprob_metric}
    scores: dict[str, dict[str, list[float]]] = {v: {"spearman": [], "helpful_in_top5": []} for v in variants}
    for seed in range(models):
        model = tiny_hooked_transformer(n_layers=4, n_heads=6, seed=seed)
        L, H = model.cfg.n_layers, model.cfg.n_heads
        singles = [HeadSet()] + [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)]
        for metric in ("acc", "acc_norm"):
            for planted in ("L1H2", "L2H0", "L3H5"):
                split = _planted_choices(model, planted, metric, seed)
                acc = evaluate(model, split, singles, progress=False).correct.double().mean(1)
                gains = (acc[1:] - acc[0]).numpy()
                if gains.max() <= 0:
                    continue
                helpful = set(np.flatnonzero(gains > 0))
                for name, fn in variants.items():
                    attribution.logprob_metric = fn
                    try:
                        at = attribution.attribution_scores(model, split, batch_size=16, progress=False).flatten().numpy()
                    finally:
                        attribution.logprob_metric = logprob_metric
                    scores[name]["spearman"].append(float(spearmanr(at, gains).statistic))
                    scores[name]["helpful_in_top5"].append(len(helpful & set(np.argsort(-at)[:5])) / min(5, len(helpful)))
    return {name: {k: float(np.mean(v)) for k, v in d.items()} | {"cases": len(d["spearman"])} for name, d in scores.items()}


def main() -> None:
    """Print the checks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds (a rough read in a minute or two)")
    parser.add_argument("--only", choices=["null", "pool", "attribution", "claims", "calibration"], default=None, help="run one check")
    args = parser.parse_args()
    torch.set_num_threads(1)
    q = args.quick
    if args.only in (None, "null"):
        print("null calibration (28x24, no effect):", null_calibration(40 if q else 200), flush=True)
    if args.only in (None, "pool"):
        for shape, seeds in (((8, 16), 4 if q else 10), ((28, 24), 2 if q else 5)):
            print(f"pool recall {shape[0]}x{shape[1]}:", pool_recall(*shape, seeds), flush=True)
    if args.only in (None, "attribution"):
        print("attribution on multiple choice:", attribution_ranking(2 if q else 8), flush=True)
    if args.only in (None, "claims"):  # before/after: parsimony, stability, guardrails, intervals, the grid
        from benchmarks.claims import main as claims

        claims(q)
    if args.only in (None, "calibration"):  # imported here: older checkouts have no calibration to import
        from benchmarks.evidence_calibration import prior_vs_capability

        print("calibration, prior vs capability head:", prior_vs_capability(40 if q else 200), flush=True)


if __name__ == "__main__":
    main()

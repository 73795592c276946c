"""Algorithm 1 over an evaluation oracle: stage 1 -> stage 2 -> fix the selection -> test statistics.

Each step is one function, and :func:`run_search` calls them in order:

1. :func:`stage1` — the discovery gain of ablating each head alone
   (:func:`cel_lens.scoring.exact_scores`), or scores from another scorer;
2. :func:`stage2` — the top ``pool_size`` heads form the pool, every subset of size 1..k is
   evaluated jointly on D_dist, and the best is S-hat (:mod:`cel_lens.selection.subsets`);
3. :func:`fix_selection` — S-hat is recorded (with a journal: the ``selected`` event) *before* any
   test-split evaluation, and a rerun may not change it;
4. :func:`test_statistics` — intact and ablated test accuracy, Δ with a paired bootstrap CI, the
   exact McNemar p-value, a random-subset null and the post-hoc test gains of every subset.

The search knows nothing of models: everything goes through the oracle (:mod:`cel_lens.oracle`).
A :class:`~cel_lens.oracle.MemoOracle` with a journal (a run directory) records every step.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import Journal, MemoOracle, Oracle, call_oracle, evaluate_chunked
from cel_lens.scoring.exact import exact_scores
from cel_lens.selection.pool import DEFAULT_POOL_SIZE, candidate_pool
from cel_lens.selection.result import DEFAULT_N_NULL, Result
from cel_lens.selection.subsets import DEFAULT_K, Strategy, SubsetScore, evaluate_subsets, select_best
from cel_lens.stats import mcnemar_exact, null_fraction, paired_bootstrap_ci, random_subset_null

__all__ = ["stage1", "stage2", "fix_selection", "test_statistics", "run_search"]


def stage1(
    oracle: Oracle, scores: Optional[Tensor] = None, *, chunk: int = 64, progress: bool = False
) -> tuple[Bool[Tensor, " example"], Float[Tensor, "layer head"]]:
    """The intact model's D_dist correctness and the stage-1 scores (exact unless ``scores`` given,
    checked against the oracle's head layout)."""
    L, H = oracle.n_layers, oracle.n_heads
    intact = call_oracle(oracle, "dist", [HeadSet()], "intact")[0]
    if scores is None:
        scores = exact_scores(oracle, chunk=chunk, progress=progress)
    scores = torch.as_tensor(scores).detach().to(torch.float64).cpu()
    if tuple(scores.shape) != (L, H):
        raise ValueError(f"scores have shape {tuple(scores.shape)}, the oracle has [{L}, {H}] heads")
    return intact, scores


def stage2(
    oracle: Oracle,
    pool: list[Head],
    scores: Float[Tensor, "layer head"],
    intact: Bool[Tensor, " example"],
    *,
    k: int = DEFAULT_K,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    chunk: int = 64,
    progress: bool = False,
) -> tuple[list[SubsetScore], SubsetScore]:
    """Every evaluated subset of ``pool`` and the selected one (S-hat), all on D_dist."""
    subsets = evaluate_subsets(
        oracle, pool, k, strategy=strategy, beam_width=beam_width, scores=scores,
        intact=intact, chunk=chunk, progress=progress,
    )
    return subsets, select_best(subsets)


def fix_selection(oracle: Oracle, best: SubsetScore) -> None:
    """Record S-hat before the test split is read. With a journal, a ``selected`` event is appended
    (or, on a rerun, checked: a selection cannot change once D_test may have been read)."""
    journal: Optional[Journal] = getattr(oracle, "journal", None)
    if journal is None:
        return
    prev = journal.selection()
    if prev is None:
        journal.record_event("selected", heads=str(best.heads), dist_acc=best.dist_acc, dist_gain=best.dist_gain)
    elif prev.get("heads") != str(best.heads):
        raise RuntimeError(
            f"{getattr(journal, 'path', 'the run')} already selected {prev.get('heads')} before reading the test "
            f"split, but this search selects {best.heads}; a selection cannot change once D_test was read "
            "(did the scores or options change?)"
        )
    if isinstance(oracle, MemoOracle):
        oracle.note_selection()


def test_statistics(
    oracle: Oracle,
    best: SubsetScore,
    subsets: list[SubsetScore],
    *,
    n_null: int = DEFAULT_N_NULL,
    n_boot: int = 10000,
    alpha: float = 0.05,
    posthoc: bool = True,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = False,
) -> dict[str, Any]:
    """D_test statistics of S-hat: accuracies, gain, paired bootstrap CI, McNemar p, the null of
    ``n_null`` random head sets of |S-hat| heads, and every subset's record (with its post-hoc test
    gain when ``posthoc``: for plots only, choosing by it would leak the test split)."""
    pair = call_oracle(oracle, "test", [HeadSet(), best.heads], "test")
    intact, ablated = pair[0], pair[1]
    n_test = int(intact.shape[0])
    gain = (int(ablated.sum()) - int(intact.sum())) / n_test
    ci_low, ci_high = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, alpha=alpha, seed=seed)
    null = random_subset_null(
        lambda sets: evaluate_chunked(oracle, "test", sets, "null", chunk, progress),
        oracle.n_layers, oracle.n_heads, len(best.heads), n_null, seed, intact=intact, chunk=max(n_null, 1),
    )
    null_gains = [float(g) for g in null.gains]
    records = [s.to_dict() for s in subsets]
    if posthoc:
        post = evaluate_chunked(oracle, "test", [s.heads for s in subsets], "posthoc", chunk, progress)
        for record, c in zip(records, post):
            record["test_gain_posthoc"] = (int(c.sum()) - int(intact.sum())) / n_test
    return dict(
        test_acc_intact=float(intact.to(torch.float64).mean()),
        test_acc_ablated=float(ablated.to(torch.float64).mean()),
        gain=gain, ci_low=ci_low, ci_high=ci_high, p_value=mcnemar_exact(intact, ablated),
        null_gains=null_gains, null_p=null_fraction(null_gains, gain), subsets=records, n_test=n_test,
    )


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0


def run_search(
    oracle: Oracle,
    *,
    k: int = DEFAULT_K,
    pool_size: int = DEFAULT_POOL_SIZE,
    scores: Optional[Float[Tensor, "layer head"]] = None,
    scorer: Optional[str] = None,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    n_null: int = DEFAULT_N_NULL,
    n_boot: int = 10000,
    alpha: float = 0.05,
    posthoc: bool = True,
    seed: int = 0,
    chunk: int = 64,
    progress: bool = True,
) -> Result:
    """Algorithm 1 over ``oracle`` (see the module docstring); returns the :class:`Result`.

    ``scores`` are precomputed stage-1 scores from another scorer (named by ``scorer``; by default
    the exact scores are computed). The oracle is wrapped in a :class:`~cel_lens.oracle.MemoOracle`
    unless it is one, so nothing is evaluated twice; when it carries a journal (a run directory,
    :class:`cel_lens.runs.RecordingOracle`), every step is recorded, the selection before D_test is
    read, and ``result.json`` at the end; a rerun resumes from the record and must select the same
    subset. ``seed`` seeds the null draw and the bootstrap; ``chunk`` head sets go to the oracle per call.
    """
    memo = oracle if isinstance(oracle, MemoOracle) else MemoOracle(oracle)
    journal = memo.journal
    name = scorer or ("exact" if scores is None else "given")
    options = dict(
        k=k, pool_size=pool_size, scorer=name, strategy=strategy,
        beam_width=beam_width if strategy == "beam" else None, n_null=n_null,
        n_boot=n_boot, alpha=alpha, posthoc=posthoc, seed=seed,
    )
    if journal is not None:
        journal.record_event("search_started", options=options)
    timings: dict[str, float] = {}
    with _timed(timings, "stage1_s"):
        intact, scores = stage1(memo, scores, chunk=chunk, progress=progress)
    if journal is not None and not any(e.get("scorer") == name for e in journal.events("stage1_scores")):
        # kept so that a resumed pipeline can reuse scores that are costly or not bit-reproducible
        journal.record_event("stage1_scores", scorer=name, scores=scores.tolist())
    with _timed(timings, "stage2_s"):
        pool = candidate_pool(scores, pool_size)
        if journal is not None:
            journal.record_event("pool", scorer=name, pool=[str(h) for h in pool])
        subsets, best = stage2(
            memo, pool, scores, intact, k=k, strategy=strategy, beam_width=beam_width, chunk=chunk, progress=progress
        )
    fix_selection(memo, best)
    with _timed(timings, "test_s"):
        stats = test_statistics(
            memo, best, subsets, n_null=n_null, n_boot=n_boot, alpha=alpha,
            posthoc=posthoc, seed=seed, chunk=chunk, progress=progress,
        )
    result = Result(
        heads=str(best.heads), dist_acc_intact=float(intact.to(torch.float64).mean()),
        dist_acc_ablated=best.dist_acc, dist_gain=best.dist_gain, **stats,
        scores=scores.tolist(), scorer=name, pool=[str(h) for h in pool], k=k, pool_size=pool_size,
        n_dist=int(intact.shape[0]), seed=seed, n_layers=memo.n_layers, n_heads=memo.n_heads,
        strategy=strategy, beam_width=options["beam_width"], n_null=n_null, n_boot=n_boot, alpha=alpha,
        selected_before_test=True, timings=timings,
    )
    if journal is not None:
        journal.write_result(result.to_dict())
        journal.record_event("finished", heads=result.heads, gain=result.gain)
    return result

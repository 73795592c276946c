"""Algorithm 1 over an evaluation oracle: stage 1 -> stage 2 -> fix the selection -> test statistics.

Each step is one function, and :func:`run_search` calls them in order:

1. :func:`stage1` — the discovery gain of ablating each head alone
   (:func:`cel_lens.scoring.exact_scores`), or :class:`~cel_lens.oracle.Stage1Scores` from another
   scorer, refused unless computed on D_dist;
2. :func:`stage2` — the top ``pool_size`` heads form the pool, every subset of size 1..k is
   evaluated jointly on D_dist, and the best is S-hat (:mod:`cel_lens.selection.subsets`); its
   selection stability is measured on bootstrap resamples of D_dist from the recorded bits
   (:mod:`cel_lens.selection.stability`), and, as an option, stage 2 is rerun on random pools
   (:mod:`cel_lens.selection.specificity`);
3. :func:`fix_selection` — S-hat is fixed in the :class:`~cel_lens.oracle.MemoOracle` (with a
   journal: the ``selected`` event) *before* any test-split evaluation, and a rerun may not change it;
4. :func:`test_statistics` — intact and ablated test accuracy, Δ with a paired bootstrap CI, the
   exact McNemar p-value, a random-subset null and the post-hoc test gains of every subset.

The search knows nothing of models: everything goes through the oracle (:mod:`cel_lens.oracle`),
wrapped in a :class:`~cel_lens.oracle.MemoOracle` that refuses the test split before step 3, with
or without a journal (a run directory, which then records every step).
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import (
    DIST_SPLIT,
    MemoOracle,
    Oracle,
    Stage1Scores,
    TestSplitError,
    call_oracle,
    discovery_scores,
    evaluate_chunked,
)
from cel_lens.scoring.exact import exact_scores
from cel_lens.selection.calibration import calibration_statistics
from cel_lens.selection.pool import DEFAULT_POOL_SIZE, candidate_pool
from cel_lens.selection.result import DEFAULT_N_NULL, Result, nonpositive_gain_warning
from cel_lens.selection.specificity import random_pool_winners, specificity_statistics
from cel_lens.selection.stability import DEFAULT_N_STABILITY, selection_stability
from cel_lens.selection.subsets import DEFAULT_K, Strategy, SubsetScore, evaluate_subsets, select_best
from cel_lens.stats import mcnemar_exact, paired_bootstrap_ci, random_subset_null

__all__ = ["stage1", "stage2", "fix_selection", "test_statistics", "run_search"]


def stage1(
    oracle: Oracle, scores: Optional[Stage1Scores] = None, *, chunk: int = 64, progress: bool = False
) -> tuple[Bool[Tensor, " example"], Stage1Scores]:
    """The intact model's D_dist correctness and the stage-1 scores: exact unless ``scores`` are
    given, which must be :class:`~cel_lens.oracle.Stage1Scores` computed on D_dist with the oracle's
    head layout (anything else raises before a single evaluation)."""
    L, H = oracle.n_layers, oracle.n_heads
    if scores is not None:
        scores = discovery_scores(scores, L, H)
    intact = call_oracle(oracle, DIST_SPLIT, [HeadSet()], "intact")[0]
    if scores is None:
        scores = Stage1Scores(exact_scores(oracle, chunk=chunk, progress=progress), DIST_SPLIT, "exact")
    return intact, scores


def stage2(
    oracle: Oracle,
    pool: list[Head],
    scores: Stage1Scores | Tensor,
    intact: Bool[Tensor, " example"],
    *,
    k: int = DEFAULT_K,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    chunk: int = 64,
    progress: bool = False,
) -> tuple[list[SubsetScore], SubsetScore]:
    """Every evaluated subset of ``pool`` and the selected one (S-hat), all on D_dist."""
    values = scores.values if isinstance(scores, Stage1Scores) else scores
    subsets = evaluate_subsets(
        oracle, pool, k, strategy=strategy, beam_width=beam_width, scores=values,
        intact=intact, chunk=chunk, progress=progress,
    )
    return subsets, select_best(subsets)


def fix_selection(oracle: Oracle, best: SubsetScore) -> bool:
    """Fix S-hat in the :class:`~cel_lens.oracle.MemoOracle` before the test split is read (with a
    journal: a ``selected`` event is appended, or on a rerun checked: a selection cannot change once
    D_test may have been read). Returns whether it was fixed before any test read."""
    if not isinstance(oracle, MemoOracle):
        raise TypeError("fix_selection needs the search's MemoOracle (it holds the test-split guard)")
    return oracle.fix_selection(best.heads, dist_acc=best.dist_acc, dist_gain=best.dist_gain)


def _check_fixed(oracle: Oracle, best: SubsetScore) -> None:
    if not isinstance(oracle, MemoOracle) or oracle.selection != best.heads:
        raise TestSplitError(
            f"test statistics of {best.heads} need the search's MemoOracle with that selection fixed first "
            "(fix_selection): D_test is read only after S-hat is fixed"
        )


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
    """D_test statistics of S-hat (``oracle``: the search's MemoOracle, S-hat fixed): accuracies,
    gain, paired bootstrap CI, McNemar p, the null of ``n_null`` random head sets of |S-hat| heads
    other than S-hat (all of them when there are at most ``n_null``), and every subset's record
    (with its post-hoc test gain when ``posthoc``: for plots only, choosing by it would leak the
    test split)."""
    _check_fixed(oracle, best)
    pair = call_oracle(oracle, "test", [HeadSet(), best.heads], "test")
    intact, ablated = pair[0], pair[1]
    n_test = int(intact.shape[0])
    gain = (int(ablated.sum()) - int(intact.sum())) / n_test
    ci_low, ci_high = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, alpha=alpha, seed=seed)
    null = random_subset_null(
        lambda sets: evaluate_chunked(oracle, "test", sets, "null", chunk, progress),
        oracle.n_layers, oracle.n_heads, len(best.heads), n_null, seed, exclude=[best.heads],
        intact=intact, chunk=max(n_null, 1),
    )
    records = [s.to_dict() for s in subsets]
    if posthoc:
        post = evaluate_chunked(oracle, "test", [s.heads for s in subsets], "posthoc", chunk, progress)
        for record, c in zip(records, post):
            record["test_gain_posthoc"] = (int(c.sum()) - int(intact.sum())) / n_test
    return dict(
        test_acc_intact=float(intact.to(torch.float64).mean()),
        test_acc_ablated=float(ablated.to(torch.float64).mean()),
        gain=gain, ci_low=ci_low, ci_high=ci_high, p_value=mcnemar_exact(intact, ablated),
        null_gains=[float(g) for g in null.gains], null_p=null.p_value(gain), null_min_p=null.min_p,
        null_exhaustive=null.exhaustive, subsets=records, n_test=n_test,
        calibration=calibration_statistics(oracle, best.heads, n_boot=n_boot, alpha=alpha, seed=seed),
    )


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0


def _stability(memo: MemoOracle, subsets: list[SubsetScore], n_resamples: int, seed: int) -> Optional[dict[str, Any]]:
    """Selection stability from the recorded D_dist bits (all answered from memory)."""
    if n_resamples < 1:
        return None
    bits = memo.evaluate(DIST_SPLIT, [s.heads for s in subsets], stage="stage2")
    return selection_stability(subsets, bits, n_resamples=n_resamples, seed=seed)


def _record_start(memo: MemoOracle, **options: Any) -> None:
    """The journal's ``search_started`` event: the options and the head layout (what a figure of an
    unfinished run needs before any result exists)."""
    if memo.journal is not None:
        memo.journal.record_event("search_started", n_layers=memo.n_layers, n_heads=memo.n_heads, options=options)


def run_search(
    oracle: Oracle,
    *,
    k: int = DEFAULT_K,
    pool_size: int = DEFAULT_POOL_SIZE,
    scores: Optional[Stage1Scores] = None,
    scorer: Optional[str] = None,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    n_null: int = DEFAULT_N_NULL,
    n_boot: int = 10000,
    alpha: float = 0.05,
    posthoc: bool = True,
    seed: int = 0,
    n_stability: int = DEFAULT_N_STABILITY,
    n_specificity: int = 0,
    chunk: int = 64,
    progress: bool = True,
) -> Result:
    """Algorithm 1 over ``oracle`` (see the module docstring); returns the :class:`Result`.

    ``scores``: :class:`~cel_lens.oracle.Stage1Scores` of another scorer, refused unless computed on
    D_dist (``scorer`` renames them); default: exact scores. The oracle is wrapped in a
    :class:`~cel_lens.oracle.MemoOracle` unless it is one (nothing evaluated twice, the test split
    refused until S-hat is fixed); with a journal (:class:`cel_lens.runs.RecordingOracle`) every
    step is recorded and a rerun resumes and must select the same subset. ``seed`` seeds the null,
    the bootstrap and the selection stability (``n_stability`` resamples of D_dist, no forward
    pass; 0 skips it); ``n_specificity`` > 0 reruns stage 2 on that many random pools
    (:mod:`cel_lens.selection.specificity`); ``chunk`` head sets go to the oracle per call.
    """
    if k > pool_size:
        raise ValueError(f"k={k} is larger than the pool ({pool_size} heads): every subset is drawn from the pool")
    memo = oracle if isinstance(oracle, MemoOracle) else MemoOracle(oracle)
    journal = memo.journal
    given = None if scores is None else discovery_scores(scores, memo.n_layers, memo.n_heads)
    name = scorer or (given.scorer if given is not None else "exact")
    beam = beam_width if strategy == "beam" else None
    _record_start(memo, k=k, pool_size=pool_size, scorer=name, strategy=strategy, beam_width=beam, n_null=n_null,
                  n_boot=n_boot, alpha=alpha, posthoc=posthoc, seed=seed,
                  **({"n_specificity": n_specificity} if n_specificity else {}))
    timings: dict[str, float] = {}
    with _timed(timings, "stage1_s"):
        intact, stage1_scores = stage1(memo, given, chunk=chunk, progress=progress)
    if journal is not None and not any(e.get("scorer") == name for e in journal.events("stage1_scores")):
        # kept so that a resumed pipeline can reuse scores that are costly or not bit-reproducible
        journal.record_event("stage1_scores", **{**stage1_scores.record(), "scorer": name})
    search = dict(k=k, strategy=strategy, beam_width=beam_width, chunk=chunk, progress=progress)
    with _timed(timings, "stage2_s"):
        pool = candidate_pool(stage1_scores.values, pool_size)
        if journal is not None:
            journal.record_event("pool", scorer=name, pool=[str(h) for h in pool])
        subsets, best = stage2(memo, pool, stage1_scores, intact, **search)
        stability = _stability(memo, subsets, n_stability, seed)
        if n_specificity:  # on D_dist, before the selection is fixed
            winners, n_possible = random_pool_winners(
                memo, pool, n_specificity, seed=seed, intact=intact, scores=stage1_scores.values, **search
            )
    if best.dist_gain <= 0:
        warnings.warn(nonpositive_gain_warning(best.dist_gain), UserWarning, stacklevel=2)
    selected_before_test = fix_selection(memo, best)
    with _timed(timings, "test_s"):
        stats = test_statistics(
            memo, best, subsets, n_null=n_null, n_boot=n_boot, alpha=alpha,
            posthoc=posthoc, seed=seed, chunk=chunk, progress=progress,
        )
        if n_specificity:
            stats["specificity"] = specificity_statistics(memo, winners, stats["gain"], n_possible, chunk=chunk)
    result = Result(
        heads=str(best.heads), dist_acc_intact=float(intact.to(torch.float64).mean()),
        dist_acc_ablated=best.dist_acc, dist_gain=best.dist_gain, **stats,
        scores=stage1_scores.values.tolist(), scorer=name, scores_split=stage1_scores.split,
        pool=[str(h) for h in pool], k=k, pool_size=pool_size, n_dist=int(intact.shape[0]), seed=seed,
        n_layers=memo.n_layers, n_heads=memo.n_heads, strategy=strategy, beam_width=beam, n_null=n_null,
        n_boot=n_boot, alpha=alpha, selected_before_test=selected_before_test,
        selection_stability=stability, timings=timings,
    )
    if journal is not None:
        journal.write_result(result.to_dict())
        journal.record_event("finished", heads=result.heads, gain=result.gain)
    return result

"""Algorithm 1 over an evaluation oracle: stage 1 -> stage 2 -> fix the selection -> test statistics.

Each step is one function, and :func:`run_search` calls them in order:

1. :func:`stage1` — the discovery gain of ablating each head alone
   (:func:`cel_lens.scoring.exact_scores`), or :class:`~cel_lens.oracle.Stage1Scores` from another
   scorer, refused unless computed on D_dist;
2. :func:`stage2` — the top ``pool_size`` heads form the pool, every subset of size 1..k is
   evaluated jointly on D_dist, and S-hat is the smallest subset within one standard error of the
   best (:mod:`cel_lens.selection.parsimony`); from the recorded bits alone, its stability with the
   whole selection redone on bootstrap resamples and on split halves
   (:mod:`cel_lens.selection.reselect`) and the selection-adjusted test of "any ablation helps"
   (:mod:`cel_lens.selection.guardrails`); as an option, stage 2 is rerun on random pools
   (:mod:`cel_lens.selection.specificity`);
3. :func:`fix_selection` — S-hat is fixed in the :class:`~cel_lens.selection.memo.MemoOracle` (with a
   journal: the ``selected`` event) *before* any test-split evaluation, and a rerun may not change it;
   a read of D_test recorded in the seal's ledger before this moment (:mod:`cel_lens.evaluation.seal`)
   makes ``selected_before_test`` false, with the reason;
4. :func:`test_statistics` — intact and ablated test accuracy, Δ with Tango's interval, the exact
   McNemar p-values (two-sided, and one-sided for "ablation helps"), each head's leave-one-out
   contribution (:mod:`cel_lens.selection.paired`), a random-subset null, and, on request, the
   post-hoc test gains of every subset (exploratory).

The search knows nothing of models: everything goes through the oracle (:mod:`cel_lens.oracle`),
wrapped in a :class:`~cel_lens.selection.memo.MemoOracle` that refuses the test split before step 3, with
or without a journal (a run directory, which then records every step).
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.evaluation.seal import describe_reads, summarize_read
from cel_lens.config import STRATEGIES, SearchConfig
from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import (
    CONTROLS,
    DIST_SPLIT,
    Oracle,
    Stage1Scores,
    TestSplitError,
    call_oracle,
    capabilities,
    discovery_scores,
    evaluate_chunked,
)
from cel_lens.scoring.exact import exact_scores
from cel_lens.selection.calibration import calibration_statistics
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.pool import DEFAULT_POOL_SIZE, candidate_pool
from cel_lens.selection.ranking import CALIBRATED, CalibratedDist, ranking_view
from cel_lens.selection.records import AdjustedTest, CalibrationRecord, LeaveOneOut, SealRecord, SubsetRecord
from cel_lens.selection.result import Result, nonpositive_gain_warning
from cel_lens.selection.result_parts import Controls, Discovery, NullTest, Stability, TestOutcome
from cel_lens.selection.specificity import random_pool_winners, specificity_statistics
from cel_lens.selection.guardrails import nothing_helps_warning, selection_adjusted_test
from cel_lens.selection.paired import enhancement_decision, leave_one_out, mcnemar_enhancement_p, paired_interval
from cel_lens.selection.parsimony import select_parsimonious
from cel_lens.selection.reselect import Reselector, reselecting_stability, singles_from, split_half_agreement
from cel_lens.selection.stability import selection_stability
from cel_lens.selection.subsets import DEFAULT_K, SubsetScore, evaluate_subsets, select_best
from cel_lens.stats import mcnemar_exact, random_subset_null

__all__ = ["stage1", "stage2", "fix_selection", "test_statistics", "HeldOut", "run_search", "RESUMED_SETS"]


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
    strategy: str = SearchConfig.strategy,
    beam_width: int = SearchConfig.beam_width,
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


def fix_selection(oracle: Oracle, best: SubsetScore, prior_reads: Sequence[dict[str, Any]] = ()) -> bool:
    """Fix S-hat in the :class:`~cel_lens.selection.memo.MemoOracle` before the test split is read (with a
    journal: a ``selected`` event is appended, or on a rerun checked: a selection cannot change once
    D_test may have been read). ``prior_reads``: the seal ledger's reads of this model's D_test
    before now (:mod:`cel_lens.evaluation.seal`). Returns whether it was fixed before any test read."""
    if not isinstance(oracle, MemoOracle):
        raise TypeError("fix_selection needs the search's MemoOracle (it holds the test-split guard)")
    return oracle.fix_selection(best.heads, prior_reads=prior_reads, dist_acc=best.dist_acc, dist_gain=best.dist_gain)


def seal_record(memo: MemoOracle) -> SealRecord:
    """What the result says about the sealed test split: how many reads of D_test the ledger held
    before the selection, the first of them, and the reason ``selected_before_test`` is false."""
    reads = list(memo.prior_reads)
    reason = None
    if memo.selected_before_test is False:
        reason = describe_reads(reads) if reads else "the test split was read through this search's oracle first"
    return {"prior_test_reads": len(reads), "reads": reads[:5], "reason": reason}


def _prior_reads(memo: MemoOracle, test_reads: Optional[Callable[[], Sequence[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The ledger's reads of this model's D_test now (``test_reads``, else the wrapped oracle's
    reads, declared :data:`~cel_lens.oracle.TEST_READS`; none for oracles without a model and task)."""
    return [summarize_read(r) for r in (test_reads() if test_reads is not None else memo.test_reads())]


def _check_fixed(oracle: Oracle, best: SubsetScore) -> MemoOracle:
    """``oracle`` when it is the search's MemoOracle with ``best`` fixed (else D_test is refused)."""
    if not isinstance(oracle, MemoOracle) or oracle.selection != best.heads:
        raise TestSplitError(
            f"test statistics of {best.heads} need the search's MemoOracle with that selection fixed first "
            "(fix_selection): D_test is read only after S-hat is fixed"
        )
    return oracle


@dataclass
class HeldOut:
    """What :func:`test_statistics` reads off D_test: S-hat's :class:`~cel_lens.selection.result.TestOutcome`
    and :class:`~cel_lens.selection.result.NullTest`, each head's ``leave_one_out`` contribution,
    the ``calibration`` record (``None`` without an answer key), every stage-2 subset's record
    (``subsets``, with its post-hoc test gain when asked for) and ``n_test``."""

    test: TestOutcome
    null: NullTest
    leave_one_out: LeaveOneOut
    calibration: Optional[CalibrationRecord]
    subsets: list[SubsetRecord]
    n_test: int


def test_statistics(
    oracle: Oracle,
    best: SubsetScore,
    subsets: list[SubsetScore],
    config: SearchConfig = SearchConfig(),
    *,
    alpha: float = 0.05,
    chunk: int = 64,
    progress: bool = False,
) -> HeldOut:
    """D_test statistics of S-hat (``oracle``: the search's MemoOracle, S-hat fixed) under
    ``config``: accuracies, gain, its interval (``config.ci_method``,
    :func:`~cel_lens.selection.paired.paired_interval`), the two-sided McNemar p and the one-sided
    ``p_enhance`` ("ablation helps"), whether the selection came before any read of D_test and the
    seal's record of it, each head's leave-one-out contribution
    (:func:`~cel_lens.selection.paired.leave_one_out`), the null of ``n_null`` random head sets of
    |S-hat| heads other than S-hat (all of them when there are at most ``n_null``; it asks "better
    than random heads?", not "better than intact?"), and every subset's record, with its post-hoc
    test gain only when ``posthoc`` (exploratory: choosing by it would leak the test split)."""
    memo = _check_fixed(oracle, best)
    clean, seal = bool(memo.selected_before_test), seal_record(memo)
    n_null, n_boot, seed = config.n_null, config.n_boot, config.seed
    pair = call_oracle(oracle, "test", [HeadSet(), best.heads], "test")
    intact, ablated = pair[0], pair[1]
    n_test = int(intact.shape[0])
    gain = (int(ablated.sum()) - int(intact.sum())) / n_test
    ci_low, ci_high = paired_interval(intact, ablated, alpha, config.ci_method, n_boot=n_boot, seed=seed)
    loo = leave_one_out(lambda sets: call_oracle(oracle, "test", sets, "leave_one_out"), best.heads, ablated, alpha=alpha)
    null = random_subset_null(
        lambda sets: evaluate_chunked(oracle, "test", sets, "null", chunk, progress),
        oracle.n_layers, oracle.n_heads, len(best.heads), n_null, seed, exclude=[best.heads],
        intact=intact, chunk=max(n_null, 1),
    )
    records = [s.to_dict() for s in subsets]
    if config.posthoc:
        post = evaluate_chunked(oracle, "test", [s.heads for s in subsets], "posthoc", chunk, progress)
        for record, c in zip(records, post):
            record["test_gain_posthoc"] = (int(c.sum()) - int(intact.sum())) / n_test
    test = TestOutcome(
        acc_intact=float(intact.to(torch.float64).mean()), acc_ablated=float(ablated.to(torch.float64).mean()),
        gain=gain, ci_low=ci_low, ci_high=ci_high, p_value=mcnemar_exact(intact, ablated), ci_method=config.ci_method,
        p_enhance=mcnemar_enhancement_p(intact, ablated), decision=enhancement_decision(intact, ablated, alpha),
        selected_before_test=clean, seal=seal,
    )
    return HeldOut(
        test=test, leave_one_out=loo, subsets=records, n_test=n_test,
        null=NullTest(gains=[float(g) for g in null.gains], p=null.p_value(gain), min_p=null.min_p,
                      exhaustive=null.exhaustive, n_null=n_null),
        calibration=calibration_statistics(oracle, best.heads, n_boot=n_boot, alpha=alpha, seed=seed),
    )


RESUMED_SETS = "resumed_sets"
"""The ``timings`` key (present only when non-zero) counting the head-set evaluations a search found
already answered when it started (a resumed run directory's, say): their time is not in its stage
seconds, which count this process's work only."""


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0


def _discovery_checks(
    memo: MemoOracle | CalibratedDist, subsets: list[SubsetScore], selected: HeadSet, intact: Tensor, config: SearchConfig, *,
    n_stability: int, alpha: float,
) -> tuple[Stability, Optional[AdjustedTest]]:
    """What the recorded D_dist bits say about the selection (``config``'s rule, pool, ``k``, seed
    and ``n_adjusted``), without a forward pass: its
    stability (the whole selection redone on bootstrap resamples when every single head is
    recorded, else stage 2 alone on a fixed pool), the split-half agreement, and the
    selection-adjusted test of "no head set helps" (:mod:`cel_lens.selection.guardrails`). ``memo``:
    the search's oracle as the ranking sees it (:func:`~cel_lens.selection.ranking.ranking_view`)."""
    stability, adjusted = Stability(), None
    rule, seed, n_adjusted = config.parsimony, config.seed, config.n_adjusted
    sets, bits = memo.recorded(DIST_SPLIT)
    sub_bits = memo.evaluate(DIST_SPLIT, [s.heads for s in subsets], stage="stage2")
    singles = singles_from(sets, bits, memo.n_layers, memo.n_heads)
    if n_stability >= 1:
        fixed = selection_stability(subsets, sub_bits, n_resamples=n_stability, seed=seed, rule=rule, alpha=alpha,
                                    stand_ins=memo.n_layers * memo.n_heads)
        stability.selection = {"method": "fixed pool", **fixed}
    if n_stability >= 1 and singles is not None:
        reselector = Reselector(singles, subsets, sub_bits, intact, pool_size=config.pool_size, k=config.k, rule=rule, alpha=alpha,
                                stand_ins=memo.n_layers * memo.n_heads)
        ties = {key: fixed.get(key) for key in ("selected_by_tie_break", "identical_subsets") if key in fixed}
        stability.selection = {**reselecting_stability(reselector, selected, n_resamples=n_stability, seed=seed),
                               "fixed_pool_frequency": fixed["selected_frequency"], **ties}
        stability.split_half = split_half_agreement(reselector, seed=seed)
    if n_adjusted >= 1:
        evaluated = [i for i, s in enumerate(sets) if len(s) > 0]
        adjusted = selection_adjusted_test(bits[evaluated], intact, n_permutations=n_adjusted, seed=seed, alpha=alpha)
    return stability, adjusted


def _record_start(memo: MemoOracle, config: SearchConfig, scorer: str, alpha: float) -> None:
    """The journal's ``search_started`` event: the options and the head layout (what a figure of an
    unfinished run needs before any result exists)."""
    if memo.journal is None:
        return
    options = dict(
        k=config.k, pool_size=config.pool_size, scorer=scorer, strategy=config.strategy, beam_width=_beam(config),
        n_null=config.n_null, n_boot=config.n_boot, alpha=alpha, posthoc=config.posthoc, seed=config.seed,
        parsimony=config.parsimony, n_adjusted=config.n_adjusted, ci_method=config.ci_method,
        **({"n_specificity": config.n_specificity} if config.n_specificity else {}),
        **({"rank_by": config.rank_by} if config.rank_by != SearchConfig.rank_by else {}),
    )
    memo.journal.record_event("search_started", n_layers=memo.n_layers, n_heads=memo.n_heads, options=options)


def _beam(config: SearchConfig) -> Optional[int]:
    """The beam width a result records: ``None`` unless stage 2 searches by beam."""
    return config.beam_width if STRATEGIES.resolve(config.strategy).uses_beam_width else None


def run_search(
    oracle: Oracle,
    config: Optional[SearchConfig] = None,
    *,
    scores: Optional[Stage1Scores] = None,
    test_reads: Optional[Callable[[], Sequence[dict[str, Any]]]] = None,
    progress: bool = True,
) -> Result:
    """Algorithm 1 over ``oracle`` (module docstring) under ``config``, a
    :class:`~cel_lens.config.SearchConfig` passed whole (default: its defaults), checked by its
    ``validate`` before any evaluation; returns the :class:`Result`. ``scores``:
    :class:`~cel_lens.oracle.Stage1Scores` of another scorer, refused unless computed on D_dist
    (named by ``config.scorer`` when it is not the default, else by their own name); default: exact
    scores. The oracle is wrapped in a :class:`~cel_lens.selection.memo.MemoOracle` (nothing
    evaluated twice, D_test refused until S-hat is fixed); with a journal
    (:class:`cel_lens.runs.RecordingOracle`) every step is recorded and a rerun resumes. The level of
    every test and interval (``alpha``), the stability check's re-selections (``n_stability``) and the
    head sets per evaluation call (``chunk``) are the config's. ``test_reads``: the seal ledger's
    reads of this D_test (:mod:`cel_lens.evaluation.seal`; default: the oracle's, where it declares
    them); any before the selection makes ``selected_before_test`` false. ``progress``: progress bars.
    ``config.rank_by="calibrated"``: stage 1, stage 2 and the D_dist checks read each head set's
    correctness at its best constant answer prior on D_dist (:mod:`cel_lens.selection.ranking`; choice
    tasks and the exact scorer only, refused before any evaluation otherwise); D_test is reported as always."""
    if config is not None and not isinstance(config, SearchConfig):
        raise TypeError(f"run_search() config must be a SearchConfig, got {type(config).__name__}")
    config = (config or SearchConfig()).validate()
    alpha, n_stability, chunk = config.alpha, config.n_stability, config.chunk
    named = config.scorer != SearchConfig.scorer
    memo = oracle if isinstance(oracle, MemoOracle) else MemoOracle(oracle)
    view = ranking_view(memo, config.rank_by)  # what stage 1 and stage 2 read (refused here, before any evaluation)
    if scores is not None and view is not memo:
        raise ValueError("rank_by 'calibrated' computes its own stage-1 scores (exact, calibrated on D_dist); "
                         "scores from another scorer rank by raw gain")
    journal, timings = memo.journal, {}
    if held := memo.held_sets():  # the seconds below are this process's: say what it did not evaluate itself
        timings[RESUMED_SETS] = float(held)
    given = None if scores is None else discovery_scores(scores, memo.n_layers, memo.n_heads)
    name = given.scorer if given is not None and not named else config.scorer
    _record_start(memo, config, name, alpha)
    intact, stage1_scores = _recorded_stage1(memo, given, name, timings, chunk=chunk, progress=progress, view=view)
    search = dict(k=config.k, strategy=config.strategy, beam_width=config.beam_width, chunk=chunk, progress=progress)
    with _timed(timings, "stage2_s"):
        pool = candidate_pool(stage1_scores.values, config.pool_size)
        if journal is not None:
            journal.record_event("pool", scorer=name, pool=[str(h) for h in pool])
        subsets, _ = stage2(view, pool, stage1_scores, intact, **search)
        bits = view.evaluate(DIST_SPLIT, [s.heads for s in subsets], stage="stage2")
        best, choice = select_parsimonious(subsets, bits, config.parsimony, alpha=alpha,
                                           stand_ins=memo.n_layers * memo.n_heads)
        stability, adjusted = _discovery_checks(view, subsets, best.heads, intact, config, n_stability=n_stability,
                                                alpha=alpha)
        if config.n_specificity:  # on D_dist, before the selection is fixed
            winners, n_possible = random_pool_winners(
                view, pool, config.n_specificity, seed=config.seed, intact=intact, scores=stage1_scores.values, **search
            )
    _warn_nothing_helps(best, adjusted, alpha, config.rank_by)
    fix_selection(memo, best, _prior_reads(memo, test_reads))
    with _timed(timings, "test_s"):  # the oracle's context says who reads D_test (the seal's ledger)
        held = test_statistics(memo, best, subsets, config, alpha=alpha, chunk=chunk, progress=progress)
        if config.n_specificity:
            stability.specificity = specificity_statistics(memo, winners, held.test.gain, n_possible, chunk=chunk)
        kinds = memo.ablation_controls(best.heads, seed=config.seed, n_boot=config.n_boot, alpha=alpha) if (
            CONTROLS in capabilities(memo) and len(best.heads)) else None
    discovery = Discovery(
        acc_intact=float(intact.to(torch.float64).mean()), acc_ablated=best.dist_acc, gain=best.dist_gain,
        scores=stage1_scores.values.tolist(), scores_split=stage1_scores.split, pool=[str(h) for h in pool],
        subsets=held.subsets, parsimony=choice, adjusted=adjusted, rank_by=config.rank_by,
    )
    return _finish(memo, Result(
        heads=str(best.heads), discovery=discovery, test=held.test, null=held.null, stability=stability,
        controls=Controls(leave_one_out=held.leave_one_out, kinds=kinds), calibration=held.calibration, scorer=name,
        k=config.k, ablation=config.ablation,
        pool_size=config.pool_size, n_dist=int(intact.shape[0]), n_test=held.n_test, seed=config.seed,
        n_layers=memo.n_layers, n_heads=memo.n_heads, strategy=config.strategy, beam_width=_beam(config),
        n_boot=config.n_boot, alpha=alpha, timings=timings,
    ))


def _finish(memo: MemoOracle, result: Result) -> Result:
    """Write the result to the journal (when there is one) and return it."""
    if memo.journal is not None:
        memo.journal.write_result(result.to_dict())
        memo.journal.record_event("finished", heads=result.heads, gain=result.test.gain)
    return result


def _recorded_stage1(
    memo: MemoOracle, given: Optional[Stage1Scores], name: str, timings: dict[str, float], *, chunk: int, progress: bool,
    view: MemoOracle | CalibratedDist,
) -> tuple[Bool[Tensor, " example"], Stage1Scores]:
    """Stage 1 over ``view`` (the ranking's view of ``memo``), timed, with its scores recorded in the
    journal (once per scorer): a resumed pipeline reuses scores that are costly or not bit-reproducible."""
    with _timed(timings, "stage1_s"):
        intact, scores = stage1(view, given, chunk=chunk, progress=progress)
    timings["stage1_s"] += given.seconds if given is not None else 0.0  # a scorer that ran before the search
    journal = memo.journal
    if journal is not None and not any(e.get("scorer") == name for e in journal.events("stage1_scores")):
        ranked = {} if view is memo else {"rank_by": CALIBRATED.name}  # the scores are best-prior gains
        journal.record_event("stage1_scores", **{**scores.record(), "scorer": name, **ranked})
    return intact, scores


def _warn_nothing_helps(best: SubsetScore, adjusted: Optional[AdjustedTest], alpha: float, rank_by: str) -> None:
    """Warn when no evaluated ablation raised D_dist accuracy (calibrated, under that ``rank_by``), or
    when the selection-adjusted test does not reject "no head set helps"."""
    if best.dist_gain <= 0:
        warnings.warn(nonpositive_gain_warning(best.dist_gain, rank_by), UserWarning, stacklevel=3)
    elif adjusted is not None and not adjusted["rejects"]:
        warnings.warn(nothing_helps_warning(adjusted, alpha, rank_by), UserWarning, stacklevel=3)

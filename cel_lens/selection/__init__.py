"""Stage 2 and the search: the pool, subsets of it, S-hat, the test statistics, the :class:`Result`.

* :mod:`~cel_lens.selection.pool`: :func:`candidate_pool`, the top stage-1 heads;
* :mod:`~cel_lens.selection.subsets`: joint ablations of subsets on D_dist, the selection rule;
* :mod:`~cel_lens.selection.stability`: how often stage 2 picks each subset on resamples of D_dist;
* :mod:`~cel_lens.selection.specificity`: S-hat against the winners of random pools (optional);
* :mod:`~cel_lens.selection.parsimony`: the smallest subset within one standard error of the best;
* :mod:`~cel_lens.selection.reselect`: stability that redoes the whole selection, split-half agreement;
* :mod:`~cel_lens.selection.guardrails`: the selection-adjusted test of "any ablation helps" on D_dist;
* :mod:`~cel_lens.selection.paired`: one-sided McNemar, Newcombe's interval, leave-one-out per head;
* :mod:`~cel_lens.selection.memo`: :class:`MemoOracle`, each head set evaluated once, and the test-split guard;
* :mod:`~cel_lens.selection.algorithm`: :func:`run_search`, Algorithm 1 over an oracle;
* :mod:`~cel_lens.selection.result`: :class:`Result` and the one text form of a result;
* :mod:`~cel_lens.selection.result_parts`: its typed parts (:class:`Discovery`, :class:`TestOutcome`,
  :class:`NullTest`, :class:`Stability`, :class:`Controls`), each rendering its own rows;
* :mod:`~cel_lens.selection.records`: the shapes of the records the parts keep (``result.json``'s objects).
"""

from cel_lens.selection.algorithm import fix_selection, run_search, stage1, stage2, test_statistics
from cel_lens.selection.guardrails import selection_adjusted_test
from cel_lens.selection.paired import leave_one_out, mcnemar_enhancement_p, newcombe_paired_ci, tango_paired_ci
from cel_lens.selection.parsimony import select_parsimonious
from cel_lens.selection.calibration_text import calibrated_gain_text, calibration_rows
from cel_lens.selection.prior_tests import margin_auc_test, prior_shift_test
from cel_lens.selection.calibration import (
    calibrated_predictions,
    calibration_statistics,
    fit_choice_bias,
    majority_rate,
    prediction_shares,
)
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.pool import DEFAULT_POOL_SIZE, candidate_pool
from cel_lens.selection.result import DEFAULT_N_NULL, Result, format_result, result_rows
from cel_lens.selection.result_parts import Controls, Discovery, NullTest, Stability, TestOutcome
from cel_lens.selection.reselect import Reselector, reselecting_stability, split_half_agreement
from cel_lens.selection.specificity import random_pool_winners, specificity_statistics
from cel_lens.selection.stability import DEFAULT_N_STABILITY, selection_stability
from cel_lens.selection.subsets import DEFAULT_K, SubsetScore, evaluate_subsets, select_best, selection_key

__all__ = [
    "DEFAULT_K",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_N_NULL",
    "DEFAULT_N_STABILITY",
    "MemoOracle",
    "run_search",
    "stage1",
    "stage2",
    "fix_selection",
    "test_statistics",
    "candidate_pool",
    "evaluate_subsets",
    "select_best",
    "selection_key",
    "SubsetScore",
    "selection_stability",
    "random_pool_winners",
    "specificity_statistics",
    "Result",
    "Discovery",
    "TestOutcome",
    "NullTest",
    "Stability",
    "Controls",
    "result_rows",
    "format_result",
    "select_parsimonious",
    "selection_adjusted_test",
    "leave_one_out",
    "mcnemar_enhancement_p",
    "newcombe_paired_ci",
    "tango_paired_ci",
    "Reselector",
    "reselecting_stability",
    "split_half_agreement",
    "fit_choice_bias",
    "calibrated_predictions",
    "prediction_shares",
    "majority_rate",
    "calibration_statistics",
    "calibration_rows",
    "calibrated_gain_text",
    "prior_shift_test",
    "margin_auc_test",
]

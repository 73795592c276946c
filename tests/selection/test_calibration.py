"""The answer-prior calibration: the bias fit against brute force, a pure prior shift absorbed
exactly, the planted prior and capability heads told apart, and the lines a result shows."""

import itertools
import warnings

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.oracle import ANSWER_KEY, CHOICES, AnswerKey, OracleBase
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection import run_search
from cel_lens.selection.calibration_text import calibration_rows
from cel_lens.selection.calibration import (
    calibrated_predictions,
    calibration_statistics,
    fit_choice_bias,
    majority_rate,
    prediction_shares,
)
from cel_lens.selection.result import format_result
from cel_lens.testing import PlantedChoiceOracle
from cel_lens.config import SearchConfig


def _accuracy(scores, labels, bias):
    return float((calibrated_predictions(scores, bias) == labels).double().mean())


@pytest.mark.parametrize("n_choices", [2, 3])
def test_bias_reaches_the_brute_force_best_accuracy(n_choices):
    gen = torch.Generator().manual_seed(n_choices)
    scores = torch.randn(120, n_choices, generator=gen)
    labels = torch.randint(0, n_choices, (120,), generator=gen)
    scores[torch.arange(120), labels] += 0.7  # some signal
    scores[:, 0] += 1.0  # and a prior towards choice 0
    grid = torch.linspace(-4, 4, 161)
    best = max(
        _accuracy(scores, labels, torch.tensor([0.0, *b], dtype=torch.float64))
        for b in itertools.product(grid.tolist(), repeat=n_choices - 1)
    )
    bias = fit_choice_bias(scores, labels)
    assert bias[0] == 0
    assert _accuracy(scores, labels, bias) >= best - 1e-12
    assert _accuracy(scores, labels, bias) > _accuracy(scores, labels, None)


def test_a_pure_prior_shift_is_taken_back_exactly():
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(200, 2, generator=gen)
    labels = torch.randint(0, 2, (200,), generator=gen)
    shifted = scores + torch.tensor([0.0, 1.3])
    a = calibrated_predictions(scores, fit_choice_bias(scores, labels))
    b = calibrated_predictions(shifted, fit_choice_bias(shifted, labels))
    assert torch.equal(a, b)


def test_missing_choices_never_win_and_shares_count_predictions():
    scores = torch.tensor([[0.0, 5.0, float("nan")], [0.0, -1.0, float("nan")], [0.0, 1.0, 2.0]])
    pred = calibrated_predictions(scores, torch.tensor([0.0, 0.0, 100.0]))
    assert pred.tolist() == [1, 0, 2]
    assert prediction_shares(pred, 3) == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    key = AnswerKey("multiple_choice", torch.tensor([1, 1, 0, 1]), (" no", " yes"))
    assert majority_rate(key) == (" yes", 0.75)
    assert majority_rate(AnswerKey("generation")) is None


def _memo(seed=0, **kw):
    oracle = PlantedChoiceOracle(seed=seed, **kw)
    memo = MemoOracle(oracle, guard_test=False)
    sets = [HeadSet(), HeadSet.parse(oracle.prior), HeadSet.parse(oracle.capability)]
    for split in ("dist", "test"):
        memo.evaluate(split, sets)
    return oracle, memo


def test_prior_head_loses_its_gain_and_capability_head_keeps_it():
    oracle, memo = _memo(seed=3)
    prior = calibration_statistics(memo, HeadSet.parse(oracle.prior), n_boot=500)
    capability = calibration_statistics(memo, HeadSet.parse(oracle.capability), n_boot=500)
    intact, prior_raw = memo.evaluate("test", [HeadSet(), HeadSet.parse(oracle.prior)]).double().mean(1).tolist()
    assert prior_raw - intact > 0.1  # the raw result would call it an enhancement
    assert abs(prior["gain_cal"]) < 0.02 and not prior["survives"]
    assert capability["gain_cal"] > 0.04 and capability["survives"]
    # the prior head moves the answers towards "yes"; the calibrated shares do not move as much
    raw_move = prior["shares_ablated"][1] - prior["shares_intact"][1]
    assert raw_move > 0.2
    assert abs(prior["shares_ablated_cal"][1] - prior["shares_intact_cal"][1]) < raw_move / 2
    labels = oracle.labels("test")
    assert prior["majority_answer"] == " yes" and prior["majority_rate"] == pytest.approx(float(labels.double().mean()))


def test_no_calibration_without_recorded_choice_scores():
    oracle, _ = _memo()
    memo = MemoOracle(oracle, guard_test=False)
    memo.remember("dist", HeadSet(), torch.ones(oracle.n["dist"], dtype=torch.bool))  # bits only
    block = calibration_statistics(memo, HeadSet.parse(oracle.prior))
    assert block["applies"] is False and "not recorded" in block["reason"]
    rows = dict(calibration_rows({"calibration": block}))
    assert "not recorded" in rows["answer prior"] and "majority class (D_test)" in rows


@pytest.mark.parametrize(
    "key, words",
    [
        (AnswerKey("generation"), "judged by its tests"),
        (AnswerKey("exact_match"), "free-form"),
        (AnswerKey("exact_match", torch.tensor([0, 1, 1]), (" neg", " pos")), "candidate answers are not scored"),
    ],
)
def test_tasks_without_choices_say_how_a_prior_applies(key, words):
    class Bits(OracleBase):
        n_layers, n_heads = 2, 2
        capabilities = frozenset({ANSWER_KEY})

        def evaluate(self, split, head_sets, *, stage=""):
            return torch.ones(len(head_sets), 3, dtype=torch.bool)

        def answer_key(self, split):
            return key

    block = calibration_statistics(MemoOracle(Bits(), guard_test=False), HeadSet.parse("L0H0"))
    assert block["applies"] is False and words in block["reason"]


def test_a_search_that_picks_the_prior_head_says_so():
    oracle = PlantedChoiceOracle(seed=0, n_dist=600, n_test=600)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_search(oracle, config=SearchConfig(k=1, pool_size=3, n_null=5, n_boot=300), progress=False)
    assert result.heads == str(HeadSet.parse(oracle.prior))  # the biggest raw gain
    assert result.test.gain > 0.1 and result.test.ci_low > 0
    assert result.calibration["applies"] and not result.calibration["survives"]
    text = str(result)
    assert result.calibration["moves_prior"] and "moves the answer prior (prior-shift test p = " in text
    for label in ("majority class (D_test)", "answers (D_test)", "calibrated D_test", "threshold-free test",
                  "answer prior"):
        assert label in text
    # the block survives the round trip through result.json's dict
    assert format_result(type(result).from_dict(result.to_dict())) == format_result(result)


def test_capability_search_shows_no_prior_warning():
    oracle = PlantedChoiceOracle(seed=0, n_dist=600, n_test=600, prior_shift=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_search(oracle, config=SearchConfig(k=1, pool_size=3, n_null=5, n_boot=300), progress=False)
    assert result.heads == str(HeadSet.parse(oracle.capability))
    assert result.calibration["survives"] and "moves the answer prior" not in str(result)
    assert result.calibration["p_auc"] <= 0.05  # the threshold-free test sees the capability too


def test_four_choices_reach_at_least_every_common_offset_and_a_coarse_brute_force():
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        scores = torch.randn(60, 4, generator=gen, dtype=torch.float64)
        labels = torch.multinomial(torch.tensor([0.4, 0.2, 0.2, 0.2]), 60, replacement=True, generator=gen)
        scores[torch.arange(60), labels] += 0.8
        scores[:, 0] -= 0.6
        got = _accuracy(scores, labels, fit_choice_bias(scores, labels))
        grid = torch.linspace(-3, 3, 25).tolist()
        coarse = max(_accuracy(scores, labels, torch.tensor([0.0, *b], dtype=torch.float64))
                     for b in itertools.product(grid, repeat=3))
        offsets = max(_accuracy(scores, labels, torch.tensor([0.0, c, c, c], dtype=torch.float64))
                      for c in torch.linspace(-4, 4, 801).tolist())
        assert got >= coarse - 1e-12 and got >= offsets - 1e-12


def test_ties_follow_a_stated_rule_that_moves_with_a_prior_shift_and_their_range_is_reported():
    from cel_lens.selection.calibration import TIE_RULE, optimal_biases

    # coarse scores: many equally good bias intervals on D_dist
    gen = torch.Generator().manual_seed(2)
    labels = torch.randint(0, 2, (40,), generator=gen)
    scores = torch.zeros(40, 2)
    scores[:, 1] = torch.randint(-3, 4, (40,), generator=gen).float() + 0.5 * labels
    ties = optimal_biases(scores, labels)
    assert len(ties) > 1 and "middle" in TIE_RULE
    shifted = scores + torch.tensor([0.0, 2.0])
    assert torch.equal(calibrated_predictions(scores, fit_choice_bias(scores, labels)),
                       calibrated_predictions(shifted, fit_choice_bias(shifted, labels)))


def test_a_pure_prior_shift_never_survives_and_the_tie_range_is_in_the_block():
    class Shifted(OracleBase):
        capabilities = frozenset({CHOICES, ANSWER_KEY})
        n_layers, n_heads = 2, 2

        def __init__(self):
            gen = torch.Generator().manual_seed(0)
            self.labels = {sp: torch.randint(0, 4, (80,), generator=gen) for sp in ("dist", "test")}
            self.scores = {sp: torch.randn(80, 4, generator=gen) for sp in ("dist", "test")}
            for sp in self.scores:
                self.scores[sp][torch.arange(80), self.labels[sp]] += 1.0

        def evaluate_choices(self, split, head_sets, *, stage=""):
            s = torch.stack([self.scores[split] + (torch.tensor([1.5, 0, 0, 0]) if len(h) else 0) for h in head_sets])
            return s.argmax(-1) == self.labels[split], s

        def evaluate(self, split, head_sets, *, stage=""):
            return self.evaluate_choices(split, head_sets)[0]

        def answer_key(self, split):
            return AnswerKey("multiple_choice", self.labels[split], ("a", "b", "c", "d"))

    memo = MemoOracle(Shifted(), guard_test=False)
    for split in ("dist", "test"):
        memo.evaluate(split, [HeadSet(), HeadSet.parse("L0H0")])
    block = calibration_statistics(memo, HeadSet.parse("L0H0"), n_boot=200)
    assert block["gain_best"] == 0.0 and not block["survives"] and block["p_value_cal"] == 1.0
    low, high = block["gain_cal_range"]
    assert low <= block["gain_cal"] <= high
    rows = dict(calibration_rows({"calibration": block, "gain": 0.1, "alpha": 0.05, "n_test": 80}))
    assert rows["survives calibration?"].startswith("not shown: one-sided exact McNemar p = 1")
    assert rows["calibrated D_test"].startswith("each model at its best constant prior on D_test")
    # a pure shift of choice a: the test of the prior shift itself rejects, so the warning may say so
    assert block["moves_prior"] and rows["warning"].startswith("the gain is not shown to survive calibration, and")

"""rank_by: stage 1 and stage 2 by the calibrated gain on D_dist (choice tasks), or by the raw gain."""

import json
import warnings
from typing import Optional, Sequence

import pytest
import torch

from cel_lens.cli.options import values_from_args
from cel_lens.config import OptionError, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.oracle import ANSWER_KEY, CHOICES, DIST_SPLIT, AnswerKey, OracleBase, Stage1Scores, TestSplitError
from cel_lens.scoring.exact import exact_scores
from cel_lens.selection.algorithm import run_search
from cel_lens.selection.memo import MemoOracle
from cel_lens.selection.ranking import CalibratedDist, ranking_view
from cel_lens.selection.result import Result
from cel_lens.testing import PlantedChoiceOracle, SyntheticOracle

# Tiny two-choice task (scores [0, d]: "yes" when d > 0), labels no, yes, no, yes. The intact model
# says "no" everywhere (raw 2/4); its best constant prior gets 3 of 4 right (the orders of d leave
# one example on the wrong side of every threshold). L0H0 adds +3.5 to every margin: raw 3/4, the
# same order, so best-prior 3/4 (raw gain +25 pp, calibrated 0). L0H1 reorders the margins so that
# both "yes" examples lie above both "no" ones, still all below 0: raw 2/4, best-prior 4/4 (raw gain
# 0, calibrated +25 pp).
TINY_LABELS = torch.tensor([0, 1, 0, 1])
TINY_MARGINS = {HeadSet(): [-4.0, -3.0, -2.0, -1.0], HeadSet.parse("L0H0"): [-0.5, 0.5, 1.5, 2.5],
                HeadSet.parse("L0H1"): [-4.0, -1.0, -3.0, -2.0]}


class TinyChoiceOracle(OracleBase):
    """One layer of two heads over :data:`TINY_MARGINS` (both splits alike); counts evaluations."""

    capabilities = frozenset({CHOICES, ANSWER_KEY})
    n_layers, n_heads = 1, 2

    def __init__(self, answer_type: str = "multiple_choice", labels: Optional[torch.Tensor] = TINY_LABELS) -> None:
        self.answer_type, self.key_labels, self.calls = answer_type, labels, 0

    def evaluate_choices(self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""):
        self.calls += 1
        d = torch.tensor([TINY_MARGINS[HeadSet.parse(s)] for s in head_sets])
        return (d > 0).long() == TINY_LABELS, torch.stack([torch.zeros_like(d), d], dim=-1)

    def evaluate(self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""):
        return self.evaluate_choices(split, head_sets, stage=stage)[0]

    def answer_key(self, split: str) -> AnswerKey:
        return AnswerKey(self.answer_type, self.key_labels, (" no", " yes"))


def _best_prior_count(margins: list[float]) -> int:
    """Brute force: the most examples right over every threshold of "yes when d + b > 0"."""
    cuts = [min(margins) - 1, *[m + 1e-9 for m in margins]]
    return max(sum(int((d > c) == bool(y)) for d, y in zip(margins, TINY_LABELS.tolist())) for c in cuts)


def test_the_calibrated_gain_of_a_tiny_case_is_the_hand_computed_one():
    memo = MemoOracle(TinyChoiceOracle())
    view = ranking_view(memo, "calibrated")
    assert [_best_prior_count(m) for m in TINY_MARGINS.values()] == [3, 3, 4]  # the hand count above
    assert torch.equal(exact_scores(memo), torch.tensor([[0.25, 0.0]], dtype=torch.float64))  # raw
    assert torch.equal(exact_scores(view), torch.tensor([[0.0, 0.25]], dtype=torch.float64))  # calibrated
    bits = view.evaluate(DIST_SPLIT, list(TINY_MARGINS))
    assert bits.sum(1).tolist() == [_best_prior_count(m) for m in TINY_MARGINS.values()]
    sets, recorded = view.recorded(DIST_SPLIT)
    assert torch.equal(recorded, view.evaluate(DIST_SPLIT, sets))
    assert ranking_view(memo, "raw") is memo


def test_the_calibrated_view_never_reads_d_test():
    view = CalibratedDist(MemoOracle(TinyChoiceOracle()), TINY_LABELS)
    with pytest.raises(TestSplitError):
        view.evaluate("test", [HeadSet()])
    with pytest.raises(TestSplitError):
        view.recorded("test")


def _planted() -> PlantedChoiceOracle:
    """A prior head (L0H1: large raw gain, none at the best prior) and a capability head (L2H2:
    fixes 12 % of the examples, a smaller raw gain that survives calibration)."""
    return PlantedChoiceOracle(3, 3, n_dist=400, n_test=400, prior="L0H1", capability="L2H2", fix_rate=0.12, seed=1)


def _search(rank_by: str) -> Result:
    config = SearchConfig(k=2, pool_size=4, n_null=20, n_boot=200, n_adjusted=99, n_stability=10, rank_by=rank_by)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_search(_planted(), config, progress=False)


def test_raw_ranking_chooses_the_prior_head_and_calibrated_the_capability_head():
    raw, cal = _search("raw"), _search("calibrated")
    prior, capability = "L0H1", "L2H2"
    raw_scores, cal_scores = raw.scores_tensor, cal.scores_tensor
    assert raw_scores[0, 1] > raw_scores[2, 2] > 0  # the setting: the prior head wins the raw ranking
    assert cal_scores[2, 2] > cal_scores[0, 1] and cal_scores[2, 2] == cal_scores.max()
    assert prior in raw.heads.split("+") and capability not in raw.heads.split("+")
    assert cal.heads == capability
    assert raw.discovery.rank_by == "raw" and cal.discovery.rank_by == "calibrated"
    # the discovery gain is the calibrated one; the D_test report stays raw, the calibration block beside it
    assert cal.discovery.gain == pytest.approx(float(cal_scores[2, 2]))
    assert cal.test.gain == pytest.approx(cal.test.acc_ablated - cal.test.acc_intact)
    assert cal.calibration["survives"] and not raw.calibration["survives"]


def test_every_discovery_sentence_of_a_calibrated_result_says_so():
    text = {label: value for label, value in _search("calibrated").rows()}
    assert "calibrated" in text["search"] and text["D_dist (n=400)"].startswith("calibrated")
    assert text["top stage-2 subsets"].startswith("calibrated discovery gain")
    assert "best calibrated discovery gain" in text["any ablation helps?"]
    assert "calibrated" not in text["D_test (n=400)"]
    raw = {label: value for label, value in _search("raw").rows()}
    assert "calibrated" not in raw["search"] + raw["D_dist (n=400)"] + raw["top stage-2 subsets"]


def test_the_rule_is_recorded_only_when_not_the_default():
    """Manifests, journals and result.json of raw-ranked runs keep their identity."""
    assert "rank_by" not in SearchConfig().manifest_options()
    cal_options = SearchConfig(rank_by="calibrated").manifest_options()
    assert cal_options.pop("rank_by") == "calibrated" and cal_options == SearchConfig().manifest_options()
    raw, cal = _search("raw"), _search("calibrated")
    assert "rank_by" not in raw.to_dict() and cal.to_dict()["rank_by"] == "calibrated"
    assert Result.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    assert Result.from_dict(raw.to_dict()).discovery.rank_by == "raw" and cal.rank_by == "calibrated"


def test_the_cli_flag_comes_from_the_field():
    from cel_lens.cli import build_parser

    parse = build_parser().parse_args
    assert values_from_args(SearchConfig, parse(["search", "--model", "m", "--task", "boolq"]))["rank_by"] == "raw"
    args = parse(["search", "--model", "m", "--task", "boolq", "--rank-by", "calibrated"])
    assert values_from_args(SearchConfig, args)["rank_by"] == "calibrated"
    with pytest.raises(SystemExit):
        parse(["search", "--model", "m", "--task", "boolq", "--rank-by", "prior"])


def test_calibrated_ranking_is_refused_without_choices_before_any_evaluation():
    plain = SyntheticOracle(2, 2, n_dist=20, n_test=20, seed=0)
    with pytest.raises(ValueError, match="CHOICES"):
        run_search(plain, SearchConfig(k=1, pool_size=2, rank_by="calibrated"), progress=False)
    for oracle in (TinyChoiceOracle(answer_type="exact_match", labels=None), TinyChoiceOracle(labels=None)):
        with pytest.raises(ValueError, match="fixed choices"):
            run_search(oracle, SearchConfig(k=1, pool_size=2, rank_by="calibrated"), progress=False)
        assert oracle.calls == 0
    with pytest.raises(OptionError, match="exact scorer"):
        SearchConfig(scorer="attribution", rank_by="calibrated").validate()
    tiny = TinyChoiceOracle()
    given = Stage1Scores(torch.zeros(1, 2), DIST_SPLIT, "exact")
    with pytest.raises(ValueError, match="computes its own stage-1 scores"):
        run_search(tiny, SearchConfig(k=1, pool_size=2, rank_by="calibrated"), scores=given, progress=False)
    assert tiny.calls == 0



class CountingPlanted(PlantedChoiceOracle):
    """The planted oracle, counting the head sets it evaluates."""

    def evaluate_choices(self, split, head_sets, *, stage=""):
        self.evaluated = getattr(self, "evaluated", 0) + len(head_sets)
        return super().evaluate_choices(split, head_sets, stage=stage)


def test_a_recorded_calibrated_search_resumes_from_its_choice_scores(tmp_path):
    """The run directory records raw bits and choice scores; a rerun ranks from them without a forward pass."""
    from cel_lens.runs import RecordingOracle, RunDir

    config = SearchConfig(k=2, pool_size=4, n_null=20, n_boot=200, n_adjusted=99, n_stability=10, rank_by="calibrated")
    manifest = {"what": "rank_by", "options": config.manifest_options()}
    kw = dict(n_dist=400, n_test=400, prior="L0H1", capability="L2H2", fix_rate=0.12, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = run_search(RecordingOracle(CountingPlanted(3, 3, **kw), RunDir.open(tmp_path / "run", manifest)), config,
                           progress=False)
        again_oracle = CountingPlanted(3, 3, **kw)
        again = run_search(RecordingOracle(again_oracle, RunDir.open(tmp_path / "run", manifest)), config, progress=False)
    assert again == first and first == _search("calibrated") and getattr(again_oracle, "evaluated", 0) == 0
    started = RunDir(tmp_path / "run").events("search_started")[0]["options"]
    assert started["rank_by"] == "calibrated" and RunDir(tmp_path / "run").events("stage1_scores")[0]["rank_by"] == "calibrated"


def test_a_search_on_a_tiny_model_ranks_by_each_heads_best_prior_accuracy(tiny_model):
    """Through the pipeline on a real (tiny) model: the stage-1 scores are each head's best-prior
    D_dist accuracy minus the intact model's, recomputed here from the evaluator's choice
    log-likelihoods (no activation store, no oracle) and the calibration module's bias fit."""
    import cel_lens as cl
    from cel_lens.evaluation import evaluate
    from cel_lens.heads import Head
    from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias
    from cel_lens.tasks.base import Example, Task

    words = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird", "star"]
    examples = [Example(f"yn/{i}", f"Is {words[i % 12]} a {words[(i // 12 + i) % 12]} ({i})?\nAnswer:",
                        choices=(" no", " yes"), label=i % 3 != 0) for i in range(48)]
    task = Task("yes_no", "multiple_choice", tuple(examples[:24]), tuple(examples[24:]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, n_boot=200, rank_by="calibrated", progress=False)
    L, H = tiny_model.cfg.n_layers, tiny_model.cfg.n_heads
    sets = [HeadSet()] + [HeadSet([Head(layer, h)]) for layer in range(L) for h in range(H)]
    ll = evaluate(tiny_model, task.dist, sets, progress=False).extra["choice_ll"]
    labels = torch.tensor([int(e.label) for e in task.dist.examples])
    best = torch.tensor([float((calibrated_predictions(s, fit_choice_bias(s, labels)) == labels).double().mean())
                         for s in ll], dtype=torch.float64)
    expected = (best[1:] - best[0]).reshape(L, H)
    assert run.result.discovery.rank_by == "calibrated"
    torch.testing.assert_close(run.result.scores_tensor, expected, atol=1e-12, rtol=0)
    top = max(((float(expected[h.layer, h.head]), -h.layer, -h.head), h) for s in sets[1:] for h in s)[1]
    assert run.result.heads == str(top)  # k = 1: the best single by calibrated gain, ties by head order


def test_a_search_refuses_a_calibrated_ranking_of_a_task_without_choices_before_writing(tmp_path):
    """``cl.search`` checks the rank rule against the task's answer type before its run directory
    exists (the memo's check, after the directory is open, stays for searches called directly)."""
    import cel_lens as cl

    out = tmp_path / "run"
    with pytest.raises(ValueError, match="answer type 'exact_match': there is no answer prior"):
        cl.search("organism", "organism_a", out=out, rank_by="calibrated", progress=False)
    assert not out.exists()

"""Choice scores travel with each recorded evaluation, exactly, so a resumed run can calibrate."""

import json

import torch

from cel_lens.heads import HeadSet
from cel_lens.runs import RecordingOracle, RunDir
from cel_lens.runs.evaluation_record import Evaluation, decode_floats, encode_floats
from cel_lens.selection.calibration import calibration_statistics
from cel_lens.testing import PlantedChoiceOracle


def test_float_tables_round_trip_bit_for_bit():
    t = torch.tensor([[0.1, -3.25e-7, float("nan")], [1e30, -0.0, 2.5]], dtype=torch.float32)
    back = decode_floats(encode_floats(t), 2, 3)
    assert torch.equal(back.view(torch.int32), t.view(torch.int32))


def test_an_evaluation_line_without_scores_reads_as_before():
    ev = Evaluation("dist", HeadSet.parse("L0H1"), "stage1", torch.tensor([True, False]))
    line = ev.to_line()
    assert "choice_scores" not in line
    assert Evaluation.from_line(line).choice_scores is None


def test_a_resumed_run_has_the_same_scores_and_calibration(tmp_path):
    oracle = PlantedChoiceOracle(n_dist=80, n_test=80, seed=2)
    sets = [HeadSet(), HeadSet.parse(oracle.prior)]
    with RunDir.open(tmp_path / "run", {"what": "choices"}) as run:
        first = RecordingOracle(oracle, run, guard_test=False)
        for split in ("dist", "test"):
            first.evaluate(split, sets)
        lines = [json.loads(x) for x in (tmp_path / "run" / "evaluations.jsonl").read_text().splitlines()]
        assert all(x["n_choices"] == 2 and x["choice_scores"] for x in lines if x.get("type") == "eval")
    resumed = RecordingOracle(oracle, RunDir(tmp_path / "run"), guard_test=False)
    for split in ("dist", "test"):
        for s in sets:
            assert torch.equal(resumed.choice_scores(split, s), first.choice_scores(split, s))
    assert calibration_statistics(resumed, sets[1], n_boot=200) == calibration_statistics(first, sets[1], n_boot=200)
    assert resumed.misses == 0

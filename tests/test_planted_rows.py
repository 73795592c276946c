"""scripts/planted_rows.py: a planted row against its truth, from synthetic records: the truth found
by content hash, the planted head's stage-1 rank, and a verdict computed from what the row says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from script_modules import load_script  # noqa: E402
from test_real_model_rows import manifest, result, write  # noqa: E402

planted = load_script("planted_rows")


def _truth_row(label: str, folder: Path, where: Path):
    return planted.truth_row(planted.record(label, folder), folder, where)


def _effect(gain: float, low: float) -> dict:
    return {"n": 300, "gain": gain, "ci": [low, gain + 0.05], "p_one_sided": 0.01}


def _truth_record(where: Path, capability: bool) -> dict:
    plant = {"kind": "sums-capability", "head": "L1H5", "tensors_sha256": "ab" * 32}
    cal = _effect(0.09, 0.03) if capability else _effect(0.0, -0.01)
    (where / "sums-plant.json").write_text(json.dumps({"tensors_sha256": plant["tensors_sha256"], "kind": plant["kind"], "truth": {
        "n": 300, "ablate L1H5": {"raw": _effect(0.11, 0.04), "calibrated_best_prior": cal}}}))
    return plant


def _row(where: Path, plant: dict, heads: str, survives: bool, wins: int = 90, losses: int = 30, sealed: bool = True) -> Path:
    man = manifest("arithmetic_choice", 500, 1000)
    man["model"]["plant"] = plant
    scores = [[0.0] * 6 for _ in range(3)]
    scores[1][5], scores[2][0] = 0.10, 0.12  # L1H5 ranks second
    res = result(wins, losses, sealed=sealed, heads=heads, scores=scores, calibration={
        "applies": True, "survives": survives, "gain_best": 0.05, "names": ["choice 0", "choice 1"]})
    return write(where / "row", man, res)


def test_a_found_decided_surviving_capability_agrees(tmp_path):
    plant = _truth_record(tmp_path, capability=True)
    rec = _truth_row("row", _row(tmp_path, plant, "L1H5", survives=True), tmp_path)
    assert rec["found"] and rec["decided"] and rec["ranks"] == {"L1H5": 2}
    assert rec["verdict"].startswith("agrees") and rec["truth"]["source"] == "sums-plant.json"


def test_missing_the_planted_head_or_its_calibration_disagrees(tmp_path):
    plant = _truth_record(tmp_path, capability=True)
    assert _truth_row("row", _row(tmp_path, plant, "L2H0", survives=True), tmp_path)["verdict"].startswith("DISAGREES")
    (tmp_path / "b").mkdir()
    rec = _truth_row("r2", _row(tmp_path / "b", plant, "L1H5", survives=False), tmp_path / "b")
    assert rec["truth"] is None and rec["verdict"] == "no truth record"  # no build record with that hash there
    assert planted.against_truth({"calibrated_best_prior": _effect(0.09, 0.03)}, True, True, False).startswith("DISAGREES")


def test_a_prior_only_plant_agrees_only_when_calibration_declines(tmp_path):
    plant = _truth_record(tmp_path, capability=False)
    row = _row(tmp_path, plant, "L1H5", survives=True)
    assert _truth_row("row", row, tmp_path)["verdict"].startswith("DISAGREES")
    assert planted.against_truth({"calibrated_best_prior": _effect(0.0, -0.01)}, True, True, False).startswith("agrees")


def test_an_unplanted_row_is_not_in_the_truth_table_and_the_table_renders(tmp_path):
    plant = _truth_record(tmp_path, capability=True)
    _row(tmp_path, plant, "L1H5", survives=True)
    write(tmp_path / "plain", manifest(), result(10, 10))
    assert _truth_row("plain", tmp_path / "plain", tmp_path) is None
    text = planted.main([str(tmp_path)])
    assert "| row | plant, planted head(s) |" in text and "sums-capability, L1H5" in text and "L1H5 2" in text


def test_an_unsealed_row_says_so_before_its_reading(tmp_path):
    plant = _truth_record(tmp_path, capability=True)
    rec = _truth_row("row", _row(tmp_path, plant, "L1H5", survives=True, sealed=False), tmp_path)
    assert not rec["evidence"] and rec["verdict"].startswith("NOT SEALED, not counted as evidence")
    assert "as a reading: agrees" in rec["verdict"]


def test_the_truth_is_matched_by_kind_and_the_largest_record_wins(tmp_path):
    """Two kinds may share weights (sums-capability and ops-capability are both L29H0 x10 on different
    files): each row takes its own kind's truth, and of two records the one with more rows."""
    plant = _truth_record(tmp_path, capability=True)  # sums-capability, n 300, in sums-plant.json
    ops = {**plant, "kind": "ops-capability"}
    assert planted.truth_of(ops, tmp_path) is None
    for name, n, gain in (("ops-plant.json", 300, 0.02), ("ops-plant-fresh.json", 1500, 0.04)):
        effect = {**_effect(gain, -0.01), "n": n}
        (tmp_path / name).write_text(json.dumps({"tensors_sha256": plant["tensors_sha256"], "kind": "ops-capability",
                                                 "truth": {"n": n, "ablate L1H5": {"raw": effect, "calibrated_best_prior": effect}}}))
    got = planted.truth_of(ops, tmp_path)
    assert got["source"] == "ops-plant-fresh.json" and got["n"] == 1500 and got["calibrated_best_prior"]["gain"] == 0.04
    assert planted.truth_of(plant, tmp_path)["source"] == "sums-plant.json"


def test_a_row_loaded_by_a_second_name_on_shared_weights_takes_that_names_truth(tmp_path):
    """A manifest sealed before names kept their own recipe records the folder's first recipe (kind
    sums-capability) under the model id of the name it loaded (ops-capability): the name decides."""
    plant = _truth_record(tmp_path, capability=True)
    effect = {**_effect(0.04, 0.02), "n": 1500}
    (tmp_path / "ops-plant-fresh.json").write_text(json.dumps({"tensors_sha256": plant["tensors_sha256"], "kind": "ops-capability",
                                                              "truth": {"n": 1500, "ablate L1H5": {"raw": effect, "calibrated_best_prior": effect}}}))
    row = _row(tmp_path, plant, "L1H5", survives=True)
    man = json.loads((row / "manifest.json").read_text())
    man["model"]["id"] = "HuggingFaceTB/SmolLM2-135M-Instruct+plant:ops-capability"
    (row / "manifest.json").write_text(json.dumps(man))
    rec = _truth_row("row", row, tmp_path)
    assert rec["plant"] == "ops-capability" and rec["truth"]["source"] == "ops-plant-fresh.json" and rec["truth"]["n"] == 1500

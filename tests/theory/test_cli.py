"""The ``cel-lens theory`` command over the theory lab."""

from __future__ import annotations

import json

import pytest

from cel_lens.cli import main


def test_cli_json(capsys):
    assert main(["theory", "--seeds", "300", "--sweep-seeds", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ["pr_E", "pr_some_single_ablation_helps_A", "gain_A_over_t2", "damage_B_over_t2", "winner_matches_escape_time"]:
        for field in ["predicted", "measured", "ci_low", "ci_high"]:
            assert isinstance(out[key][field], float), (key, field)
        assert out[key]["ci_low"] <= out[key]["measured"] <= out[key]["ci_high"]
    assert out["pr_E"]["predicted"] == pytest.approx(4 / 9)


def test_cli_error_is_one_line(capsys):
    assert main(["theory", "--alpha", "0"]) == 2
    assert capsys.readouterr().err.startswith("cel-lens: error: alpha")

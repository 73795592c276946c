"""A scorer's unit and manifest entries live on its class, and every place that writes a score or a
manifest reads them there: the explorer (Python panels and the page's script), the head panel of the
heatmap, the unfinished-run lines and ``SearchConfig.manifest_options``. The racing scorer's gain is
an accuracy gain, written ``+1.25 pp`` (not ``+0.0125``), and a new scorer's unit needs no edit
anywhere else."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from cel_lens.config import SCORERS, SearchConfig
from cel_lens.oracle import DIST_SPLIT, Stage1Scores
from cel_lens.report.explorer_page import explorer_page_data
from cel_lens.report.explorer_render import score_text
from cel_lens.report.head_panel import score_units
from cel_lens.runs import RecordingOracle, RunDir
from cel_lens.runs.unfinished import format_partial
from cel_lens.scoring.base import Scorer, ScoreUnit, score_unit, scorer_class
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle


class BitsScorer(Scorer):
    """A toy scorer in its own unit, with its own manifest entry."""

    name = "bits"
    units = "bits"
    quantity = "Δ bits"

    @classmethod
    def manifest_options(cls, config):
        return {"bits": {"seed": config.seed}}


@pytest.fixture
def bits(monkeypatch):
    monkeypatch.setitem(SCORERS, "bits", f"{__name__}:BitsScorer")


def test_each_scorer_says_its_unit():
    for name in ("exact", "racing", "prescreen", "compressed"):  # accuracy gains
        unit = score_unit(name)
        assert (unit.symbol, unit.scale, unit.noun) == ("pp", 100.0, "gain"), name
        assert unit.text(0.0125) == "+1.25 pp" and unit.text(-0.5) == "-50.00 pp"
    assert score_unit("compressed").quantity == "est. Δ accuracy" and score_unit("exact").quantity == "Δ accuracy"
    attribution = score_unit("attribution")
    assert (attribution.symbol, attribution.noun, attribution.text(0.03125)) == ("nats", "score", "+0.0312 nats")
    assert score_unit("gone") == ScoreUnit("score", "", 1.0, "score", 4)  # an old run's scorer no longer registered
    assert score_unit("gone").text(0.5) == "+0.5000" and score_unit("exact").text(None) == "not scored"
    assert score_unit("exact").text(math.nan, missing="-") == "-"
    assert all(scorer_class(n).score_unit() == score_unit(n) for n in SCORERS)


def test_the_explorer_writes_the_racing_gain_in_percentage_points():
    assert score_text(0.0125, "racing") == "+1.25 pp"  # was "+0.0125": the name was not in a list of two
    assert score_text(0.0125, "exact") == "+1.25 pp" and score_text(None, "racing") == "not scored"
    assert score_text(0.03125, "attribution") == "+0.0312 nats"


def test_the_head_panel_reads_the_unit():
    racing = score_units("racing")
    assert (racing.noun, racing.scale, racing.unit, racing.title) == ("gain", 100.0, "pp", "Δ accuracy<br>(pp, racing)")
    assert score_units("compressed").title == "est. Δ accuracy<br>(pp, compressed)"
    attribution = score_units("attribution")
    assert (attribution.noun, attribution.scale, attribution.unit) == ("score", 1.0, "nats")
    assert attribution.title == "Δ log-prob<br>(nats,<br>attribution)"
    assert score_units("gone").title == "score<br>(gone)" and score_units("gone").unit == ""


def test_a_new_scorer_unit_reaches_every_writer(bits):
    assert score_text(0.5, "bits") == "+0.5000 bits"
    assert score_units("bits").title == "Δ bits<br>(bits, bits)" and score_units("bits").unit == "bits"
    lines = format_partial({"scorer": "bits", "scores": [[0.5, -0.25]]})
    assert any("L0H0 +0.5000 bits" in line for line in lines), lines
    options = SearchConfig(scorer="bits", seed=7).manifest_options()
    assert options["bits"] == {"seed": 7} and options["scorer"] == "bits"


def test_unfinished_lines_write_racing_in_percentage_points():
    lines = format_partial({"scorer": "racing", "scores": [[0.0125, math.nan]]})
    assert any("L0H0 +1.25 pp" in line for line in lines), lines


def test_manifest_entries_come_from_the_scorer_class():
    """The entries earlier run directories recorded, each now written by its scorer's class."""
    plain = SearchConfig().manifest_options()
    assert plain["n_masks"] is None and plain["sparsity"] is None
    assert not {"racing", "prescreen", "ablation"} & set(plain)
    compressed = SearchConfig(scorer="compressed", n_masks=9, sparsity=0.1).manifest_options()
    assert (compressed["n_masks"], compressed["sparsity"]) == (9, 0.1)
    assert SearchConfig(scorer="racing", delta=0.01).manifest_options()["racing"] == {"delta": 0.01, "margin": 0.0}
    pre = SearchConfig(scorer="prescreen", prescreen_pass="subsample", prescreen_sample=20).manifest_options()
    assert pre["prescreen"] == {"pass": "subsample", "keep": SearchConfig.prescreen_keep, "sample": 20}
    assert "sample" not in SearchConfig(scorer="prescreen").manifest_options()["prescreen"]
    assert SearchConfig(ablation="mean").manifest_options()["ablation"] == "mean"  # the default kind is left out


def test_the_explorer_page_carries_the_unit_its_script_writes(tmp_path):
    oracle = SyntheticOracle(n_layers=2, n_heads=3, n_dist=60, n_test=60, effects={"L1H2": 0.1}, seed=0)
    manifest = {"model": {"id": "synthetic"}, "task": {"name": "synthetic"}, "options": {"scorer": "racing"}}
    scores = Stage1Scores(torch.tensor([[0.0, 0.01, 0.0], [0.0, 0.0, 0.05]], dtype=torch.float64), DIST_SPLIT, "racing")
    with RunDir.open(tmp_path / "run", manifest) as rd, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny search's "no evidence" warning is not what is tested
        run_search(
            RecordingOracle(oracle, rd),
            config=SearchConfig(scorer="racing", k=1, pool_size=2, n_null=2, n_boot=20),
            scores=scores,
            progress=False,
        )
    data = explorer_page_data(tmp_path / "run")
    assert data["scorer"] == "racing" and data["unit"] == {"symbol": "pp", "scale": 100.0, "decimals": 2}

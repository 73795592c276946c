"""``explorer.html`` from data: its size stays within budget on a 672-head model (28 x 24, the
paper's Llama-3.2-3B layout) with model panels at the default caps, its options are checked before
anything is written, and it states what it precomputed."""

from __future__ import annotations

import json
import re

import pytest

from cel_lens.report.explorer_data import head_set_panel, panel_keys
from cel_lens.report.explorer_page import PAGE_BUDGET_BYTES, explorer_page_data, write_explorer_page
from cel_lens.runs import RecordingOracle, RunDir, load_run
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """A finished synthetic search on a 28 x 24 layout (no model: planted effects)."""
    path = tmp_path_factory.mktemp("big") / "run"
    oracle = SyntheticOracle(n_layers=28, n_heads=24, n_dist=400, n_test=400, base_acc=0.6, background_sd=0.004, seed=0,
                             effects={"L3H1": 0.03, "L12H7": 0.02, "L20H5": -0.04})
    manifest = {"model": {"id": "synthetic-28x24"}, "task": {"name": "synthetic"}, "options": {"k": 3, "pool_size": 12}}
    with RunDir.open(path, manifest) as rd:
        run_search(
            RecordingOracle(oracle, rd),
            config=SearchConfig(k=3, pool_size=12, n_null=20, n_boot=200, chunk=96),
            progress=False,
        )
    return load_run(path)


def _fake_block(heads: str, tokens: int = 16) -> dict:
    """A model block at the page's largest default size: 3 ablated heads and 2 downstream ones."""
    rows = [dict(head=h, role="ablated", change=0.0, intact=[[0.123] * tokens] * tokens, ablated=[[0.456] * tokens] * tokens)
            for h in heads.split("+")] + [dict(head="L27H0", role="downstream", change=0.1, intact=[[0.1] * tokens] * tokens,
                                               ablated=[[0.2] * tokens] * tokens)] * 2
    return dict(example=dict(index=0, id="x/0", prompt="p" * 240, answer="a"), tokens=["tok"] * tokens, offset=0, patterns=rows,
                logit=dict(answer="a", rival="b", rows=[dict(head=h, on_answer=0.5, on_rival=-0.5, margin=1.0) for h in heads.split("+")]))


def test_page_stays_within_budget_on_672_heads(big_run, tmp_path):
    keys = panel_keys(big_run.result.to_dict())
    panels = {k: [_fake_block(k), _fake_block(k)] for k in keys}
    path = write_explorer_page(big_run, tmp_path, model_panels=panels)
    size = path.stat().st_size
    assert size <= PAGE_BUDGET_BYTES, f"{size} bytes"
    text = path.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="cel-data">(.*?)</script>', text, re.S).group(1))
    assert len(data["scores"]) == 28 and len(data["scores"][0]) == 24
    assert set(data["panels"]) == set(keys) and all(len(p["model"]) == 2 for p in data["panels"].values())
    assert re.search(r"plotly-[0-9.]+\.min\.js", text) and "Plotly.newPlot" in text  # plotly.js loaded, not copied in
    assert len(text) < 4_000_000 and "var Plotly" not in text
    print(f"explorer.html on 28 x 24 heads, {len(keys)} panels with 2 model blocks each: {size} bytes")


def test_page_states_what_it_precomputed(big_run):
    data = explorer_page_data(big_run)
    p = data["precomputed"]
    assert p["n_sets"] == len(data["order"]) and p["model_sets"] == 0
    assert data["order"][0] == str(big_run.result.heads)  # S-hat first


def test_options_are_checked_before_writing(big_run, tmp_path):
    with pytest.raises(ValueError, match="n_top"):
        write_explorer_page(big_run, tmp_path / "x", n_top=1000)
    assert not (tmp_path / "x").exists()


def test_only_s_hat_carries_d_test(big_run):
    r = big_run.result.to_dict()
    s_hat = str(big_run.result.heads)
    other = next(k for k in panel_keys(r) if k != s_hat)
    assert head_set_panel(big_run, other, r=r)["test"] is None
    test = head_set_panel(big_run, s_hat, r=r)["test"]
    assert test["gain"] == pytest.approx(big_run.result.gain, abs=1e-4)
    assert test["ci"] == pytest.approx([big_run.result.ci_low, big_run.result.ci_high], abs=1e-4)


def test_subtitle_says_finished_once(big_run):
    """The subtitle read "synthetic-28x24 × synthetic: finished (finished)"."""
    from cel_lens.report.explorer_page import explorer_html

    head = re.search(r'<p id="cel-summary">(.*?)</p>', explorer_html(explorer_page_data(big_run))).group(1)
    assert "synthetic: finished; scorer" in head and "(finished)" not in head


def test_s_hat_panel_prints_the_decision_not_the_descriptive_interval(big_run):
    """The D_test rows carry the run's one decision and the bounds that agree with it (issue 57)."""
    from cel_lens.report.explorer_render import panel_html
    from cel_lens.selection.result_parts import decision_bounds

    r = big_run.result.to_dict()
    panel = head_set_panel(big_run, str(big_run.result.heads), r=r)
    assert panel["test"]["bounds"] == pytest.approx(list(decision_bounds(big_run.result.test.decision)), abs=1e-4)
    page = panel_html(panel)
    assert "D_test gain (one-sided 95% bounds)" in page and "ablation helps? (run&#x27;s result)" in page
    assert "McNemar p (run" not in page and "D_test gain (95% CI)" not in page
    calibrated = panel_html({**panel, "test": {**panel["test"], "calibrated": "+0.20 pp [-0.45 pp, +0.93 pp], not shown to survive"}})
    assert "calibrated gain (each model at its best prior)" in calibrated and "not shown to survive" in calibrated

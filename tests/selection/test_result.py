"""The one text form of a result: the null's p-value beside its smallest possible value (and one line
instead of a number when that is above alpha), the selection-biased discovery gain, the warning for a
non-positive discovery gain, and results written before these fields existed."""

from __future__ import annotations

import json

from cel_lens.selection import Result, format_result, result_rows, run_search
from cel_lens.testing import SyntheticOracle


def _rows(r) -> dict[str, str]:
    return dict(result_rows(r))


def test_a_four_head_model_prints_the_minimum_p_and_no_fraction():
    """The organism's shape (4 heads, |S-hat| = 1): 3 other sets, smallest p 1/4 > 0.05."""
    oracle = SyntheticOracle(1, 4, n_dist=500, n_test=500, effects={"L0H0": 0.14, "L0H3": -0.2})
    r = run_search(oracle, k=3, n_null=100, progress=False)
    assert r.heads == "L0H0" and r.null_exhaustive and len(r.null_gains) == 3
    assert r.null_p == 0.25 and r.null_min_p == 0.25
    null = _rows(r)["random-subset null"]
    assert "all 3 other 1-head sets" in null
    assert "too few sets for this null: its smallest possible p is 1/4 = 0.25 > α = 0.05" in null
    assert "reach the gain" not in null and "p = " not in null


def test_a_large_model_prints_the_p_value_with_its_minimum():
    oracle = SyntheticOracle(12, 12, n_dist=500, n_test=500, effects={"L2H3": 0.1}, noise=0.02)
    r = run_search(oracle, k=1, pool_size=4, n_null=99, progress=False)
    null = _rows(r)["random-subset null"]
    assert "99 random other 1-head sets" in null and "p = 0.01 (smallest possible 0.01)" in null
    assert r.null_p == 0.01 and not r.null_exhaustive


def test_the_discovery_gain_is_labelled_selection_biased():
    r = run_search(SyntheticOracle(2, 2, n_dist=200, n_test=200, effects={"L1H1": 0.1}), n_null=3, progress=False)
    rows = _rows(r)
    assert "selection-biased" in rows["D_dist (n=200)"] and "selection-biased" not in rows["D_test (n=200)"]
    assert "selection-biased" in rows["top stage-2 subsets"]
    assert "warning" not in rows


def test_a_nonpositive_discovery_gain_gets_one_warning_line():
    d = Result.from_dict(_legacy()).to_dict() | {"dist_gain": 0.0}
    rows = _rows(d)
    assert "least harmful" in rows["warning"] and "not an enhancement" in rows["warning"]


def _legacy() -> dict:
    """A result.json written before the null's p-value, stability and specificity existed."""
    return dict(
        heads="L0H0", dist_acc_intact=0.8, dist_acc_ablated=0.9, dist_gain=0.1, test_acc_intact=0.8,
        test_acc_ablated=0.88, gain=0.08, ci_low=0.05, ci_high=0.11, p_value=1e-5,
        null_gains=[0.0, -0.1, 0.08, 0.02], null_p=0.25, scores=[[0.1, 0.0]], scorer="exact", pool=["L0H0", "L0H1"],
        subsets=[], k=1, pool_size=2, n_dist=100, n_test=100, seed=0, n_layers=1, n_heads=2,
    )


def test_results_written_before_these_fields_still_format():
    r = Result.from_dict(json.loads(json.dumps(_legacy())))
    assert r.null_min_p is None and r.selection_stability is None and r.specificity is None
    text = format_result(r)
    # the p-value is recomputed from the stored gains: (1 + 1) / (1 + 4)
    assert "4 random 1-head sets" in text and "smallest possible p is 1/5 = 0.2 > α = 0.05" in text
    assert _rows(r)["selection stability"] == "not computed"

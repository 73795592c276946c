"""The result and its one text form: the typed parts (discovery, test, null, stability, controls,
calibration) each render their own rows; ``result.json`` is the same flat record as before the parts
(same keys, order and values, byte for byte), every record written before still reads and renders
the same text; the null's p-value beside its smallest possible value (one line instead of a number
when that is above alpha), the selection-biased discovery gain and the warning when it is not positive."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from cel_lens.selection import Result, format_result, result_rows, run_search
from cel_lens.selection.result_parts import split_half_text
from cel_lens.selection.result import (
    FLAT_KEYS,
    Controls,
    Discovery,
    NullTest,
    Stability,
    TestOutcome,
)
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((Path(__file__).with_name("result_render_cases.json")).read_text(encoding="utf-8"))
COMMITTED = sorted(ROOT.glob("results/**/result.json"))

# the keys of result.json, in order, as the flat Result wrote them before the parts existed
KEYS_BEFORE_THE_PARTS = (
    "heads", "dist_acc_intact", "dist_acc_ablated", "dist_gain", "test_acc_intact", "test_acc_ablated", "gain",
    "ci_low", "ci_high", "p_value", "null_gains", "null_p", "scores", "scorer", "pool", "subsets", "k", "pool_size",
    "n_dist", "n_test", "seed", "n_layers", "n_heads", "strategy", "beam_width", "n_null", "n_boot", "alpha",
    "selected_before_test", "null_min_p", "null_exhaustive", "scores_split", "selection_stability", "specificity",
    "seal", "ci_method", "p_enhance", "leave_one_out", "parsimony", "adjusted", "split_half", "ablation",
    "ablation_controls", "calibration", "decision", "timings",
)


def _rows(r) -> dict[str, str]:
    return dict(result_rows(r))


def _case_record(case: dict) -> dict:
    if "record" in case:
        return case["record"]
    base = next(c["record"] for c in CASES["records"] if c["name"] == case["base"])
    return {**base, **case["patch"]}


FIXED = "fixed on D_dist before D_test was read"


def _expected(text: str, r: Result) -> str:
    """The text a record renders to: pinned in result_render_cases.json, rendered again when the
    printed rows changed on purpose; the records and their sha256 are the old ones. A record that
    never recorded whether S-hat was fixed before D_test was read rendered "fixed" from a default;
    it now says it was not recorded."""
    if r.test.selected_before_test is None:
        return text.replace(FIXED, r.test.selection_sentence(), 1)
    return text


def _pinned_digest(r: Result) -> str:
    """The digest the flat Result's dict had: a record without the seal flag wrote ``true`` for it."""
    d = r.to_dict()
    return _digest({**d, "selected_before_test": True} if d["selected_before_test"] is None else d)


def _digest(d: dict) -> str:
    return hashlib.sha256(json.dumps(d).encode()).hexdigest()


def _written(d: dict) -> str:
    """``result.json`` as a run directory writes it (keys sorted by the JSON round trip, indented)."""
    return json.dumps(json.loads(json.dumps(d, sort_keys=True, default=str)), indent=2) + "\n"


@pytest.fixture(scope="module")
def searched() -> Result:
    oracle = SyntheticOracle(2, 3, n_dist=200, n_test=200, effects={"L1H1": 0.1, "L0H2": 0.04}, noise=0.03)
    return run_search(oracle, config=SearchConfig(k=2, pool_size=4, n_null=20, n_specificity=3), progress=False)


@pytest.mark.parametrize("case", CASES["records"], ids=[c["name"] for c in CASES["records"]])
def test_every_recorded_case_renders_and_writes_as_the_flat_result_did(case):
    """Records written by earlier versions (or with one part changed) render the text, and write the
    dict, the flat Result of commit 391b2f8 produced for them (result_render_cases.json)."""
    r = Result.from_dict(_case_record(case))
    assert str(r) == _expected(case["text"], r)
    assert _pinned_digest(r) == case["to_dict_sha256"]
    if "html" in case:
        assert r._repr_html_() == _expected(case["html"], r)
    if "selected_before_test" not in _case_record(case):  # never certified from a default
        assert r.test.selected_before_test is None and FIXED not in str(r) and "not recorded" in str(r)
    assert format_result(_case_record(case)) == _expected(case["text"], r)  # the dict renders as its result does


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_committed_results_round_trip_byte_for_byte(path: Path):
    text = path.read_text(encoding="utf-8")
    d = json.loads(text)
    r = Result.from_dict(d)
    assert r.to_dict() == {k: v for k, v in d.items() if k in FLAT_KEYS}
    assert _written(r.to_dict()) == text
    assert Result.from_dict(r.to_dict()) == r
    expected = CASES["committed"][str(path.relative_to(ROOT))]
    assert str(r) == _expected(expected["text"], r) and _digest(r.to_dict()) == expected["to_dict_sha256"]


def test_every_committed_result_has_its_expected_text():
    assert sorted(CASES["committed"]) == [str(p.relative_to(ROOT)) for p in COMMITTED]


def test_to_dict_is_the_flat_record_in_the_old_order(searched: Result):
    d = searched.to_dict()
    assert tuple(d) == FLAT_KEYS == KEYS_BEFORE_THE_PARTS
    assert Result.from_dict(json.loads(json.dumps(d))) == searched
    assert Result.from_dict({**d, "not_a_result_key": 1}).to_dict() == d


def test_the_parts_hold_what_the_flat_record_says(searched: Result):
    r, d = searched, searched.to_dict()
    assert (r.discovery.acc_intact, r.discovery.acc_ablated, r.discovery.gain) == (
        d["dist_acc_intact"], d["dist_acc_ablated"], d["dist_gain"])
    assert (r.test.acc_intact, r.test.acc_ablated, r.test.gain, r.test.ci_low, r.test.ci_high, r.test.p_value) == (
        d["test_acc_intact"], d["test_acc_ablated"], d["gain"], d["ci_low"], d["ci_high"], d["p_value"])
    assert r.test.decision == d["decision"] and r.test.decision["p"] == d["p_enhance"] == r.test.p_enhance
    assert (r.null.gains, r.null.p, r.null.min_p, r.null.exhaustive, r.null.n_null) == (
        d["null_gains"], d["null_p"], d["null_min_p"], d["null_exhaustive"], d["n_null"])
    assert r.stability.selection["n_resamples"] >= 1 and r.stability.specificity["n_pools"] == 3
    assert r.controls.leave_one_out["heads"] and r.controls.kinds is None and r.calibration is None
    assert r.discovery.pool == d["pool"] and r.discovery.subsets == d["subsets"] and r.discovery.parsimony["rule"]


def test_flat_names_read_through_to_their_part(searched: Result):
    """A thin read-only layer: every key of result.json is also an attribute, the part's value."""
    d = searched.to_dict()
    for key in FLAT_KEYS:
        assert getattr(searched, key) is d[key], key
    with pytest.raises(AttributeError, match="no attribute 'dist_gains'"):
        searched.dist_gains  # noqa: B018
    assert copy.deepcopy(searched) == searched and pickle.loads(pickle.dumps(searched)) == searched


def test_from_dict_reads_old_records_and_names_what_is_missing():
    legacy = _legacy()
    r = Result.from_dict(legacy)
    assert r.test.ci_method == "bootstrap"  # written before ci_method: every interval was the bootstrap
    assert r.null.min_p is None and r.stability == Stability() and r.controls == Controls()
    assert Result.from_dict({**legacy, "ci_method": "tango"}).test.ci_method == "tango"
    with pytest.raises(TypeError, match="needs dist_gain, p_value"):
        Result.from_dict({k: v for k, v in legacy.items() if k not in ("dist_gain", "p_value")})


def test_equality_ignores_the_seal_and_the_timings(searched: Result):
    other = replace(searched, timings={"stage1_s": 99.0}, test=replace(searched.test, seal={"reason": "x"}))
    assert other == searched
    assert replace(searched, test=replace(searched.test, gain=searched.test.gain + 0.01)) != searched


def test_each_part_renders_its_own_rows(searched: Result):
    r = searched
    rows = result_rows(r)
    assert rows == r.rows()
    labels = [label for label, _ in rows]
    for part_rows in (r.discovery.rows(r.n_dist), r.test.rows(r.n_test, r.alpha), r.test.decision_rows(),
                      r.controls.leave_one_out_rows(), r.stability.rows(r.heads, len(r.discovery.pool), r.alpha),
                      r.null.rows(len(r.head_set), r.test.gain, r.alpha), r.discovery.subset_rows()):
        assert part_rows and all(row in rows for row in part_rows)
    assert labels.index("D_dist (n=200)") < labels.index("D_test (n=200)") < labels.index("random-subset null")
    assert labels.index("selection stability") < labels.index("specificity") < labels.index("top stage-2 subsets")
    assert Controls().kind_rows("zero", 0.1) == [] and Controls().leave_one_out_rows() == []
    assert Stability().rows("L0H0", 4, 0.05) == [("selection stability", "not computed")]
    assert NullTest(gains=[], p=None).rows(1, 0.1, 0.05) == [("random-subset null", "not computed")]


def test_the_test_part_says_when_the_selection_came_after_a_read():
    t = TestOutcome(0.5, 0.6, 0.1, 0.0, 0.2, 0.01, selected_before_test=False, seal={"reason": "read by x"})
    assert t.selection_sentence() == "NOT fixed before D_test was read: read by x"
    assert TestOutcome(0.5, 0.6, 0.1, 0.0, 0.2, 0.01, selected_before_test=False).selection_sentence().endswith(
        "the test split was read first")
    assert Discovery(0.5, 0.5, 0.0, [], [], []).warning_rows()[0][0] == "warning"


def test_a_four_head_model_prints_the_minimum_p_and_no_fraction():
    """The organism's shape (4 heads, |S-hat| = 1): 3 other sets, smallest p 1/4 > 0.05."""
    oracle = SyntheticOracle(1, 4, n_dist=500, n_test=500, effects={"L0H0": 0.14, "L0H3": -0.2})
    r = run_search(oracle, config=SearchConfig(k=3, n_null=100), progress=False)
    assert r.heads == "L0H0" and r.null.exhaustive and len(r.null.gains) == 3
    assert r.null.p == 0.25 and r.null.min_p == 0.25
    null = _rows(r)["random-subset null"]
    assert "all 3 other 1-head sets" in null
    assert "too few sets for this null: its smallest possible p is 1/4 = 0.25 > α = 0.05" in null
    assert "reach the gain" not in null and "p = " not in null


def test_a_large_model_prints_the_p_value_with_its_minimum():
    oracle = SyntheticOracle(12, 12, n_dist=500, n_test=500, effects={"L2H3": 0.1}, noise=0.02)
    r = run_search(oracle, config=SearchConfig(k=1, pool_size=4, n_null=99), progress=False)
    null = _rows(r)["random-subset null"]
    assert "99 random other 1-head sets" in null and "p = 0.01 (smallest possible 0.01)" in null
    assert r.null.p == 0.01 and not r.null.exhaustive


def test_the_discovery_gain_is_labelled_selection_biased():
    r = run_search(
        SyntheticOracle(2, 2, n_dist=200, n_test=200, effects={"L1H1": 0.1}),
        config=SearchConfig(n_null=3),
        progress=False,
    )
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
    assert r.null.min_p is None and r.stability.selection is None and r.stability.specificity is None
    text = format_result(r)
    # the p-value is recomputed from the stored gains: (1 + 1) / (1 + 4)
    assert "4 random 1-head sets" in text and "smallest possible p is 1/5 = 0.2 > α = 0.05" in text
    assert _rows(r)["selection stability"] == "not computed"


def test_an_uncertain_split_half_is_not_estimated_from_a_few_known_splits():
    """Every split of recorded_4 needed a subset never evaluated: "agree in at least 0.0%" states a
    bound whose lower end was never measured, so the text says the agreement is not estimated; with
    a few unknown, the share is of the splits whose selections are known (issue 57 item 4)."""
    r = Result.from_dict(_case_record(next(c for c in CASES["records"] if c["name"] == "recorded_4")))
    assert r.stability.split_half == {"agree": 0.0, "agree_upper": 0.84, "n_splits": 100, "unknown": 1.0}
    assert ("whether selections on two halves of D_dist agree is not estimated (100% of 100 splits needed a subset "
            "never evaluated)") in str(r)
    assert "at least" not in str(r)
    some = {"agree": 0.3, "agree_upper": 0.5, "n_splits": 100, "unknown": 0.2}
    assert split_half_text(some) == ("; selections on two halves of D_dist agree in 37.5% of the 80 of 100 splits "
                                     "whose selections are known")
    certain = replace(r.stability, split_half={"agree": 0.3, "agree_upper": 0.3, "n_splits": 100, "unknown": 0.0})
    assert split_half_text(certain.split_half) == "; selections on two halves of D_dist agree in 30.0% of 100 splits"

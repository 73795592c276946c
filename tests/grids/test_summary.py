"""A finished pair's table columns are read through the result's typed parts and equal, for every
pinned and committed record, what a plain read of the flat ``result.json`` gives (written out here
independently): a key a record lacks stays missing in its row, whatever the typed default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cel_lens.grids.summary import result_columns
from cel_lens.selection.result import Result
from cel_lens.selection.stability import known_share

REPO = Path(__file__).resolve().parents[2]
CASES = json.loads((REPO / "tests/selection/result_render_cases.json").read_text())
COLUMNS = ("n_dist", "n_test", "dist_acc_intact", "dist_acc_ablated", "dist_gain", "test_acc_intact", "test_acc_ablated",
           "gain", "ci_low", "ci_high", "alpha", "p_value", "heads", "null_p", "k", "pool_size", "scorer",
           "selected_before_test", "p_enhance", "calibration")


def _records() -> dict[str, dict]:
    out = {}
    for case in CASES["records"]:
        base = next((c["record"] for c in CASES["records"] if c["name"] == case.get("base")), None)
        out[case["name"]] = case["record"] if base is None else {**base, **case["patch"]}
    for path in sorted((REPO / "results").glob("**/result.json")):
        out[str(path.relative_to(REPO))] = json.loads(path.read_text())
    return out


RECORDS = _records()


def _flat(raw: dict) -> dict:
    """The columns read straight from the flat record (how the table read it before the typed parts)."""
    cols = {k: raw.get(k) for k in COLUMNS}
    st = raw.get("selection_stability")
    if isinstance(st, dict):
        st = known_share(float(st["selected_frequency"]), float(st.get("incomplete") or 0.0))
    p, gain = raw.get("p_value"), raw.get("gain")
    derived = None if p is None or gain is None else (p / 2 if gain > 0 and p < 1 else 1.0)
    cols.update(selected_before_test=raw.get("selected_before_test"), selection_stability=st,  # missing: not recorded
                seal_reason=(raw.get("seal") or {}).get("reason"),
                p_enhance=float(raw["p_enhance"]) if raw.get("p_enhance") is not None else derived)
    return cols


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_columns_equal_a_plain_read_of_the_record(name):
    raw = RECORDS[name]
    got = result_columns(Result.from_dict(raw), raw)
    assert set(got) == set(COLUMNS) | {"selection_stability", "seal_reason"}
    assert json.dumps(got, sort_keys=True) == json.dumps(_flat(raw), sort_keys=True)


def test_a_record_without_alpha_shows_it_missing_not_the_default():
    raw = next(r for r in RECORDS.values() if "alpha" not in r)
    result = Result.from_dict(raw)
    assert result.alpha == 0.05 and result_columns(result, raw)["alpha"] is None
    assert result_columns(result, {**raw, "alpha": 0.01})["alpha"] == 0.01


def test_the_records_cover_what_the_columns_tell_apart():
    """The pinned records hold both forms of each optional column (else the test above proves little)."""
    cols = [result_columns(Result.from_dict(r), r) for r in RECORDS.values()]
    for key in ("alpha", "selection_stability", "seal_reason", "calibration"):
        assert any(c[key] is None for c in cols) and any(c[key] is not None for c in cols), key
    assert {c["selected_before_test"] for c in cols} == {True, False, None}  # None: written before the seal
    assert any(r.get("p_enhance") is None for r in RECORDS.values()) and any(r.get("p_enhance") for r in RECORDS.values())

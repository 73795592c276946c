"""The table's records, text and JSON."""

from __future__ import annotations

import json
import math


def test_table_shape_and_text(table):
    rows = table.to_records()
    assert {"quantity", "predicted", "measured", "ci_low", "ci_high", "n"} <= set(rows[0])
    for r in table.rows:
        if not math.isnan(r.ci_low):
            assert r.ci_low <= r.measured <= r.ci_high, r
    text = table.format()
    assert "pr_E" in text and "gain_A_over_t2" in text
    json.dumps(table.to_json_dict(), allow_nan=False)

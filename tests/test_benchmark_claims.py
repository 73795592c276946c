"""The before/after evidence runs, and its cheapest checks say what docs/claims.md reports."""

from __future__ import annotations

import warnings

from benchmarks.claims import coverage, exact_set, grid_fwer, nothing_helps


def test_grid_fwer_under_a_harmful_only_null_drops_to_zero():
    out = grid_fwer(200)
    assert out["before (two-sided, finished pairs)"] > 0.3
    assert out["after (one-sided, declared family)"] == 0.0


def test_tango_covers_where_the_bootstrap_does_not():
    out = coverage(200)
    assert out["n=200, 1% discordant, +1 pp: tango"] >= 0.93
    assert out["n=200, 1% discordant, +1 pp: bootstrap"] < 0.9
    assert out["n=200, 1% discordant, +1 pp: bootstrap [0, 0]"] > 0.05


def test_search_level_checks_run():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sizes = exact_set(3, 1)
        fires = nothing_helps(1)
    assert sizes["mean |S| after"] <= sizes["mean |S| before"]
    assert {"no effect: after", "one +2 pp head: after", "harmful heads only: after"} <= set(fires)

"""Selection stability: the vectorised resampling against a plain loop over the same resamples that
builds subset records and calls the selection rule itself; planted, tied and null cases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.selection import Result, SubsetScore, run_search, select_best, selection_stability
from cel_lens.testing import SyntheticOracle
from cel_lens.config import SearchConfig


def _subsets(oracle: SyntheticOracle, texts: list[str], scores: dict[str, float] | None = None):
    sets = [HeadSet.parse(t) for t in texts]
    bits = oracle.evaluate("dist", sets)
    base = int(oracle.evaluate("dist", [HeadSet()])[0].sum())
    n = bits.shape[1]
    subsets = [
        SubsetScore(hs, int(b.sum()), n, (int(b.sum()) - base) / n, (scores or {}).get(str(hs), 0.0))
        for hs, b in zip(sets, bits)
    ]
    return subsets, bits


def test_matches_a_plain_loop_over_the_same_resamples():
    oracle = SyntheticOracle(2, 3, n_dist=120, effects={"L0H0": 0.03, "L1H1": 0.03, "L0H2": 0.02}, noise=0.1, seed=4)
    texts = ["L0H0", "L1H1", "L0H2", "L0H0+L1H1", "L0H1", "L0H0+L0H2"]
    subsets, bits = _subsets(oracle, texts, {"L0H0": 0.02, "L1H1": 0.03})
    B, seed = 300, 5
    got = selection_stability(subsets, bits, n_resamples=B, seed=seed, top=len(texts))
    # the same resamples (one chunk: B * n is far below the chunk limit), selected by select_best
    idx = np.random.default_rng([seed, 0x5EED]).integers(0, bits.shape[1], size=(B, bits.shape[1]))
    wins: dict[str, int] = {}
    for row in idx:
        counts = bits[:, torch.from_numpy(row)].sum(1)
        resampled = [SubsetScore(s.heads, int(c), s.n_dist, 0.0, s.score_sum) for s, c in zip(subsets, counts)]
        winner = str(select_best(resampled).heads)
        wins[winner] = wins.get(winner, 0) + 1
    assert got["selected"] == str(select_best(subsets).heads)
    assert {w["heads"]: w["frequency"] for w in got["wins"]} == {h: c / B for h, c in wins.items()}
    assert got["selected_frequency"] == wins.get(got["selected"], 0) / B
    assert 0 < got["selected_frequency"] < 1  # a close race: the check is not vacuous
    assert selection_stability(subsets, bits, n_resamples=B, seed=seed, top=len(texts)) == got


def test_a_strong_effect_is_stable_and_ties_go_to_fewer_heads():
    oracle = SyntheticOracle(2, 2, n_dist=400, effects={"L0H1": 0.2})
    subsets, bits = _subsets(oracle, ["L0H0", "L0H1", "L0H1+L1H0", "L1H1"])  # L0H1+L1H0 ties L0H1 exactly
    st = selection_stability(subsets, bits, n_resamples=200)
    assert st["selected"] == "L0H1" and st["selected_frequency"] == 1.0
    assert st["wins"] == [{"heads": "L0H1", "frequency": 1.0}]


def test_without_any_effect_the_selection_is_unstable():
    oracle = SyntheticOracle(4, 4, n_dist=300, n_test=300, noise=0.1, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the best of noise may have a non-positive discovery gain
        r = run_search(
            oracle,
            config=SearchConfig(k=2, pool_size=6, n_null=1, posthoc=False, n_stability=500),
            progress=False,
        )
    st = r.stability.selection
    assert st["method"] == "reselect"  # the pool is redone on every resample, not kept
    assert st["selected"] == r.heads and st["n_resamples"] == 500
    assert st["selected_frequency"] <= st["upper"] <= 1.0
    assert sum(w["frequency"] for w in st["wins"]) <= 1.0 + 1e-12
    assert "selection stability" in str(r) and "bootstrap resamples of D_dist" in str(r)
    assert st["selected_frequency"] < 0.6 and r.stability.split_half["agree"] <= r.stability.split_half["agree_upper"] <= 1


def test_validates_its_input():
    oracle = SyntheticOracle(1, 2, n_dist=10)
    subsets, bits = _subsets(oracle, ["L0H0", "L0H1"])
    with pytest.raises(ValueError, match="no subsets"):
        selection_stability([], bits[:0])
    with pytest.raises(ValueError, match="shape"):
        selection_stability(subsets, bits[:1])
    with pytest.raises(ValueError, match="n_resamples"):
        selection_stability(subsets, bits, n_resamples=0)


def test_ties_are_said_not_reported_as_a_clear_win():
    """Every one of 21 subsets scored 0 pp (no ablation changed an answer), yet "L0H0 wins 100.0%"
    was reported: S-hat won every resample by the tie-break alone. The record and the text now say
    so, and count the subsets the data cannot separate from it."""
    from cel_lens.selection.result import format_result

    correct = torch.tensor([True, False, True, True, False, True] * 10)
    texts = ["L0H0", "L0H1", "L1H0", "L0H0+L0H1", "L0H0+L1H0"]
    subsets = [SubsetScore(HeadSet.parse(t), int(correct.sum()), 60, 0.0, 0.0) for t in texts]
    bits = correct.expand(len(texts), -1).clone()
    st = selection_stability(subsets, bits, n_resamples=100)
    assert st["selected"] == "L0H0" and st["selected_frequency"] == 1.0
    assert st["selected_by_tie_break"] == 1.0 and st["identical_subsets"] == 4
    planted = SyntheticOracle(2, 2, n_dist=400, effects={"L0H1": 0.2})  # a real winner: no tie at all
    subsets, bits = _subsets(planted, ["L0H0", "L0H1", "L1H1"])
    clear = selection_stability(subsets, bits, n_resamples=100)
    assert clear["selected_by_tie_break"] == 0.0 and clear["identical_subsets"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_search(
            SyntheticOracle(2, 2, n_dist=50, n_test=50, noise=0.0, seed=0),
            config=SearchConfig(k=1, pool_size=4, n_null=1, posthoc=False, n_stability=50),
            progress=False,
        )  # no head changes any answer
    text = format_result(r)
    assert r.stability.selection["identical_subsets"] == 3 and "only by the tie-break" in text
    assert "3 other subset(s) give the same answer on every D_dist example" in text


@pytest.mark.parametrize("rule", ["one_se", "backward"])
def test_every_rule_matches_the_selection_itself_on_the_same_resamples(rule):
    # the stability of a result is the stability of the rule that chose it, ties broken by the
    # resample's counts as select_parsimonious breaks them (before: the full data's stage-1 order)
    from cel_lens.selection import select_parsimonious

    oracle = SyntheticOracle(2, 3, n_dist=150, effects={"L0H0": 0.04, "L1H1": 0.02}, noise=0.08, seed=2)
    texts = ["L0H0", "L1H1", "L0H2", "L0H1", "L0H0+L1H1", "L0H0+L0H2", "L0H0+L0H1", "L1H1+L0H2", "L0H1+L1H1",
             "L0H1+L0H2"]
    subsets, bits = _subsets(oracle, texts, {t: 0.01 * i for i, t in enumerate(texts)})
    B, seed = 120, 3
    got = selection_stability(subsets, bits, n_resamples=B, seed=seed, top=len(texts), rule=rule)
    assert got["selected"] == str(select_parsimonious(subsets, bits, rule)[0].heads)
    idx = np.random.default_rng([seed, 0x5EED]).integers(0, bits.shape[1], size=(B, bits.shape[1]))
    wins: dict[str, int] = {}
    for row in idx:
        resampled_bits = bits[:, torch.from_numpy(row)]
        resampled = [SubsetScore(s.heads, int(c.sum()), s.n_dist, 0.0, s.score_sum) for s, c in zip(subsets, resampled_bits)]
        winner = str(select_parsimonious(resampled, resampled_bits, rule)[0].heads)
        wins[winner] = wins.get(winner, 0) + 1
    assert {w["heads"]: w["frequency"] for w in got["wins"]} == {h: c / B for h, c in wins.items()}
    assert sum(w["frequency"] for w in got["wins"]) <= 1.0 + 1e-12
    assert got["selected_frequency"] == wins.get(got["selected"], 0) / B


def test_the_text_the_heatmap_and_the_grid_read_one_computation():
    # issue 42 item 8: "L1H3 wins 49.2 %" beside "L1H3+L1H5 49.2 %" (the raw winner's frequency
    # under S-hat's name), a heatmap at 5 % and a table at 22 %: now one set of picks feeds all three
    from cel_lens.grids.summary import selection_stability as grid_stability
    from cel_lens.report.heatmap import stability_wins

    oracle = SyntheticOracle(4, 4, n_dist=300, n_test=100, effects={"L1H2": 0.08}, noise=0.05, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_search(
            oracle,
            config=SearchConfig(k=3, pool_size=6, n_null=5, n_stability=200),
            progress=False,
        ).to_dict()
    st = r["selection_stability"]
    assert st["selected"] == r["heads"] == "L1H2"
    for incomplete in (0.0, 0.2, 0.9):  # all winners known; a few not known; most not known (no share at all)
        rec = {**r, "selection_stability": {**st, "incomplete": incomplete}}
        wins = stability_wins(rec["selection_stability"])
        if incomplete > 0.5:
            assert wins is None and grid_stability(Result.from_dict(rec).stability) is None
            continue
        assert wins[r["heads"]] == pytest.approx(st["selected_frequency"] / (1 - incomplete)) == grid_stability(Result.from_dict(rec).stability)
        assert sum(wins.values()) <= (1.0 + 1e-12) / (1 - incomplete)
    subsets = [SubsetScore(HeadSet.parse(s["heads"]), round(s["dist_acc"] * 300), 300, s["dist_gain"], s["score_sum"])
               for s in r["subsets"]]
    bits = oracle.evaluate("dist", [s.heads for s in subsets])
    fixed = selection_stability(subsets, bits, n_resamples=100, rule="backward", stand_ins=16)
    assert fixed["selected"] == "L1H2"  # before: the raw winner, a padded set, under S-hat's name
    assert sum(w["frequency"] for w in fixed["wins"]) <= 1.0 + 1e-12

"""A SearchConfig passed whole to run_search and plan_search does what the loose options do."""

from __future__ import annotations

import pytest

from cel_lens.config import SearchConfig
from cel_lens.selection.algorithm import run_search
from cel_lens.selection.plan import plan_search
from cel_lens.testing.synthetic import realistic_oracle


def test_run_search_takes_the_config_whole():
    config = SearchConfig(k=2, pool_size=4, n_null=5, n_boot=50, seed=3, posthoc=False)
    whole = run_search(realistic_oracle(4, 8, seed=1)[0], config=config, progress=False)
    assert whole.k == 2 and whole.pool_size == 4
    assert run_search(realistic_oracle(4, 8, seed=1)[0], config, progress=False) == whole  # positional too
    with pytest.raises(TypeError, match="unexpected keyword argument 'k'"):  # options live in the config only
        run_search(realistic_oracle(4, 8, seed=1)[0], config=config, k=1, seed=1)
    with pytest.raises(TypeError, match="config must be a SearchConfig"):
        run_search(realistic_oracle(4, 8, seed=1)[0], {"k": 2})


def test_run_search_has_at_most_five_parameters():
    import inspect

    assert len(inspect.signature(run_search).parameters) <= 5


def test_the_config_is_checked_before_any_evaluation():
    """run_search validates the config by its fields' rules (the same message as the CLI's) before
    its oracle is asked anything."""
    oracle, _ = realistic_oracle(4, 8, seed=1)
    asked = []
    oracle_evaluate = oracle.evaluate
    oracle.evaluate = lambda *a, **kw: asked.append(a) or oracle_evaluate(*a, **kw)
    for bad, message in ((SearchConfig(k=5, pool_size=4), "k must be at most the pool size"),
                         (SearchConfig(parsimony="smallest"), "unknown parsimony 'smallest'"),
                         (SearchConfig(n_adjusted=-1), "n_adjusted must be >= 0")):
        with pytest.raises(ValueError, match=message):
            run_search(oracle, bad, progress=False)
    assert asked == []


def test_plan_search_takes_the_config_whole():
    config = SearchConfig(k=2, pool_size=5, scorer="compressed", n_masks=11, n_null=7)
    assert plan_search(3, 4, 10, 20, config=config) == plan_search(
        3, 4, 10, 20, k=2, pool_size=5, scorer="compressed", n_masks=11, n_null=7
    )

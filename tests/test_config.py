"""What a search computes: the split seed and the specificity option, validated up front, and
recorded in the manifest only when set (run directories made before them keep their identity)."""

from __future__ import annotations

import pytest

from cel_lens.config import SearchConfig


def test_split_seed_follows_seed_unless_given():
    assert SearchConfig(seed=7).task_seed == 7
    assert SearchConfig(seed=7, split_seed=2).task_seed == 2


def test_new_options_are_recorded_only_when_set():
    plain = SearchConfig().manifest_options()
    assert "split_seed" not in plain and "n_specificity" not in plain
    both = SearchConfig(split_seed=0, n_specificity=10).manifest_options()
    assert both["split_seed"] == 0 and both["n_specificity"] == 10
    assert {k: v for k, v in both.items() if k not in ("split_seed", "n_specificity")} == plain


@pytest.mark.parametrize("field,value", [("split_seed", -1), ("split_seed", 1.5), ("n_specificity", -2)])
def test_bad_values_fail_before_any_work(field, value):
    with pytest.raises(ValueError, match=field):
        SearchConfig(**{field: value}).validate()

"""The oracle boundary (cel_lens.oracle): stage-1 scores that carry their split. The search's
memoising, test-guarding wrapper is tested with it, in tests/selection/test_memo.py."""

from __future__ import annotations

import pytest
import torch

from cel_lens.oracle import Stage1Scores, TestSplitError, discovery_scores


def test_scores_must_say_they_come_from_the_discovery_split():
    values = torch.zeros(2, 3)
    ok = discovery_scores(Stage1Scores(values, "dist", "exact"), 2, 3)
    assert ok.values.dtype == torch.float64 and ok.record()["split"] == "dist"
    with pytest.raises(TestSplitError, match="computed on split 'test'"):
        discovery_scores(Stage1Scores(values, "test", "attribution"), 2, 3)
    with pytest.raises(TestSplitError, match="bare Tensor"):
        discovery_scores(values, 2, 3)
    with pytest.raises(ValueError, match="shape"):
        discovery_scores(Stage1Scores(values, "dist", "exact"), 3, 3)
    with pytest.raises(ValueError, match=r"\[layer, head\]"):
        Stage1Scores(torch.zeros(6), "dist", "exact")

"""Scorers as a registry: one class and one table line make a scorer work in plan and search."""

from __future__ import annotations

import math

import pytest
import torch

import cel_lens as cl
from cel_lens.config import SCORERS, SearchConfig
from cel_lens.oracle import DIST_SPLIT, Stage1Scores
from cel_lens.scoring import score_heads
from cel_lens.scoring.base import Cost, Scorer, get_scorer, scorer_class, scorer_from_config
from cel_lens.selection.plan import plan_search
from cel_lens.testing.planted import planted_task


class ReverseScorer(Scorer):
    """A toy scorer: later heads score higher (costs nothing)."""

    name = "reverse"
    units = "rank"

    def cost(self, n_layers, n_heads, n_dist):
        return Cost(0, "no evaluation")

    def score(self, oracle, *, batch_size=8, progress=True, model=None, split=None):
        n = oracle.n_layers * oracle.n_heads
        return Stage1Scores(torch.arange(n, dtype=torch.float64).reshape(oracle.n_layers, oracle.n_heads), DIST_SPLIT, self.name)


@pytest.fixture
def reverse(monkeypatch):
    monkeypatch.setitem(SCORERS, "reverse", f"{__name__}:ReverseScorer")


def test_built_in_scorers_and_their_costs():
    assert {"exact", "attribution", "compressed", "racing", "prescreen"} <= set(SCORERS)  # more may be added
    assert all(issubclass(scorer_class(name), Scorer) and scorer_class(name).name == name for name in SCORERS)
    assert scorer_class("exact").in_search and scorer_class("attribution").units == "nats"
    assert get_scorer("exact").cost(4, 8, 10) == Cost(32, "every head alone", singles=True)
    assert get_scorer("compressed", sparsity=0.05, bogus=1).cost(4, 8, 10).head_sets == max(32, 16, math.ceil(5 / 0.05))
    assert get_scorer("compressed", n_masks=7).cost(4, 8, 10).head_sets == 7
    # priced as whole passes: a knockout of several heads reaches near layer 0, attribution runs every layer
    assert get_scorer("compressed", n_masks=7).cost(4, 8, 10).full == 7
    assert get_scorer("attribution").cost(4, 8, 10).full == get_scorer("attribution").cost(4, 8, 10).head_sets == 3
    assert get_scorer("exact").cost(4, 8, 10).full == 0  # layer by layer: each head resumes at its own layer
    config = SearchConfig(scorer="compressed", n_masks=9, sparsity=0.1, seed=3)
    assert scorer_from_config(config).options.__dict__ == {"n_masks": 9, "sparsity": 0.1, "seed": 3}
    racing = scorer_from_config(SearchConfig(scorer="racing", pool_size=5, delta=0.1, seed=2)).options
    assert (racing.pool_size, racing.delta, racing.margin, racing.seed) == (5, 0.1, 0.0, 2)
    assert get_scorer("racing").cost(4, 8, 10) == Cost(32, get_scorer("racing").cost(4, 8, 10).note, bound=True)
    with pytest.raises(ValueError, match="unknown scorer 'psychic'; choose one of ") as caught:
        score_heads("psychic")
    assert all(name in str(caught.value) for name in SCORERS)


def test_a_new_scorer_is_one_class_and_one_line(reverse, tiny_model, tmp_path):
    plan = plan_search(3, 4, 10, 10, k=1, pool_size=2, scorer="reverse")
    stage1 = next(s for s in plan.stages if s.name.startswith("stage 1"))
    assert stage1.name == "stage 1 (reverse)" and stage1.head_sets == 0 and stage1.note == "no evaluation"
    assert SearchConfig(scorer="reverse").validate().scorer == "reverse"
    run = cl.search(tiny_model, planted_task(tiny_model, n=8), k=1, pool_size=2, n_null=2, n_boot=20,
                    scorer="reverse", out=tmp_path / "run", progress=False)
    assert run.result.scorer == "reverse" and run.result.pool == ["L2H3", "L2H2"]

"""Paper-size plans: the FLOP count's parts, the store the plan keeps on each GPU, the time at an efficiency."""

from __future__ import annotations

import pytest

from cel_lens.model import PAPER_MODELS
from cel_lens.selection.plan import plan_search
from cel_lens.selection.plan_memory import DEVICES, MemoryShape
from cel_lens.selection.plan_paper import PAPER_TASKS, PaperTask, extra_layers, paper_plan, search_flops

SHAPE = MemoryShape(n_layers=4, d_model=8, n_heads=2, n_kv_heads=1, d_head=4, d_mlp=16, d_vocab=10, params=0)
TASK = PaperTask(n_dist=3, n_test=2, tokens=5, scored=1)


def test_flops_by_hand():
    """One intact pass and the eight single heads of a 4 x 2 model on 3 examples of 5 tokens."""
    plan = plan_search(4, 2, 3, 2, k=1, pool_size=2, n_null=1, controls=False)
    only = type(plan)(tuple(s for s in plan.stages if s.name in ("intact", "stage 1 (exact)")), 4, 2)
    per_layer = 2 * (8 * 8 + 8 * 4 + 8 * 4 + 8 * 8 + 3 * 8 * 16) + 4 * 2.5 * 2 * 4  # q k v o, mlp; attention
    unembed = 1 * 2 * 8 * 10
    intact = 3 * (4 * 5 * per_layer + unembed)
    heads = 8 * 3 * (2.5 * 5 * per_layer + unembed)  # a head at an average layer runs (L + 1) / 2 layers
    assert search_flops(only, SHAPE, TASK) == pytest.approx(intact + heads)
    # a store keeping none of the layers: every ablated pass runs from layer 0, all four layers
    assert search_flops(only, SHAPE, TASK, {"dist": extra_layers(4, 0)}) == pytest.approx(
        intact + 8 * 3 * (4 * 5 * per_layer + unembed))


def test_extra_layers():
    assert extra_layers(28, 27) == 0.0
    assert (28 + 1) / 2 + extra_layers(28, 0) == 28  # no store: every pass from the embeddings
    assert 0 < extra_layers(28, 13) < extra_layers(28, 6)


@pytest.mark.parametrize("hub_id", list(PAPER_MODELS))
def test_boolq_needs_a_store_budget_on_an_h100_and_arithmetic_does_not(hub_id):
    h100, h200 = paper_plan(hub_id, "boolq", "h100"), paper_plan(hub_id, "boolq", "h200")
    for p in (h100, h200):
        assert p.memory.fits and p.memory.peak <= p.memory.usable
    assert h100.memory.store_layers["test"] < h100.memory.store_candidates
    assert any("--store-budget" in n for n in h100.memory.notes)
    assert h200.memory.store_layers["test"] > h100.memory.store_layers["test"]
    assert h100.flops > h200.flops  # fewer stored layers: passes resume lower
    arith = paper_plan(hub_id, "arithmetic", "h100")
    assert arith.memory.store_layers == {"dist": arith.memory.store_candidates, "test": arith.memory.store_candidates}
    assert arith.memory.store_budget is None


def test_store_and_time_by_hand():
    p = paper_plan("meta-llama/Llama-3.2-3B-Instruct", "arithmetic", "h200", efficiency=0.5)
    task = PAPER_TASKS["arithmetic"]
    dist = 27 * round(task.tokens * task.n_dist) * 3072 * 2  # 27 layers x positions x d_model x bf16
    assert p.memory.stage("D_dist (intact, stages 1-2)").parts["store"] == dist
    assert p.seconds == pytest.approx(p.flops / (DEVICES["h200"].bf16_flops * 0.5))
    assert p.memory.stage("load").parts["weights"] == p.memory.stage("D_dist (intact, stages 1-2)").parts["weights"]

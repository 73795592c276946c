"""``benchmarks/prefix.py``: generation's FLOP bound with the shared prompt start counted once
(against the bound computed piece by piece), and the measurement's scan on a tiny model."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not part of the installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.limit import Shape, generation_flops, head_flops, intact_flops  # noqa: E402
from benchmarks.prefix import generation_flops_shared, measure_scan  # noqa: E402

SHAPE = Shape(n_layers=3, n_heads=2, n_kv_heads=1, d_model=16, d_head=8, d_mlp=24, d_vocab=50)


def _by_pieces(prompts, completions, p):
    """The bound with a prefix of ``p`` tokens once per evaluation, written out piece by piece:
    the prefix (no scored position), then each prompt's rest after it, then the decode steps as
    :func:`generation_flops` charges them."""
    H, total = SHAPE.n_heads, 0
    for e, row in enumerate(completions):
        layer = (e - 1) // H
        total += intact_flops(SHAPE, p, 0, 0) if e == 0 else head_flops(SHAPE, layer, p, 0, 0)
        for ids, prompt in zip(row, prompts):
            rest = len(prompt) - p
            total += intact_flops(SHAPE, rest, 1, p) if e == 0 else head_flops(SHAPE, layer, rest, 1, p)
    decode = generation_flops(SHAPE, [len(q) for q in prompts], completions)[1] - sum(
        (intact_flops(SHAPE, len(q), 1, 0) if e == 0 else head_flops(SHAPE, (e - 1) // H, len(q), 1, 0))
        for e in range(len(completions)) for q in prompts
    )
    return total + decode


def test_generation_bound_counts_the_shared_prefix_once():
    prompts = [[1, 2, 3, 4, 5, 9], [1, 2, 3, 4, 7, 7, 7, 8], [1, 2, 3, 4, 5, 6, 2]]  # 4 shared tokens
    rng = random.Random(0)
    completions = [[[rng.randrange(50) for _ in range(rng.randint(1, 5))] for _ in prompts] for _ in range(1 + 6)]
    intact, scan = generation_flops_shared(SHAPE, prompts, completions)
    full_intact, full_scan = generation_flops(SHAPE, [len(q) for q in prompts], completions)
    assert scan == _by_pieces(prompts, completions, 4)
    assert full_scan - scan == 2 * (intact_flops(SHAPE, 4, 0, 0) + sum(head_flops(SHAPE, l, 4, 0, 0) for l in range(3) for _ in range(2)))
    assert full_intact - intact == 2 * intact_flops(SHAPE, 4, 0, 0)
    # nothing shared, or a single prompt: the unshared bound
    two = [r[:2] for r in completions]
    assert generation_flops_shared(SHAPE, [[1, 2], [3, 4]], two) == generation_flops(SHAPE, [2, 2], two)
    assert generation_flops_shared(SHAPE, prompts[:1], [r[:1] for r in completions]) == \
        generation_flops(SHAPE, [6], [r[:1] for r in completions])


def test_measure_scan_on_a_tiny_model(tiny_model):
    from cel_lens.tasks import Example, Split

    rng = random.Random(1)
    words = ["the", "river", "runs", "through", "a", "city"]
    examples = [
        Example(f"e/{i}", "Answer in one word. Q: " + " ".join(rng.choice(words) for _ in range(6)) + "\nA:", target=" a b")
        for i in range(12)
    ]
    split = Split("dist", tuple(examples), task="t", answer_type="exact_match", metric="acc")
    out = measure_scan(tiny_model, split, ["L0H1", "L2H3"], batch_size=6)
    assert out["decisions_identical"] and out["decisions_compared"] == 3 * 12
    assert out["positions_shared"] < out["positions_unshared"]
    assert any(p > 0 for p in out["prefix_tokens"])
    assert out["cpu_s_shared"] > 0 and out["cpu_s_unshared"] > 0

"""Arithmetic (Brown et al. 2020, GPT-3): ten configs pooled, exact match of the completion.

Protocol (lm-evaluation-harness ``arithmetic_*``): the prompt is the raw context normalised as
EleutherAI's loader does (``strip``, ``"\\n\\n"`` -> ``"\\n"``, ``Q:`` -> ``Question:``, ``A:`` ->
``Answer:``); the target is the completion with its leading space; an example is correct iff every
target token is the greedy argmax (answer type ``"exact_match"``, metric ``acc``).

Splits (paper, Table 3): the 10 x 2,000 validation rows form one pool; a seeded draw gives 2,000
for D_dist and a disjoint 1,000 for D_test. ``Example.meta["config"]`` (``"2da"``, ...) allows
per-config accuracy; ids are ``arithmetic/<config>/<row index in its file>``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from cel_lens.tasks.avoid import draw_pool
from cel_lens.tasks.base import Example, Task, TaskSpec
from cel_lens.tasks.io import (
    PathLike,
    build_examples,
    load_rows,
    reject_options,
    require,
    resolve_data_dir,
)

__all__ = ["CONFIGS", "HUB_ID", "INFO", "SPEC", "format_context", "load_arithmetic"]

HUB_ID = "EleutherAI/arithmetic"

# EleutherAI config -> GPT-3 file name (openai/gpt-3 ``data/``), in the lm-eval order.
CONFIGS: dict[str, str] = {
    "2da": "two_digit_addition.jsonl",
    "2ds": "two_digit_subtraction.jsonl",
    "3da": "three_digit_addition.jsonl",
    "3ds": "three_digit_subtraction.jsonl",
    "4da": "four_digit_addition.jsonl",
    "4ds": "four_digit_subtraction.jsonl",
    "5da": "five_digit_addition.jsonl",
    "5ds": "five_digit_subtraction.jsonl",
    "2dm": "two_digit_multiplication.jsonl",
    "1dc": "single_digit_three_ops.jsonl",
}

N_DIST, N_TEST = 2000, 1000

INFO: dict[str, Any] = {
    "answer_type": "exact_match",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "validation, 10 configs pooled (20,000 rows)",
    "test_from": "validation, same pool, disjoint",
    "hub": HUB_ID,
    "files": [f"arithmetic/{f}" for f in CONFIGS.values()],
}


def format_context(context: str) -> str:
    """lm-eval's normalisation of a raw GPT-3 arithmetic context (idempotent)."""
    return context.strip().replace("\n\n", "\n").replace("Q:", "Question:").replace("A:", "Answer:")


def load_arithmetic(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    configs: Sequence[str] = tuple(CONFIGS),
    avoid_test: Optional[PathLike] = None,
    **kw: Any,
) -> Task:
    """Arithmetic with D_dist (default 2,000) and D_test (default 1,000) drawn disjointly, seeded,
    from the pooled validation rows of ``configs`` (default all ten). ``avoid_test``: a file of rows
    D_test must not contain (:mod:`cel_lens.tasks.avoid`)."""
    reject_options("arithmetic", kw)
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        raise ValueError(f"unknown arithmetic config(s) {unknown or configs!r}; choose from {', '.join(CONFIGS)}")
    root = resolve_data_dir(data_dir, needs=[f"arithmetic/{CONFIGS[c]}" for c in configs])
    pool: list[Example] = []
    sources = []
    for cfg in configs:
        rows, record = load_rows(
            what=f"Arithmetic {cfg} validation",
            data_dir=root,
            relpath=f"arithmetic/{CONFIGS[cfg]}",
            hub_id=HUB_ID,
            hub_config=f"arithmetic_{cfg}",
            hub_split="validation",
        )
        sources.append(record)
        pool.extend(build_examples(rows, lambda row, i, cfg=cfg: Example(
            id=f"arithmetic/{cfg}/{i}",
            prompt=format_context(require(row, "context", str)),
            target=require(row, "completion", str),
            meta={"config": cfg},
        )))
    where = f"the arithmetic pool of {', '.join(configs)}"
    dist, test, drawn = draw_pool(pool, n_dist, n_test, (N_DIST, N_TEST), seed, avoid_test, "arithmetic", where)
    return Task(
        name="arithmetic",
        answer_type="exact_match",
        dist=dist,
        test=test,
        metric="acc",
        options={
            "seed": seed,
            "configs": list(configs),
            "pool_rows": len(pool),
            "chat_template": bool(chat_template),
            "metrics": ["acc"],
            "protocol": "lm-evaluation-harness arithmetic_*: zero-shot, exact match of the completion",
            "sources": sources,
            **drawn,  # n_dist, n_test, pool_distinct and the avoid list
        },
    )


SPEC = TaskSpec(load_arithmetic, INFO)
"""What the task registry names (``"cel_lens.tasks.arithmetic:SPEC"``): the loader and its info."""

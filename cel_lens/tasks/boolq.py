"""BoolQ (Clark et al. 2019): yes/no questions about a passage, by log-likelihood of " no"/" yes".

Protocol (lm-evaluation-harness ``boolq``): prompt ``"{passage}\\nQuestion: {question}?\\nAnswer:"``,
choices ``(" no", " yes")``, label ``int(answer)``; metric ``acc`` (summed log-likelihood).

Splits (paper, Table 3): D_dist = 2,000 seeded from ``train`` (rows equal to a test row left out),
D_test = ``validation`` (3,270). Local files: ``boolq/dev.jsonl`` (validation) and
``boolq/train.jsonl`` in the raw schema (question, title, answer, passage) or the hub's (no title).
Ids are ``boolq/<train|validation>/<row index in the file>``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from cel_lens.tasks import Example, Task, register_task
from cel_lens.tasks._io import (
    PathLike,
    check_size,
    check_unique_ids,
    load_rows,
    resolve_data_dir,
    sample_excluding,
    seeded_sample,
)

__all__ = ["HUB_ID", "INFO", "CHOICES", "make_example", "load_boolq"]

HUB_ID = "google/boolq"
CHOICES = (" no", " yes")
N_DIST, N_TEST = 2000, 3270

INFO: dict[str, Any] = {
    "kind": "multiple_choice",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "train (9,427), seeded sample",
    "test_from": "validation (3,270), all",
    "hub": HUB_ID,
    "files": ["boolq/train.jsonl", "boolq/dev.jsonl"],
}


def make_example(row: Mapping[str, Any], split: str, index: int) -> Example:
    """One BoolQ row (raw or hub schema) as a two-choice example."""
    answer = row["answer"]
    if not isinstance(answer, bool):
        raise ValueError(f"BoolQ {split} row {index}: answer must be true/false, got {answer!r}")
    meta = {"title": row["title"]} if row.get("title") else {}
    return Example(
        id=f"boolq/{split}/{index}",
        prompt=f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:",
        choices=CHOICES,
        label=int(answer),
        meta=meta,
    )


@register_task("boolq", info=INFO)
def load_boolq(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
) -> Task:
    """BoolQ with D_dist sampled from train (default 2,000) and D_test = validation (default all;
    a smaller ``n_test`` is a seeded sample)."""
    root = resolve_data_dir(data_dir)
    val_rows, val_src = load_rows(
        what="BoolQ validation", data_dir=root, relpath="boolq/dev.jsonl", hub_id=HUB_ID, hub_split="validation"
    )
    train_rows, train_src = load_rows(
        what="BoolQ train", data_dir=root, relpath="boolq/train.jsonl", hub_id=HUB_ID, hub_split="train"
    )
    val = [make_example(r, "validation", i) for i, r in enumerate(val_rows)]
    train = [make_example(r, "train", i) for i, r in enumerate(train_rows)]
    n_t = check_size(n_test, len(val), len(val), "BoolQ D_test", f"BoolQ validation ({val_src.get('path', HUB_ID)})")
    test = seeded_sample(val, n_t, seed, "boolq/test")
    dist, skipped = sample_excluding(
        train,
        n_dist,
        N_DIST,
        seed,
        "boolq/dist",
        (e.content_hash for e in val),
        "BoolQ D_dist",
        f"BoolQ train ({train_src.get('path', HUB_ID)})",
    )
    check_unique_ids([*dist, *test], "boolq")
    return Task(
        name="boolq",
        kind="multiple_choice",
        dist=dist,
        test=test,
        metric="acc",
        options={
            "seed": seed,
            "n_dist": len(dist),
            "n_test": n_t,
            "chat_template": bool(chat_template),
            "metrics": ["acc"],
            "train_rows_equal_to_test": skipped,
            "protocol": "lm-evaluation-harness boolq: zero-shot, log-likelihood of ' no' / ' yes'",
            "sources": [val_src, train_src],
        },
    )

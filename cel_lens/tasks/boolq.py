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

from cel_lens.tasks.base import Example, Task
from cel_lens.tasks.io import PathLike, reject_options, require, train_val_splits

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
    answer = require(row, "answer", bool)
    passage, question = require(row, "passage", str), require(row, "question", str)
    title = require(row, "title", str, optional=True)
    meta = {"title": title} if title else {}
    return Example(
        id=f"boolq/{split}/{index}",
        prompt=f"{passage}\nQuestion: {question}?\nAnswer:",
        choices=CHOICES,
        label=int(answer),
        meta=meta,
    )


def load_boolq(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    **kw: Any,
) -> Task:
    """BoolQ with D_dist sampled from train (default 2,000) and D_test = validation (default all;
    a smaller ``n_test`` is a seeded sample)."""
    reject_options("boolq", kw)
    dist, test, opts = train_val_splits(
        task="boolq",
        label="BoolQ",
        data_dir=data_dir,
        hub_id=HUB_ID,
        val_relpath="boolq/dev.jsonl",
        train_relpath="boolq/train.jsonl",
        val_name="validation",
        make_example=make_example,
        n_dist=n_dist,
        n_test=n_test,
        n_dist_default=N_DIST,
        seed=seed,
    )
    return Task(
        name="boolq",
        kind="multiple_choice",
        dist=dist,
        test=test,
        metric="acc",
        options={
            **opts,
            "chat_template": bool(chat_template),
            "metrics": ["acc"],
            "protocol": "lm-evaluation-harness boolq: zero-shot, log-likelihood of ' no' / ' yes'",
        },
    )

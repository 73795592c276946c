"""BoolQ (Clark et al. 2019): yes/no questions about a passage, by log-likelihood of " no"/" yes".

Protocol (lm-evaluation-harness ``boolq``, which reads SuperGLUE's BoolQ, ``aps/super_glue``):
prompt ``"{passage}\\nQuestion: {question}?\\nAnswer:"``, choices ``(" no", " yes")``, label
``int(answer)``; metric ``acc`` (summed log-likelihood). SuperGLUE's passage is the Wikipedia
article's title and the paragraph, ``"{title} -- {passage}"`` (e.g. ``"Ethanol fuel -- All biomass
goes through..."``); :func:`superglue_passage` builds it from the official BoolQ files, which carry
the title. Rows already in SuperGLUE's schema (``passage`` with the title, ``label``, ``idx``) are
read as they are. Rows with neither (``google/boolq`` on the hub drops the title) keep the bare
passage: the loader warns and records how many (``options["rows_without_title"]``), since those
prompts differ from lm-eval's.

Splits (paper, Table 3): D_dist = 2,000 seeded from ``train`` (rows equal to a test row left out),
D_test = ``validation`` (3,270). Local files: ``boolq/dev.jsonl`` (validation) and
``boolq/train.jsonl`` in the official schema (question, title, answer, passage) or SuperGLUE's;
without a data directory the rows come from the hub's ``aps/super_glue`` (``boolq``), as lm-eval's.
Ids are ``boolq/<train|validation>/<row index in the file>``.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.base import Example, Task
from cel_lens.tasks.io import PathLike, reject_options, require, train_val_splits

__all__ = ["HUB_ID", "HUB_CONFIG", "INFO", "CHOICES", "superglue_passage", "make_example", "load_boolq"]

HUB_ID = "aps/super_glue"
HUB_CONFIG = "boolq"
CHOICES = (" no", " yes")
N_DIST, N_TEST = 2000, 3270

INFO: dict[str, Any] = {
    "kind": "multiple_choice",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "train (9,427), seeded sample",
    "test_from": "validation (3,270), all",
    "hub": f"{HUB_ID} ({HUB_CONFIG})",
    "files": ["boolq/train.jsonl", "boolq/dev.jsonl"],
}


def superglue_passage(row: Mapping[str, Any]) -> str:
    """The passage as SuperGLUE's BoolQ (and so lm-eval) gives it: ``"{title} -- {passage}"`` for
    a row of the official files; a SuperGLUE row's passage (it holds the title already) or a
    title-less row's passage as it is."""
    title = row.get("title")
    return f"{title} -- {row['passage']}" if title else str(row["passage"])


def _label(row: Mapping[str, Any], split: str, index: int) -> int:
    if "answer" in row:  # the official files and google/boolq: a bool
        return int(require(row, "answer", bool))
    label = row.get("label")  # SuperGLUE: 0 (False) / 1 (True), -1 in the unlabelled test split
    if isinstance(label, bool) or label in (0, 1):
        return int(label)
    raise ValueError(f"BoolQ {split} row {index}: needs an answer (true/false) or a label (0/1), got {label!r}")


def make_example(row: Mapping[str, Any], split: str, index: int) -> Example:
    """One BoolQ row (official, SuperGLUE or ``google/boolq`` schema) as a two-choice example;
    ``meta["title"]`` is the title when the row has one (``None`` when the passage has none)."""
    question = require(row, "question", str)
    require(row, "passage", str)
    require(row, "title", str, optional=True)
    titled = bool(row.get("title")) or "label" in row
    return Example(
        id=f"boolq/{split}/{index}",
        prompt=f"{superglue_passage(row)}\nQuestion: {question}?\nAnswer:",
        choices=CHOICES,
        label=_label(row, split, index),
        meta={"title": row.get("title") or None, "passage_titled": titled},
    )


def _untitled(examples: list[Example]) -> int:
    return sum(1 for e in examples if not e.meta.get("passage_titled"))


def load_boolq(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    splits: Sequence[str] = ("dist", "test"),
    **kw: Any,
) -> Task:
    """BoolQ with D_dist sampled from train (default 2,000) and D_test = validation (default all;
    a smaller ``n_test`` is a seeded sample). ``splits=("test",)`` reads the validation file alone."""
    reject_options("boolq", kw)
    dist, test, opts = train_val_splits(
        task="boolq",
        label="BoolQ",
        data_dir=data_dir,
        hub_id=HUB_ID,
        hub_config=HUB_CONFIG,
        val_relpath="boolq/dev.jsonl",
        train_relpath="boolq/train.jsonl",
        val_name="validation",
        make_example=make_example,
        n_dist=n_dist,
        n_test=n_test,
        n_dist_default=N_DIST,
        seed=seed,
        splits=splits,
    )
    untitled = _untitled([*dist, *test])
    if untitled:
        warnings.warn(
            f"BoolQ: {untitled} of {len(dist) + len(test)} rows have no title, so their passage is not "
            "SuperGLUE's '{title} -- {passage}' and their prompts differ from lm-eval's (use the official "
            "files, which carry the title)",
            UserWarning,
            stacklevel=3,
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
            "passage": "SuperGLUE: '{title} -- {passage}'",
            "rows_without_title": untitled,
            "protocol": "lm-evaluation-harness boolq (SuperGLUE passages): zero-shot, log-likelihood of ' no' / ' yes'",
        },
    )

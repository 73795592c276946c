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

Offline, only the validation file may be at hand (``../shared/data`` has no ``train.jsonl``).
``dist_from="validation"`` (``--task-option dist_from=validation``) then draws both splits from it,
disjoint by construction (:mod:`cel_lens.tasks.heldout`): D_test a seeded sample of 1,000 rows by
default, D_dist 2,000 of the rest. The task's options record ``dist_from`` and the protocol, so the
run manifest says D_dist did not come from train; a missing train file names this option.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.base import Example, Task, TaskSpec
from cel_lens.tasks.heldout import DIST_SOURCES, split_one_file
from cel_lens.tasks.io import DataNotFoundError, PathLike, reject_options, require, train_val_splits

__all__ = ["HUB_ID", "HUB_CONFIG", "INFO", "SPEC", "CHOICES", "superglue_passage", "make_example", "load_boolq"]

HUB_ID = "aps/super_glue"
HUB_CONFIG = "boolq"
CHOICES = (" no", " yes")
N_DIST, N_TEST = 2000, 3270
N_TEST_FROM_VALIDATION = 1000  # D_test's default size when D_dist is drawn from the validation file too

INFO: dict[str, Any] = {
    "answer_type": "multiple_choice",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "train (9,427), seeded sample",
    "test_from": "validation (3,270), all",
    "hub": f"{HUB_ID} ({HUB_CONFIG})",
    "files": ["boolq/train.jsonl", "boolq/dev.jsonl"],
    "options": {"dist_from": "train (default, as the paper) or validation: D_dist and a 1,000-row D_test "
                "both from the validation file, disjoint (when train is not at hand)"},
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
    dist_from: str = "train",
    avoid_test: Optional[PathLike] = None,
    reserve: Optional[PathLike] = None,
    **kw: Any,
) -> Task:
    """BoolQ with D_dist sampled from train (default 2,000) and D_test = validation (default all;
    a smaller ``n_test`` is a seeded sample). ``splits=("test",)`` reads the validation file alone.
    ``dist_from="validation"``: both splits from the validation file, disjoint (D_test default
    1,000; see the module docstring). ``avoid_test``: a file of rows D_test must not contain
    (:mod:`cel_lens.tasks.avoid`; with ``dist_from="validation"`` only). ``reserve``: a file of rows
    neither split may contain (the same format; with ``dist_from="validation"`` only): the planted
    controls' fit and truth rows (docs/planted.md)."""
    reject_options("boolq", kw)
    if avoid_test is not None and dist_from != "validation":
        raise ValueError("boolq: avoid_test needs dist_from='validation' (D_test is then a sample of validation)")
    if reserve is not None and dist_from != "validation":
        raise ValueError("boolq: reserve needs dist_from='validation' (both splits are then samples of validation)")
    if dist_from not in DIST_SOURCES:
        raise ValueError(f"boolq: dist_from must be one of {', '.join(DIST_SOURCES)}, got {dist_from!r}")
    common = dict(
        task="boolq", label="BoolQ", data_dir=data_dir, hub_id=HUB_ID, hub_config=HUB_CONFIG, val_name="validation",
        make_example=make_example, n_dist=n_dist, n_test=n_test, n_dist_default=N_DIST, seed=seed, splits=splits,
    )
    if dist_from == "validation":
        dist, test, opts = split_one_file(relpath="boolq/dev.jsonl", n_test_default=N_TEST_FROM_VALIDATION,
                                          avoid_test=avoid_test, reserve=reserve, **common)
    else:
        try:
            dist, test, opts = train_val_splits(
                val_relpath="boolq/dev.jsonl", train_relpath="boolq/train.jsonl", **common
            )
        except DataNotFoundError as err:
            if "BoolQ train" not in str(err):
                raise
            raise DataNotFoundError(
                f"{err}; or draw D_dist from the validation file, disjoint from D_test "
                "(--task-option dist_from=validation, or dist_from='validation')"
            ) from None
        opts["dist_from"] = "train"
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
        answer_type="multiple_choice",
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


SPEC = TaskSpec(load_boolq, INFO)
"""What the task registry names (``"cel_lens.tasks.boolq:SPEC"``): the loader and its info."""

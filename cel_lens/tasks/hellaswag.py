"""HellaSwag (Zellers et al. 2019): pick the ending of a context among four, by log-likelihood.

Protocol (lm-evaluation-harness ``hellaswag``): the context is
``preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())`` and the four choices are
``" " + preprocess(ending)``, where :func:`preprocess` strips, turns WikiHow's ``" [title]"`` into
``". "``, removes every ``[...]`` marker and collapses double spaces. The headline metric is
``acc_norm`` (summed log-likelihood divided by the ending's length in characters, without the
leading space, as in lm-eval; the lengths are in ``Example.meta["choice_chars"]``), with ``acc``
(raw summed log-likelihood) alongside.

Splits (paper, Table 3): D_dist = 2,000 seeded from ``train`` (rows equal to a test row left out),
D_test = ``validation`` (10,042). Local files: ``hellaswag/hellaswag_{train,val}.jsonl`` in
rowanz's raw schema or the hub's (the two differ only in ``label``: int vs. str). Ids are
``hellaswag/<train|val>/<row index in the file>`` (the dataset's own ``ind`` is in ``meta``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.base import Example, Task, TaskSpec
from cel_lens.tasks.io import PathLike, RowError, reject_options, require, train_val_splits

__all__ = ["HUB_ID", "INFO", "SPEC", "preprocess", "make_example", "load_hellaswag"]

HUB_ID = "Rowan/hellaswag"
N_DIST, N_TEST = 2000, 10042

INFO: dict[str, Any] = {
    "answer_type": "multiple_choice",
    "metric": "acc_norm",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "train (39,905), seeded sample",
    "test_from": "validation (10,042), all",
    "hub": HUB_ID,
    "files": ["hellaswag/hellaswag_train.jsonl", "hellaswag/hellaswag_val.jsonl"],
}

_BRACKETS = re.compile(r"\[.*?\]")


def preprocess(text: str) -> str:
    """lm-eval's HellaSwag text clean-up (the brackets are WikiHow artefacts)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = _BRACKETS.sub("", text)
    return text.replace("  ", " ")


def make_example(row: Mapping[str, Any], split: str, index: int) -> Example:
    """One HellaSwag row (raw or hub schema) as a multiple-choice example."""
    raw_endings = require(row, "endings", list)
    if len(raw_endings) != 4 or not all(isinstance(e, str) for e in raw_endings):
        raise RowError(f"HellaSwag {split} row {index}: expected 4 endings (strings), got {raw_endings!r:.80}")
    endings = [preprocess(e) for e in raw_endings]
    label = require(row, "label", (int, str), optional=True)
    if label in ("", None):
        raise RowError(f"HellaSwag {split} row {index} has no label (the test split is unlabelled)")
    if isinstance(label, str) and not label.isdigit() or int(label) not in range(4):
        raise RowError(f"HellaSwag {split} row {index}: label must be 0..3, got {label!r}")
    activity, ctx_a, ctx_b = (require(row, name, str) for name in ("activity_label", "ctx_a", "ctx_b"))
    return Example(
        id=f"hellaswag/{split}/{index}",
        prompt=preprocess(activity + ": " + ctx_a + " " + ctx_b.capitalize()),
        choices=tuple(" " + e for e in endings),
        label=int(label),
        meta={
            "ind": row.get("ind"),
            "activity_label": row["activity_label"],
            "source_id": row.get("source_id"),
            "split_type": row.get("split_type"),
            "choice_chars": tuple(len(e) for e in endings),
        },
    )


def load_hellaswag(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    splits: Sequence[str] = ("dist", "test"),
    **kw: Any,
) -> Task:
    """HellaSwag with D_dist sampled from train (default 2,000) and D_test = validation (default
    all; a smaller ``n_test`` is a seeded sample). ``splits=("test",)`` reads the validation file alone."""
    reject_options("hellaswag", kw)
    dist, test, opts = train_val_splits(
        task="hellaswag",
        label="HellaSwag",
        data_dir=data_dir,
        hub_id=HUB_ID,
        val_relpath="hellaswag/hellaswag_val.jsonl",
        train_relpath="hellaswag/hellaswag_train.jsonl",
        val_name="val",
        make_example=make_example,
        n_dist=n_dist,
        n_test=n_test,
        n_dist_default=N_DIST,
        seed=seed,
        splits=splits,
    )
    return Task(
        name="hellaswag",
        answer_type="multiple_choice",
        dist=dist,
        test=test,
        metric="acc_norm",
        options={
            **opts,
            "chat_template": bool(chat_template),
            "metrics": ["acc_norm", "acc"],
            "acc_norm_length": "characters of the ending without its leading space (meta['choice_chars'])",
            "protocol": "lm-evaluation-harness hellaswag: zero-shot, log-likelihood of 4 endings",
        },
    )


SPEC = TaskSpec(load_hellaswag, INFO)
"""What the task registry names (``"cel_lens.tasks.hellaswag:SPEC"``): the loader and its info."""

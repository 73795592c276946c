"""Two-choice addition: the right sum against a near miss, scored as a multiple-choice task.

Why it exists. Exact-match Arithmetic asks for the whole answer, and SmolLM2-135M-Instruct sits at its
floor there; BoolQ is a choice task, but that model cannot tell its yes-questions from its no-questions
(docs/planted.md). A planted capability control needs a task on which the model *discriminates*, so
that a head can cost it something that calibration does not give back. Here it does: it prefers the
right two-digit sum to the near miss on about two thirds of rows, above any constant prior.

Protocol: the prompt is the official GPT-3 two-digit addition context as the file holds it
(``"\n\nQ: What is 98 plus 45?\n\nA:"``, Brown et al. 2020's own format; lm-eval's normalisation,
used by exact-match ``arithmetic``, left SmolLM2 with less discrimination here, docs/planted.md); the
two choices are the right sum and the sum plus or minus :data:`OFFSET`, **ordered smaller first**
(choice 0 the smaller number, choice 1 the larger), each with its leading space; the choice with the
larger summed log-likelihood wins (lm-eval's ``acc`` for multiple choice). The near miss's sign is a
function of the row's text alone (:func:`near_miss`), so an example's content never depends on a
split seed. Since the choices are ordered by size, the answer prior is "prefer the larger":
calibration (:mod:`cel_lens.selection.calibration`) fits it as a threshold on
``lp(larger) - lp(smaller)``.

Splits: the 2,000 rows of ``two_digit_addition.jsonl`` (all distinct) form one pool; a seeded draw
gives D_dist (default 500) and a disjoint D_test (default 1,000). ``config`` picks another file of
the GPT-3 set instead (:data:`FILES`: the same protocol on a fresh pool, e.g. for a second planted
row once one pool is spent, docs/planted.md; the near miss stays +/- 20 and the name stays, though
``1dc`` and the others are not addition). ``reserve`` names a file of rows
neither split may hold (a planted model's fit and truth rows); ``avoid_test`` one of
rows D_test may not hold (:mod:`cel_lens.tasks.avoid`). Ids are ``arithmetic_choice/<config>/<row index>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import operator
import random
import re
from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.arithmetic import CONFIGS, HUB_ID
from cel_lens.tasks.avoid import draw_pool, reserved_rows
from cel_lens.tasks.base import Example, Task, TaskSpec
from cel_lens.tasks.io import PathLike, build_examples, load_rows, reject_options, require, resolve_data_dir

__all__ = ["CONFIG", "FILES", "OFFSET", "choices_text", "INFO", "SPEC", "near_miss", "make_example", "load_pool", "THREE_OPS", "fresh_three_ops",
           "load_arithmetic_choice"]

CONFIG = "2da"
"""The arithmetic config the pool is drawn from by default: two-digit addition."""
FILES = {"2da": "two-digit addition", "3da": "three-digit addition", "4da": "four-digit addition",
         "5da": "five-digit addition", "2ds": "two-digit subtraction", "2dm": "two-digit multiplication",
         "1dc": "single-digit three-operation"}
"""The configs a pool may come from (``config`` option), GPT-3 arithmetic files with integer answers, and
their words. The near miss, ordering and prompt rule are the same for each."""
OFFSET = 20
"""How far the near miss is from the right sum. Of the offsets 1, 2, 10 and 20 measured on 300 rows
(docs/planted.md), 20 is the one SmolLM2 tells apart best (AUC 0.70 against 0.64 for 1)."""
N_DIST, N_TEST = 500, 1000


def choices_text(config: str = CONFIG) -> str:
    """What a split's ``choices`` option says of ``config``'s two choices: "sum" for the addition
    files, "answer" for the others (a difference, product or three-operation result)."""
    noun = "sum" if FILES[config].endswith("addition") else "answer"
    return f"(smaller, larger): the right {noun} and the {noun} +/- {OFFSET}"


INFO: dict[str, Any] = {
    "answer_type": "multiple_choice",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "two-digit addition validation (2,000 rows), seeded sample",
    "test_from": "the same pool, disjoint",
    "hub": HUB_ID,
    "files": [f"arithmetic/{CONFIGS[CONFIG]}"],
    "choices": choices_text(),
}


def near_miss(context: str, right: int) -> int:
    """The wrong choice of a row: ``right + OFFSET`` or ``right - OFFSET``, the sign taken from the
    sha256 of the row's raw context (the same for every split seed and every machine)."""
    return right + (OFFSET if hashlib.sha256(context.encode("utf-8")).digest()[0] % 2 else -OFFSET)


def make_example(row: Mapping[str, Any], index: int, config: str = CONFIG) -> Example:
    """One row of ``config``'s file as a two-choice example (choices ordered smaller first)."""
    context = require(row, "context", str)
    right = int(require(row, "completion", str).strip())
    wrong = near_miss(context, right)
    small, large = sorted((right, wrong))
    return Example(
        id=f"arithmetic_choice/{config}/{index}",
        prompt=context,
        choices=(f" {small}", f" {large}"),
        label=int(right == large),
        meta={"config": config, "right": right, "near_miss": wrong},
    )


def load_pool(data_dir: Optional[PathLike] = None, config: str = CONFIG) -> tuple[list[Example], dict[str, Any]]:
    """Every row of ``config``'s file as an example, in file order, and the file's
    provenance record: the pool the task draws from (and a plant's row plan reads)."""
    if config not in FILES:
        raise ValueError(f"arithmetic_choice: config {config!r} is not one of its files; choose from {', '.join(FILES)}")
    relpath = f"arithmetic/{CONFIGS[config]}"
    rows, source = load_rows(what=f"Arithmetic {config} validation", data_dir=resolve_data_dir(data_dir, needs=[relpath]),
                             relpath=relpath, hub_id=HUB_ID, hub_config=f"arithmetic_{config}", hub_split="validation")
    return build_examples(rows, lambda row, i: make_example(row, i, config)), source


THREE_OPS = re.compile(r"^\n\nQ: What is \((\d) ([-+*]) (\d)\) ([-+*]) (\d)\?\n\nA:$")
"""The form of every ``1dc`` row: ``(a op b) op c`` with digits 1-9 and ops among ``+ - *``."""


def fresh_three_ops(pool: Sequence[Example], n: int, seed: int) -> list[Example]:
    """``n`` single-digit three-operation problems of the ``1dc`` file's own form that the file does not
    hold (seeded draw; ids ``arithmetic_choice/1dc-fresh/<k>``): rows no split of the task can ever
    contain, for a plant's truth beyond the file's 2,000. ``pool`` is the ``1dc`` pool
    (:func:`load_pool`); each of its rows is checked to have that form and the answer Python computes,
    so the fresh rows come from the generator the file came from, not from a guess at it."""
    held = set()
    for e in pool:
        m = THREE_OPS.match(e.prompt)
        if m is None or "0" in m.group(1, 3, 5) or _value(m.groups()) != e.meta["right"]:
            raise ValueError(f"{e.id} is not a (a op b) op c row with digits 1-9 and its computed answer")
        held.add(m.groups())
    digits, ops = "123456789", "+-*"
    unseen = [g for g in itertools.product(digits, ops, digits, ops, digits) if g not in held]
    if n > len(unseen):
        raise ValueError(f"only {len(unseen)} problems of that form are outside the file; asked for {n}")
    out = []
    for k, g in enumerate(sorted(random.Random(seed).sample(unseen, n))):
        row = {"context": f"\n\nQ: What is ({g[0]} {g[1]} {g[2]}) {g[3]} {g[4]}?\n\nA:", "completion": f" {_value(g)}"}
        e = make_example(row, k, "1dc")
        out.append(dataclasses.replace(e, id=f"arithmetic_choice/1dc-fresh/{k}", meta={**e.meta, "fresh": True}))
    return out


def _value(g: Sequence[str]) -> int:
    """``(a op b) op c`` for the five parts ``(a, op, b, op, c)``."""
    return _OPS[g[3]](_OPS[g[1]](int(g[0]), int(g[2])), int(g[4]))


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def load_arithmetic_choice(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    reserve: Optional[PathLike] = None,
    avoid_test: Optional[PathLike] = None,
    config: str = CONFIG,
    **kw: Any,
) -> Task:
    """Two-choice addition with D_dist (default 500) and D_test (default 1,000) drawn disjointly,
    seeded, from the 2,000 rows of ``config``'s file (default two-digit addition) less ``reserve``'s;
    D_test also leaves out ``avoid_test``'s rows."""
    reject_options("arithmetic_choice", kw)
    rows, source = load_pool(data_dir, config)
    pool, reserved = reserved_rows(rows, reserve)
    where = f"the {FILES[config]} pool" + (f" less {len(rows) - len(pool)} reserved rows" if reserved else "")
    dist, test, drawn = draw_pool(pool, n_dist, n_test, (N_DIST, N_TEST), seed, avoid_test, "arithmetic_choice", where)
    return Task(
        name="arithmetic_choice",
        answer_type="multiple_choice",
        dist=dist,
        test=test,
        metric="acc",
        options={
            "seed": seed, "config": config, "pool_rows": len(rows), "metrics": ["acc"], "choices": choices_text(config),
            "protocol": f"{FILES[config]} as two choices (smaller, larger; near miss +/- {OFFSET}), "
                        "GPT-3 context, summed log-likelihood, zero-shot",
            "sources": [source], **reserved, **drawn,
        },
    )


SPEC = TaskSpec(load_arithmetic_choice, INFO)
"""What the task registry names (``"cel_lens.tasks.arithmetic_choice:SPEC"``): the loader and its info."""

"""MBPP (Austin et al. 2021): 3-shot Python generation judged by running the problem's asserts.

Protocol (lm-evaluation-harness ``mbpp``): each problem is rendered as ::

    You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:\\n\\n{test_1}\\n{test_2}\\n{test_3}\\n[BEGIN]\\n

and the prompt is three worked problems (task_id 2, 3, 4 of the ``prompt`` split, each rendered
the same way followed by ``{code}\\n[DONE]`` and lm-eval's few-shot delimiter ``"\\n\\n"``) and then
the problem. Generation is greedy, up to :data:`MAX_NEW_TOKENS` (256) new tokens, and stops at
``[DONE]`` (or EOS): the task's ``options["stop"]`` and ``options["max_new_tokens"]``, which the
evaluator reads (:meth:`cel_lens.tasks.Split.stop_strings`). :func:`judge` cuts the completion at ``[DONE]``, takes the
first fenced code block if there is one, and runs it with the problem's ``test_setup_code`` and
``test_list`` in :mod:`cel_lens.sandbox` (metric ``pass@1``; needs the sandbox's opt-in to run code).

Splits (paper, Table 3; ``full`` config, by task_id): D_dist = the ``train`` problems (601-974)
but those worded like a test problem, D_test = the 500 ``test`` problems (11-510). Three train
problems repeat a test problem's text with other tests (602 = 217, 704 = 248, 872 = 216): they are
left out of D_dist (371 problems) and listed in ``Task.options["deduplication"]``. Smaller sizes
are seeded samples.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from cel_lens.tasks.base import Example, Task, dedup_record, drop_same_text
from cel_lens.tasks.io import (
    PathLike,
    check_size,
    check_unique_ids,
    load_rows,
    reject_options,
    resolve_data_dir,
    seeded_sample,
)

__all__ = [
    "HUB_ID",
    "INFO",
    "SPLIT_TASK_IDS",
    "FEWSHOT_TASK_IDS",
    "STOP",
    "MAX_NEW_TOKENS",
    "format_problem",
    "fewshot_prefix",
    "extract_code",
    "judge",
    "load_mbpp",
]

HUB_ID = "google-research-datasets/mbpp"
RELPATH = "mbpp/mbpp.jsonl"

# the ``full`` config's splits, by task_id (inclusive ranges)
SPLIT_TASK_IDS: dict[str, tuple[int, int]] = {
    "prompt": (1, 10),
    "test": (11, 510),
    "validation": (511, 600),
    "train": (601, 974),
}
FEWSHOT_TASK_IDS = (2, 3, 4)
STOP = ("[DONE]",)
MAX_NEW_TOKENS = 256
FEWSHOT_DELIMITER = "\n\n"  # lm-eval's default between shots and before the problem

INFO: dict[str, Any] = {
    "kind": "generation",
    "metric": "pass@1",
    "n_dist": 371,
    "n_test": 500,
    "dist_from": "train (task_id 601-974) minus 3 worded like a test problem",
    "test_from": "test (task_id 11-510)",
    "hub": f"{HUB_ID} (full)",
    "files": [RELPATH],
}


def format_problem(text: str, test_list: Any) -> str:
    """lm-eval's ``doc_to_text`` for one MBPP problem: task text, its tests, then ``[BEGIN]``."""
    tests = "\n".join(test_list)
    return (
        f"You are an expert Python programmer, and here is your task: {text} "
        f"Your code should pass these tests:\n\n{tests}\n[BEGIN]\n"
    )


def fewshot_prefix(shots: Any) -> str:
    """The three worked problems that precede every prompt (lm-eval ``first_n`` sampler)."""
    return "".join(
        format_problem(s["text"], s["test_list"]) + s["code"] + "\n[DONE]" + FEWSHOT_DELIMITER for s in shots
    )


_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The program in a completion: text before the first ``[DONE]``; if that holds a fenced
    block (```` ```python ... ``` ````, as chat models write), the first block's contents."""
    code = completion
    for stop in STOP:
        code = code.split(stop, 1)[0]
    match = _FENCE.search(code)
    return match.group(1) if match else code


def judge(example: Example, completion: str) -> bool:
    """pass@1 for one completion: run the extracted code with the problem's asserts in the sandbox.

    ``test_setup_code`` runs before the code, the ``test_list`` asserts after it (MBPP's
    ``challenge_test_list`` is not used, as in lm-eval). Requires
    ``CEL_LENS_ALLOW_CODE_EXECUTION=1`` (enforced by the sandbox).
    """
    from cel_lens import sandbox

    meta: Mapping[str, Any] = example.meta
    program = sandbox.check_program(extract_code(completion), meta.get("test_setup_code", ""), list(meta["test_list"]))
    return bool(sandbox.run(program).passed)


def _split_of(task_id: int) -> Optional[str]:
    for name, (lo, hi) in SPLIT_TASK_IDS.items():
        if lo <= task_id <= hi:
            return name
    return None


def _example(row: Mapping[str, Any], prefix: str) -> Example:
    return Example(
        id=f"mbpp/{row['task_id']}",
        prompt=prefix + format_problem(row["text"], row["test_list"]),
        meta={
            "task_id": int(row["task_id"]),
            "text": row["text"],
            "test_list": tuple(row["test_list"]),
            "test_setup_code": row.get("test_setup_code") or "",
            "challenge_test_list": tuple(row.get("challenge_test_list") or ()),
            "reference_code": row["code"],
        },
    )


def _rows_by_split(data_dir: Optional[PathLike]) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    root = resolve_data_dir(data_dir)
    if root is not None:
        rows, record = load_rows(
            what="MBPP (full)", data_dir=root, relpath=RELPATH, hub_id=HUB_ID, hub_config="full", hub_split="train"
        )
        by_split: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLIT_TASK_IDS}
        for row in rows:
            name = _split_of(int(row["task_id"]))
            if name is not None:
                by_split[name].append(row)
        return by_split, [record]
    by_split, records = {}, []
    for name in ("prompt", "train", "test"):
        rows, record = load_rows(
            what=f"MBPP {name}", data_dir=None, relpath=RELPATH, hub_id=HUB_ID, hub_config="full", hub_split=name
        )
        by_split[name] = rows
        records.append(record)
    return by_split, records


def load_mbpp(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    **kw: Any,
) -> Task:
    """MBPP with D_dist from ``train`` (default all 371 not worded like a test problem) and D_test
    from ``test`` (default all 500), 3-shot prompts, judged by :func:`judge`."""
    reject_options("mbpp", kw)
    by_split, sources = _rows_by_split(data_dir)
    shots_by_id = {int(r["task_id"]): r for r in by_split.get("prompt", [])}
    missing = [t for t in FEWSHOT_TASK_IDS if t not in shots_by_id]
    if missing:
        raise ValueError(f"MBPP few-shot problems (task_id {missing}) are missing from the prompt split")
    prefix = fewshot_prefix([shots_by_id[t] for t in FEWSHOT_TASK_IDS])
    test_pool = [_example(r, prefix) for r in sorted(by_split["test"], key=lambda r: int(r["task_id"]))]
    train, same_text = drop_same_text(
        [_example(r, prefix) for r in sorted(by_split["train"], key=lambda r: int(r["task_id"]))], test_pool
    )
    n_t = check_size(n_test, len(test_pool), len(test_pool), "MBPP D_test", "the MBPP test split (task_id 11-510)")
    note = f" after leaving out {len(same_text)} worded like a test problem" if same_text else ""
    n_d = check_size(n_dist, len(train), len(train), "MBPP D_dist", "the MBPP train split (task_id 601-974)", note)
    test = seeded_sample(test_pool, n_t, seed, "mbpp/test")
    dist = seeded_sample(train, n_d, seed, "mbpp/dist")
    check_unique_ids([*dist, *test], "mbpp")
    return Task(
        name="mbpp",
        kind="generation",
        dist=dist,
        test=test,
        metric="pass@1",
        judge=judge,
        options={
            "seed": seed,
            "n_dist": n_d,
            "n_test": n_t,
            "chat_template": bool(chat_template),
            "metrics": ["pass@1"],
            "num_fewshot": len(FEWSHOT_TASK_IDS),
            "fewshot_task_ids": list(FEWSHOT_TASK_IDS),
            "stop": list(STOP),
            "max_new_tokens": MAX_NEW_TOKENS,
            "protocol": "lm-evaluation-harness mbpp: 3-shot (task_id 2-4), greedy until [DONE], "
            "pass@1 with the test_list asserts",
            "sources": sources,
            **({"deduplication": dedup_record(same_text)} if same_text else {}),
        },
    )

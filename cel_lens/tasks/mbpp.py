"""MBPP (Austin et al. 2021): 3-shot Python generation judged by running the problem's asserts.

Protocol (lm-evaluation-harness ``mbpp``): each problem is rendered as ::

    You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:\\n\\n{test_1}\\n{test_2}\\n{test_3}\\n[BEGIN]\\n

and the prompt is three worked problems (task_id 2, 3, 4 of the ``prompt`` split, each rendered
the same way followed by ``{code}\\n[DONE]`` and lm-eval's few-shot delimiter ``"\\n\\n"``) and then
the problem. Generation is greedy, up to :data:`MAX_NEW_TOKENS` (256) new tokens, and stops at
``[DONE]`` (or EOS): the task's ``options["stop"]`` and ``options["max_new_tokens"]``, which the
evaluator reads (:meth:`cel_lens.tasks.Split.stop_strings`). The judge (metric ``pass@1``; it runs
code in :mod:`cel_lens.sandbox`, which needs its opt-in) is chosen with
``load_task("mbpp", judge=...)``: ``"lm-eval"`` (default, :func:`judge`): the completion up to
``[DONE]`` is the program, then the ``test_list`` asserts, as lm-eval does; ``"fenced"``
(:func:`judge_fenced`, for chat-template runs): the first fenced code block if there is one, then
``test_setup_code``, then the asserts.

Splits (paper, Table 3; ``full`` config, by task_id): D_dist = the ``train`` problems (601-974)
but those worded like a test problem, D_test = the 500 ``test`` problems (11-510). Three train
problems repeat a test problem's text with other tests (602 = 217, 704 = 248, 872 = 216), and ten
more are near-paraphrases of one (token Jaccard >= 0.9, :mod:`cel_lens.tasks.paraphrase`; 658 and
362 differ by one word): all are left out of D_dist (361 problems) and listed in
``Task.options["deduplication"]`` (the near-paraphrases under ``"near_paraphrases"``, with their
similarity). Smaller sizes are seeded samples.
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Any, Callable, Mapping, Optional

from cel_lens.sandbox.judge import split_tests
from cel_lens.tasks.base import Example, Task, TaskSpec, dedup_record, drop_same_text
from cel_lens.tasks.paraphrase import NEAR_PARAPHRASE_JACCARD, drop_near_paraphrases, paraphrase_record
from cel_lens.tasks.io import (
    PathLike,
    RowError,
    build_examples,
    require,
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
    "SPEC",
    "SPLIT_TASK_IDS",
    "FEWSHOT_TASK_IDS",
    "STOP",
    "MAX_NEW_TOKENS",
    "format_problem",
    "fewshot_prefix",
    "JUDGES",
    "extract_code",
    "judge",
    "judge_fenced",
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
    "answer_type": "generation",
    "metric": "pass@1",
    "n_dist": 361,
    "n_test": 500,
    "dist_from": "train (task_id 601-974) minus 3 worded like a test problem and 10 near-paraphrases of one",
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


def _until_stop(completion: str) -> str:
    """The completion up to the first stop string (what ``generate_until`` returns in lm-eval)."""
    for stop in STOP:
        completion = completion.split(stop, 1)[0]
    return completion


def extract_code(completion: str) -> str:
    """The program in a completion for the ``fenced`` judge: text before the first ``[DONE]``; if
    that holds a fenced block (```` ```python ... ``` ````, as chat models write), the first
    block's contents."""
    code = _until_stop(completion)
    match = _FENCE.search(code)
    return match.group(1) if match else code


def _entry_points(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """Built-in names the reference solution defines at its top level (task 126 defines ``sum``):
    in the tests they mean the program's function, not the built-in."""
    return _defined_builtins(meta.get("reference_code") or "")


def _defined_builtins(code: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ()
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return tuple(sorted(n for n in defined if hasattr(builtins, n)))


def _passes(example: Example, program: str, setup: str) -> bool:
    from cel_lens import sandbox

    meta: Mapping[str, Any] = example.meta
    # main=False: no ``if __name__ == "__main__":`` block runs, as in lm-eval's exec(program, {})
    outcome = sandbox.run(program, tests=list(meta["test_list"]), setup=setup, entry_points=_entry_points(meta),
                          main=False)
    return bool(outcome.passed)


def judge(example: Example, completion: str) -> bool:
    """pass@1 as lm-evaluation-harness judges MBPP (the default judge, ``judge="lm-eval"``).

    lm-eval runs ``completion + "\\n" + "\\n".join(test_list)`` (code_eval, ``exec(program, {})``);
    here the program is the completion up to ``[DONE]`` (no fence extraction, no
    ``test_setup_code``), parsed on its own and run, as there, without ``__name__ == "__main__"``
    (a ``unittest.main()`` block does not run), then the ``test_list`` asserts are judged by the
    sandbox's supervisor. The one
    difference: a completion that parses only together with the asserts (it ends inside a block,
    a string or a line continuation, which would swallow them) fails here. MBPP's
    ``challenge_test_list`` is not used, as in lm-eval. Requires ``CEL_LENS_ALLOW_CODE_EXECUTION=1``.
    """
    return _passes(example, _until_stop(completion), setup="")


def judge_fenced(example: Example, completion: str) -> bool:
    """pass@1 for chat-template runs (``judge="fenced"``): the first fenced code block of the
    completion (:func:`extract_code`), then the problem's ``test_setup_code`` *after* the program
    and in its namespace (tasks 367 and 927 build trees of the solution's ``Node`` class), then the
    ``test_list`` asserts, judged by the sandbox's supervisor."""
    return _passes(example, extract_code(completion), setup=example.meta.get("test_setup_code") or "")


JUDGES: dict[str, Callable[[Example, str], bool]] = {"lm-eval": judge, "fenced": judge_fenced}
"""The judges ``load_task("mbpp", judge=NAME)`` accepts."""


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


def _checked_row(row: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    """An MBPP row whose fields have the types the prompt and the judge need."""
    require(row, "task_id", int)
    require(row, "text", str)
    require(row, "code", str)
    tests = require(row, "test_list", list)
    if not all(isinstance(t, str) for t in tests):
        raise RowError(f"field 'test_list' must be a list of strings, got {tests!r:.80}")
    if not tests:
        raise RowError("field 'test_list' is empty: every completion would pass")
    try:  # judged at load: each test one assert that parses and that the sandbox can judge
        split_tests(tests, _defined_builtins(row["code"]))
    except ValueError as err:
        raise RowError(f"field 'test_list': {err}") from None
    require(row, "test_setup_code", str, optional=True)
    require(row, "challenge_test_list", list, optional=True)
    return row


def _rows_by_split(data_dir: Optional[PathLike]) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    root = resolve_data_dir(data_dir, needs=(RELPATH,))
    if root is not None:
        rows, record = load_rows(
            what="MBPP (full)", data_dir=root, relpath=RELPATH, hub_id=HUB_ID, hub_config="full", hub_split="train"
        )
        rows = build_examples(rows, _checked_row)
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
        by_split[name] = build_examples(rows, _checked_row)
        records.append(record)
    return by_split, records


def load_mbpp(
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[PathLike] = None,
    chat_template: bool = False,
    judge: str = "lm-eval",
    max_new_tokens: int = MAX_NEW_TOKENS,
    **kw: Any,
) -> Task:
    """MBPP with D_dist from ``train`` (default all 361 not worded like, or nearly like, a test problem) and D_test
    from ``test`` (default all 500), 3-shot prompts, judged by the judge named ``judge`` (see
    :data:`JUDGES`), generating up to ``max_new_tokens`` tokens (default 256, lm-eval's; a run's
    manifest records it)."""
    reject_options("mbpp", kw)
    if judge not in JUDGES:
        raise ValueError(f"mbpp: unknown judge {judge!r}; choose one of {', '.join(map(repr, JUDGES))}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"mbpp: max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
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
    train, near = drop_near_paraphrases(train, test_pool, NEAR_PARAPHRASE_JACCARD)
    n_t = check_size(n_test, len(test_pool), len(test_pool), "MBPP D_test", "the MBPP test split (task_id 11-510)")
    note = f" after leaving out {len(same_text)} worded like a test problem" if same_text else ""
    if near:
        note += f"{' and' if same_text else ' after leaving out'} {len(near)} near-paraphrases of one"
    n_d = check_size(n_dist, len(train), len(train), "MBPP D_dist", "the MBPP train split (task_id 601-974)", note)
    test = seeded_sample(test_pool, n_t, seed, "mbpp/test")
    dist = seeded_sample(train, n_d, seed, "mbpp/dist")
    check_unique_ids([*dist, *test], "mbpp")
    return Task(
        name="mbpp",
        answer_type="generation",
        dist=dist,
        test=test,
        metric="pass@1",
        judge=JUDGES[judge],
        options={
            "judge": judge,
            "seed": seed,
            "n_dist": n_d,
            "n_test": n_t,
            "chat_template": bool(chat_template),
            "metrics": ["pass@1"],
            "num_fewshot": len(FEWSHOT_TASK_IDS),
            "fewshot_task_ids": list(FEWSHOT_TASK_IDS),
            "stop": list(STOP),
            "max_new_tokens": max_new_tokens,
            "protocol": "lm-evaluation-harness mbpp: 3-shot (task_id 2-4), greedy until [DONE], "
            "pass@1 with the test_list asserts",
            "sources": sources,
            **({"deduplication": {**dedup_record(same_text), **(
                {"near_paraphrases": paraphrase_record(near, NEAR_PARAPHRASE_JACCARD)} if near else {})}}
               if same_text or near else {}),
        },
    )


SPEC = TaskSpec(load_mbpp, INFO)
"""What the task registry names (``"cel_lens.tasks.mbpp:SPEC"``): the loader and its info."""

"""A search's config reaches the evaluator entering no module twice (issue 58, "Done when").

The call stack at the first entry into :func:`cel_lens.evaluation.evaluator.evaluate` during a
``cl.search`` is read with :func:`sys.setprofile`; a module that appears on it, is left for
another and is entered again is a return the path should not take (measured before the change
that moved :func:`~cel_lens.selection.memo.call_choice_oracle` beside the memo oracle: one,
``oracle.py -> selection/memo.py -> oracle.py``; after it: none)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import cel_lens as cl
import cel_lens.evaluation.evaluator as evaluator
from cel_lens.testing import planted_task

PACKAGE = Path(cl.__file__).resolve().parent


def reentries(modules: list[str]) -> dict[str, int]:
    """Each module entered again after the stack had left it for another, and how many times."""
    runs = [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]
    return {m: n - 1 for m, n in Counter(runs).items() if n > 1}


def _first_evaluate_stack(run) -> tuple[list[str], Optional[dict]]:
    """The package modules on the stack (outermost first) at the first call of ``evaluate`` while
    ``run()`` runs, and that call's arguments."""
    target = evaluator.evaluate.__code__
    seen: dict = {}

    def profile(frame, event, arg) -> None:  # noqa: ANN001 - sys.setprofile's signature
        if event != "call" or frame.f_code is not target or seen:
            return
        seen["args"] = dict(frame.f_locals)
        stack = []
        while frame is not None:
            path = Path(frame.f_code.co_filename).resolve()
            if PACKAGE in path.parents:
                stack.append(path.relative_to(PACKAGE).as_posix())
            frame = frame.f_back
        seen["stack"] = stack[::-1]

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(old)
    return seen.get("stack", []), seen.get("args")


def test_reentries_counts_a_module_entered_again_and_not_one_that_stays():
    assert reentries(["a.py", "a.py", "b.py", "c.py"]) == {}
    assert reentries(["a.py", "b.py", "a.py", "b.py", "c.py"]) == {"a.py": 1, "b.py": 1}


def test_a_search_config_reaches_the_evaluator_entering_no_module_twice(tiny_model, tmp_path):
    task = planted_task(tiny_model, heads="L1H2")
    stack, args = _first_evaluate_stack(lambda: cl.search(
        tiny_model, task, k=1, pool_size=2, n_null=2, n_boot=50, precision="float32", progress=False,
        out=tmp_path / "run"))
    assert stack[0] == "pipeline.py" and stack[-1] == "evaluation/evaluator.py", stack
    assert reentries(stack) == {}, stack
    assert args is not None and args["context"].precision == "float32"  # the search's setting, passed down

"""MBPP rows are judged at load: an empty ``test_list``, a test that is not one assert, does not
parse, or cannot be judged is refused naming the file and line, before any run directory exists;
the default judge runs no ``if __name__ == "__main__":`` block, as lm-eval's ``exec(program, {})``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cel_lens.cli import main
from cel_lens.tasks import load_task, mbpp
from cel_lens.tasks.rows import RowError
from cel_lens.tasks.base import Example

TASK_ID = 601  # a train problem (D_dist)


def _mbpp_dir(tmp_path: Path, data_dir: Path, tests: object) -> tuple[Path, Path, int]:
    """A copy of MBPP whose problem ``TASK_ID`` has ``tests`` as its ``test_list``; its line number."""
    root = tmp_path / "data"
    (root / "mbpp").mkdir(parents=True)
    lines = (data_dir / "mbpp" / "mbpp.jsonl").read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if json.loads(text)["task_id"] == TASK_ID)
    row = json.loads(lines[line])
    row["test_list"] = tests
    lines[line] = json.dumps(row)
    path = root / "mbpp" / "mbpp.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return root, path, line + 1


BAD_TESTS = [
    ([], "field 'test_list' is empty: every completion would pass"),
    (["print(1)"], "field 'test_list': a test must be one assert statement, got 'print(1)'"),
    (["assert f(1) =="], "field 'test_list': a test does not parse: 'assert f(1) ==' (invalid syntax)"),
    (["assert all(f(x) for x in range(3))"], "field 'test_list': cannot judge the test"),
]


@pytest.mark.parametrize("tests, problem", BAD_TESTS, ids=["empty", "not-an-assert", "does-not-parse", "cannot-judge"])
def test_bad_test_list_is_refused_at_load(tmp_path: Path, data_dir: Path, tests: object, problem: str) -> None:
    root, path, line = _mbpp_dir(tmp_path, data_dir, tests)
    with pytest.raises(RowError) as err:
        load_task("mbpp", data_dir=root)
    assert str(err.value).startswith(f"{path}:{line}: {problem}")


def test_bad_row_writes_no_run_directory_so_a_corrected_rerun_is_not_refused(capsys, tmp_path: Path, data_dir: Path) -> None:
    root, path, line = _mbpp_dir(tmp_path, data_dir, ["print(1)"])
    out = tmp_path / "run"
    args = ["search", "--model", "organism", "--task", "mbpp", "--data-dir", str(root), "--n-dist", "2", "--n-test", "2",
            "--k", "1", "--pool", "2", "--n-null", "2", "--no-progress", "--allow-code-execution", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cel-lens: error: {path}:{line}: field 'test_list'") and err.count("\n") == 1
    assert not out.exists()  # nothing written: a corrected rerun into --out starts clean
    _mbpp_dir(tmp_path / "fixed", data_dir, json.loads((data_dir / "mbpp" / "mbpp.jsonl").read_text().splitlines()[0])["test_list"])
    assert load_task("mbpp", data_dir=tmp_path / "fixed" / "data", n_dist=2, n_test=2).options["n_dist"] == 2


def _example(tests: tuple[str, ...]) -> Example:
    return Example(id="mbpp/x", prompt="p", meta={"test_list": tests, "test_setup_code": "", "reference_code": ""})


MAIN_BLOCKS = [
    "if __name__ == '__main__':\n    import unittest\n    unittest.main()\n",
    "if __name__ == '__main__':\n    print(add(0, 0))\n    raise SystemExit(3)\n",
    "if __name__ == '__main__':\n    x = input()\n",
]


@pytest.mark.parametrize("block", MAIN_BLOCKS, ids=["unittest", "print-and-exit", "input"])
def test_default_judge_runs_no_main_block_as_lm_eval(monkeypatch: pytest.MonkeyPatch, block: str) -> None:
    """lm-eval's code_eval runs ``exec(program, {})``: ``__name__`` is ``'builtins'`` there, so
    the reference plus a ``unittest.main()`` block passes; so it does here."""
    monkeypatch.setenv("CEL_LENS_ALLOW_CODE_EXECUTION", "1")
    ex = _example(("assert add(2, 3) == 5",))
    reference = "def add(a, b):\n    return a + b\n"
    namespace: dict = {}
    exec(reference + block + "\n" + "\n".join(ex.meta["test_list"]), namespace)  # lm-eval's way; it passes
    assert mbpp.judge(ex, reference + block + "[DONE]")
    assert mbpp.judge_fenced(ex, "```python\n" + reference + block + "```")
    assert not mbpp.judge(ex, "def add(a, b):\n    return a - b\n" + block)
    assert mbpp.judge(_example(("assert where() == 'builtins'",)), "def where():\n    return __name__\n")

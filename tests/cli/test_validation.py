"""Bad input to ``cel-lens``: each is one line naming the option (by its flag) or the file and line,
exit code 2, nothing on stdout and no run directory written; and under ``--json`` stdout carries
the JSON alone, whatever prints along the way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cel_lens.cli import main

SMALL = ["--n-dist", "6", "--n-test", "6", "--k", "1", "--pool", "2", "--n-null", "2", "--no-progress"]
DTYPES = "bf16, bfloat16, double, float, float16, float32, float64, fp16, fp32, fp64, half"

# (extra arguments, the whole error line after "cel-lens: error: ")
OPTION_CASES = [
    (["--n-dist", "0"], "--n-dist must be >= 1, got 0 (the split would be empty)"),
    (["--n-test", "0"], "--n-test must be >= 1, got 0 (the split would be empty)"),
    (["--store-dtype", "float17"], f"--store-dtype: unknown dtype 'float17': expected one of {DTYPES}"),
    (["--dtype", "float17"], f"--dtype: unknown dtype 'float17': expected one of {DTYPES}"),
    (["--n-masks", "0", "--scorer", "compressed"], "--n-masks must be >= 1, got 0"),
    (["--n-null", "0"], "--n-null must be >= 1, got 0 (the random-subset null needs at least one head set)"),
    (["--k", "0"], "--k must be >= 1, got 0"),
    (["--pool", "0"], "--pool must be >= 1, got 0"),
    (["--k", "3", "--pool", "2"], "--k must be at most the pool size (2): every subset is drawn from the pool, so k=3 could never be reached"),
    (["--max-new-tokens", "8"], "--max-new-tokens applies to generation tasks (mbpp); organism_a is exact_match"),
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--beam-width", "0", "--strategy", "beam"], "--beam-width must be >= 1, got 0"),
    (["--store-budget-mb", "-1"], "--store-budget-mb must be a number of megabytes >= 0, got -1.0"),
    (["--workers", "0"], "--workers must be >= 1, got 0"),
    (["--gpus-per-worker", "-1"], "--gpus-per-worker must be a number >= 0, got -1.0"),
]


def _run(capsys, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code: int, out: str, err: str, message: str) -> None:
    assert code == 2
    assert out == ""
    assert err == f"cel-lens: error: {message}\n"


@pytest.mark.parametrize("extra, message", OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_bad_option_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)  # the default run directory would be ./runs/...
    args = ["search", "--model", "organism", "--task", "organism_a", *SMALL, "--out", str(tmp_path / "run")]
    _assert_one_line_error(*_run(capsys, args + extra), message)
    assert list(tmp_path.iterdir()) == []


def test_dtype_is_checked_for_evaluate_too(capsys, tmp_path):
    args = ["evaluate", "--model", "organism", "--task", "organism_a", "--n-dist", "4", "--n-test", "4", "--dtype", "float17"]
    _assert_one_line_error(*_run(capsys, args), f"--dtype: unknown dtype 'float17': expected one of {DTYPES}")
    args = ["evaluate", "--model", "organism", "--task", "organism_a", "--n-test", "0"]
    _assert_one_line_error(*_run(capsys, args), "--n-test must be >= 1, got 0 (the split would be empty)")


def _arithmetic_dir(tmp_path: Path, data_dir: Path, line: int, text: str) -> tuple[Path, Path]:
    """A copy of the Arithmetic files whose 2da file has ``text`` as line ``line``."""
    root = tmp_path / "data"
    shutil.copytree(data_dir / "arithmetic", root / "arithmetic")
    path = root / "arithmetic" / "two_digit_addition.jsonl"
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.unlink()  # a copy, not the linked original
    path.write_text("\n".join(lines) + "\n")
    return root, path


ROW_CASES = [
    ('{"context": "Q: What is 1 plus 1?"}', "missing field 'completion'"),
    ('{"context": 17, "completion": " 3"}', "field 'context' must be a string, got an integer 17"),
    ('{"context": "Q: 1 plus 1?", "completion": [2]}', "field 'completion' must be a string, got a list [2]"),
    ("[1, 2]", "the row is a list, not a JSON object"),
    ('"just text"', "the row is a string, not a JSON object"),
    ('{"context": "Q:", "completion"', "not valid JSON (Expecting ':' delimiter)"),
]


@pytest.mark.parametrize("row, problem", ROW_CASES, ids=[c[1].split(" (")[0] for c in ROW_CASES])
def test_bad_task_row_names_file_and_line(capsys, tmp_path, data_dir, row, problem):
    root, path = _arithmetic_dir(tmp_path, data_dir, 3, row)
    out = tmp_path / "run"
    args = ["search", "--model", "organism", "--task", "arithmetic", "--data-dir", str(root), *SMALL, "--out", str(out)]
    _assert_one_line_error(*_run(capsys, args), f"{path}:3: {problem}")
    assert not out.exists()


def test_bad_boolq_row_names_file_and_line(capsys, tmp_path, data_dir):
    root = tmp_path / "data"
    shutil.copytree(data_dir / "boolq", root / "boolq", symlinks=False)
    dev = root / "boolq" / "dev.jsonl"
    lines = dev.read_text().splitlines()
    row = json.loads(lines[4])
    row["answer"] = "yes"
    lines[4] = json.dumps(row)
    dev.write_text("\n".join(lines) + "\n")
    args = ["search", "--model", "organism", "--task", "boolq", "--data-dir", str(root), *SMALL, "--out", str(tmp_path / "run")]
    _assert_one_line_error(*_run(capsys, args), f"{dev}:5: field 'answer' must be a boolean, got a string 'yes'")


def test_json_stdout_is_json_only(capfd, tmp_path):
    """Loading the organism in float64 prints "Changing model dtype to torch.float64" (TransformerLens,
    on stdout): under ``--json`` it goes to stderr and stdout parses."""
    args = ["search", "--model", "organism", "--task", "organism_a", *SMALL, "--dtype", "float64",
            "--out", str(tmp_path / "run"), "--json"]
    assert main(args) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["n_dist"] == 6
    assert "Changing model dtype to torch.float64" in err  # what would have broken the JSON

"""``--task-option KEY=VALUE``: loader options from the command line, each bad one a single line."""

from __future__ import annotations

import argparse

import pytest

from cel_lens.cli import main
from cel_lens.cli.common import parse_task_options, task_options_from_args
from cel_lens.config import OptionError

SMALL = ["--n-dist", "4", "--n-test", "4", "--k", "1", "--pool", "2", "--n-null", "2", "--no-progress"]


def test_values_are_json_when_they_parse():
    assert parse_task_options(["dist_from=validation", "n=3", "flag=true", "x=[1, 2]", "s="]) == {
        "dist_from": "validation", "n": 3, "flag": True, "x": [1, 2], "s": ""}
    with pytest.raises(OptionError, match="wants KEY=VALUE"):
        parse_task_options(["novalue"])
    with pytest.raises(OptionError, match="given twice"):
        parse_task_options(["a=1", "a=2"])


def test_flags_keep_their_own_options():
    args = argparse.Namespace(task="boolq", chat_template=True, max_new_tokens=None, task_option=["chat_template=false"])
    with pytest.raises(OptionError, match="use its own flag"):
        task_options_from_args(args)
    args = argparse.Namespace(task="boolq", chat_template=False, max_new_tokens=None, task_option=["dist_from=validation"])
    assert task_options_from_args(args) == {"dist_from": "validation"}


@pytest.mark.parametrize("extra, message", [
    (["--task", "organism_a", "--task-option", "dist_from=validation"], "organism_a: unknown option(s) dist_from"),
    (["--task", "boolq", "--task-option", "dist_from=test"], "boolq: dist_from must be one of train, validation, got 'test'"),
    (["--task", "boolq", "--task-option", "oops"], "--task-option: wants KEY=VALUE with KEY a name, got 'oops'"),
])
def test_bad_task_option_is_one_line(capsys, tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "boolq").mkdir(parents=True)
    (tmp_path / "data" / "boolq" / "dev.jsonl").write_text(
        "".join(f'{{"question": "q{i}", "title": "t", "answer": true, "passage": "p{i}"}}\n' for i in range(10)))
    code = main(["search", "--model", "organism", *SMALL, "--data-dir", str(tmp_path / "data"),
                 "--out", str(tmp_path / "run"), *extra])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err == f"cel-lens: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_missing_boolq_train_names_the_option(capsys, tmp_path):
    (tmp_path / "boolq").mkdir()
    (tmp_path / "boolq" / "dev.jsonl").write_text(
        "".join(f'{{"question": "q{i}", "title": "t", "answer": true, "passage": "p{i}"}}\n' for i in range(10)))
    code = main(["search", "--model", "organism", "--task", "boolq", *SMALL, "--data-dir", str(tmp_path),
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--task-option dist_from=validation" in err


@pytest.mark.parametrize("option, flag", [("seed=1", "--seed"), ("n_dist=3", "--n-dist"), ("n_test=3", "--n-test"),
                                          ("data_dir=/x", "--data-dir"), ("split_seed=2", "--split-seed")])
@pytest.mark.parametrize("command", ["evaluate", "search"])
def test_reserved_task_option_is_one_line_naming_the_flag(capsys, tmp_path, command, option, flag):
    """A loader argument that has its own flag (seed, sizes, data directory) is refused with one line
    naming the flag, before anything loads (it reached the loader twice: a TypeError traceback)."""
    extra = ["--out", str(tmp_path / "run")] if command == "search" else []
    code = main([command, "--model", "organism", "--task", "organism_a", "--n-test", "20", *extra,
                 "--task-option", option])
    captured = capsys.readouterr()
    key = option.split("=")[0]
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"cel-lens: error: --task-option: {key}: ")
    assert flag in captured.err and "Traceback" not in captured.err
    assert not (tmp_path / "run").exists()

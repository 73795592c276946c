"""``demo``, ``export``, ``verify`` and ``report`` take ``--seed``, ``--device``, ``--dtype``, ``--batch-size`` and
``--no-progress`` generated from the same SearchConfig / ExecutionSettings fields as ``search``: the
same flag, dest, default and rule, and a bad value is the same one-line error."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from cel_lens.cli import build_parser, main
from cel_lens.cli.options import flag_of
from cel_lens.config import ExecutionSettings, SearchConfig

SHARED = {
    "demo": {"seed": SearchConfig, "progress": ExecutionSettings},
    "export": {"device": ExecutionSettings, "dtype": ExecutionSettings, "batch_size": ExecutionSettings,
               "progress": ExecutionSettings},
    "report": {"device": ExecutionSettings},
    "verify": {"device": ExecutionSettings, "dtype": ExecutionSettings, "batch_size": ExecutionSettings,
               "progress": ExecutionSettings},
}


def _actions(name: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return {a.dest: a for a in sub._actions}


@pytest.mark.parametrize("command", sorted(SHARED))
def test_shared_flags_come_from_the_fields(command):
    actions, search = _actions(command), _actions("search")
    for name, cls in SHARED[command].items():
        f = next(f for f in fields(cls) if f.name == name)
        action = actions[name]
        assert action.option_strings == [flag_of(f)] == search[name].option_strings
        assert action.default == f.default == search[name].default
        assert action.help.startswith(f.metadata["help"])
    assert not any(a.dest == "no_progress" for a in actions.values())  # no hand-written twin left


def test_demo_flags_parse_to_the_field_values():
    actions = _actions("demo")
    parser = argparse.ArgumentParser()
    parser._add_action(actions["seed"]), parser._add_action(actions["progress"])
    assert vars(parser.parse_args(["--seed", "3", "--no-progress"])) == {"seed": 3, "progress": False}
    assert vars(parser.parse_args([])) == {"seed": 0, "progress": True}


@pytest.mark.parametrize("argv, message", [
    (["demo", "--seed", "-1", "--no-figures"], "--seed must be >= 0, got -1"),
    (["export", "--heads", "L0H0", "--model", "organism", "--out", "OUT", "--batch-size", "0"],
     "--batch-size must be >= 1, got 0"),
    (["export", "--heads", "L0H0", "--model", "organism", "--out", "OUT", "--dtype", "float17"],
     "--dtype: unknown dtype 'float17'"),
    (["verify", "EXPORT", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
])
def test_a_bad_shared_value_is_the_fields_one_line_error(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"cel-lens: error: {message}")
    assert list(tmp_path.iterdir()) == []  # nothing written

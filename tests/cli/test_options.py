"""Flags generated once from SearchConfig and ExecutionSettings: every field has one flag, with the
same help, default and choices in ``search`` and ``table``; values come back whole and checked."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from cel_lens.selection.plan_quick import QUICK_CUTS
from cel_lens.cli import build_parser
from cel_lens.cli.options import add_fields, config_from_args, flag_of, settings_from_args
from cel_lens.config import ABLATION_KINDS, SCORERS, ExecutionSettings, QUICK, SearchConfig


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _by_dest(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in p._actions}


CUT = {name for cut in QUICK_CUTS for name in cut.changes}
"""The options a ``--quick`` cut may set (left unset by the parser, so a cut never overrides a user's)."""


def test_every_field_has_help_and_one_flag_in_search_and_table():
    search, table = _by_dest(_sub("search")), _by_dest(_sub("table"))
    for cls in (SearchConfig, ExecutionSettings):
        for f in fields(cls):
            assert f.metadata.get("help"), f.name
            t = table[f.name]
            assert t.option_strings == [flag_of(f)]
            assert t.help == f.metadata["help"]
            if f.name in search:
                s = search[f.name]
                assert s.option_strings == t.option_strings and s.choices == t.choices
                if f.name not in QUICK and f.name not in CUT:  # --quick fills these, and says their defaults
                    assert s.help == t.help and s.default == t.default
                else:
                    assert s.default is None and s.help.startswith(t.help) and "(default: " in s.help
    assert {f.name for f in fields(SearchConfig)} <= set(search)
    assert _by_dest(_sub("search"))["ablation"].choices == list(ABLATION_KINDS)  # whatever the table holds
    assert {"zero", "mean", "resample"} <= set(_by_dest(_sub("search"))["ablation"].choices)


def test_values_come_back_whole_and_checked():
    args = _sub("table").parse_args(
        ["--models", "m", "--tasks", "t", "--ablation", "mean", "--posthoc", "--store-budget-mb", "2", "--pool", "5",
         "--no-store", "--no-progress"]
    )
    config, settings = config_from_args(args), settings_from_args(args)
    assert config == SearchConfig(ablation="mean", posthoc=True, pool_size=5)
    assert settings == ExecutionSettings(store_budget=2 * 2**20, use_store=False, progress=False)
    args.store_budget = -1.0
    with pytest.raises(ValueError, match="store_budget must be a number of megabytes >= 0, got -1.0"):
        settings_from_args(args)


def test_a_registered_choice_is_offered(monkeypatch):
    monkeypatch.setitem(SCORERS, "racing_again", "cel_lens.scoring.racing:RacingScorer")
    p = argparse.ArgumentParser()
    add_fields(p, SearchConfig, ["scorer"])
    assert p.parse_args(["--scorer", "racing_again"]).scorer == "racing_again"
    assert p.parse_args(["--scorer", "exact"]).scorer == "exact"

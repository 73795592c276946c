"""The two test tiers (tests/conftest.py): every test is exactly one of ``unit`` and ``integration``,
the rules put what they name in the integration tier, and every file the rules name exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def rules(request: pytest.FixtureRequest) -> ModuleType:
    """tests/conftest.py as pytest loaded it (the plugin that marks the tiers)."""
    for plugin in request.config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", None) or "/").resolve() == TESTS / "conftest.py":
            return plugin
    pytest.fail("tests/conftest.py is not loaded as a plugin")


def test_every_test_of_this_session_has_exactly_one_tier(request: pytest.FixtureRequest, rules) -> None:
    items = request.session.items
    assert items, "no tests in this session"
    wrong = [item.nodeid for item in items
             if sum(1 for tier in rules.TIERS if item.get_closest_marker(tier)) != 1]
    assert wrong == []


@pytest.mark.parametrize(("test", "markers", "fixtures", "tier"), [
    ("test_stats.py::test_sum", set(), {"tiny_model", "tmp_path"}, "unit"),
    ("test_stats.py::test_sum", {"slow"}, set(), "integration"),
    ("backends/test_ray.py::test_x", {"ray"}, set(), "integration"),
    ("model/test_load.py::test_x", set(), {"smollm2_hf", "smollm2_dir"}, "integration"),
    ("sandbox/test_runner.py::test_x[namespaces]", set(), {"mode", "kernel_layers"}, "integration"),
    ("parity/test_lm_eval_parity.py::test_x[added]", set(), set(), "integration"),
    ("test_docs.py::test_x", set(), set(), "integration"),
    ("test_stats.py::test_sum", {"integration"}, set(), "integration"),
    ("test_docs.py::test_x", {"unit"}, set(), "unit"),
])
def test_the_rules(rules, test: str, markers: set[str], fixtures: set[str], tier: str) -> None:
    assert rules.tier_of(test, markers, fixtures) == tier


def test_both_tiers_at_once_is_refused(rules) -> None:
    with pytest.raises(ValueError, match="both unit and integration"):
        rules.tier_of("test_stats.py::test_sum", {"unit", "integration"}, set())


def test_what_the_rules_name_exists(rules) -> None:
    """A renamed module or test must not leave its rule behind (its tests would fall into the unit tier)."""
    for module in rules.INTEGRATION_MODULES:
        assert (TESTS / module).exists(), module
    for test, why in rules.INTEGRATION_TESTS.items():
        path, name = test.split("::", 1)
        assert why and (TESTS / path).is_file(), test
        assert f"def {name.split('[')[0].split('::')[-1]}" in (TESTS / path).read_text(), test


def test_the_whole_suite_collects_into_two_tiers(tmp_path: Path) -> None:
    """Collected as `make test` collects it, no test has no tier or both (a subprocess: ~10-20 s)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", str(TESTS),
         "-m", "(unit and integration) or not (unit or integration)"],
        capture_output=True, text=True, timeout=600, cwd=TESTS.parent, env={**os.environ},
    )
    text = out.stdout + out.stderr
    assert out.returncode == 5 and "no tests collected" in text and "deselected" in text, text[-3000:]

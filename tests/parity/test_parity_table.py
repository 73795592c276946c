"""The parity table is printed on a failure or with ``-s``, not by every passing ``pytest -q``."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest


def _conftest():
    return next(m for name, m in sys.modules.items()
                if (getattr(m, "__file__", "") or "").replace("\\\\", "/").endswith("tests/parity/conftest.py"))


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


@pytest.mark.parametrize("capture, exitstatus, shown", [("fd", 0, False), ("fd", 1, True), ("no", 0, True)])
def test_table_only_on_failure_or_with_s(capture, exitstatus, shown):
    conftest = _conftest()
    row = {"task": "boolq", "bos": "tokenizer", "loader": "bridge", "variant": "plain", "max_dll": 1e-6,
           "decisions": "8/8", "inputs": "8/8"}
    config = SimpleNamespace(stash={conftest.PARITY_ROWS: [row]}, getoption=lambda name: capture)
    reporter = _Reporter()
    conftest.pytest_terminal_summary(reporter, exitstatus, config)
    assert bool(reporter.lines) is shown
    if shown:
        assert "== lm-eval parity" in reporter.lines and any("| boolq |" in line for line in reporter.lines)

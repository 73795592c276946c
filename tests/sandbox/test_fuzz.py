"""The judge under a grammar-based fuzzer: hostile completions whose values are wrong are never
judged "passed" (with a fixed seed and a small time budget here; a longer run is reported in
docs/sandbox.md, from ``python -m benchmarks.sandbox_fuzz``)."""

from __future__ import annotations

import itertools

from cel_lens import sandbox as sb
from cel_lens.sandbox import fuzz
from cel_lens.sandbox.judge import split_tests

BUDGET = 8.0  # seconds per mode: about 20 s for both on a loaded 2-core machine


def test_the_grammar_is_reproducible_and_reaches_every_part() -> None:
    a = list(itertools.islice(fuzz.generate(7), 400))
    b = list(itertools.islice(fuzz.generate(7), 400))
    assert a == b and a != list(itertools.islice(fuzz.generate(8), 400))
    parts = {p for c in a for p in c.parts}
    assert {name for _, name in fuzz.POISONS} <= parts
    assert set(fuzz.ROUTES) <= parts
    assert {"huge", "plain", "generator", "raises-forged-name", "exits-forged-code", "os-exit-0"} <= parts
    assert {p for p in parts if p.startswith("liar-")} == {f"liar-{t}" for t in fuzz.BASES}
    for case in a:  # every program compiles and every test is judgeable (no case is refused)
        compile(case.code, "<case>", "exec")
        split_tests(case.tests)


def test_the_fuzzer_finds_no_forged_pass_and_no_crash(mode: str) -> None:
    report = fuzz.fuzz(seed=20261201, budget=BUDGET)
    print(f"\n{mode}: {report}")
    assert report.cases >= 16
    assert report.passed == [], [(c.parts, c.tests, o) for c, o in report.passed]
    assert report.crashes == []
    assert not report.leaks, report.leaks  # no route out of a run or between runs yielded anything
    assert set(report.statuses) <= {"failed", "error", "timeout"}


def test_the_same_tests_pass_the_honest_value(mode: str) -> None:
    """The cases fail because their values are wrong, not because the tests cannot pass."""
    tests = [t for t in fuzz.TEST_TEMPLATES if "repr" not in t]
    honest = sb.run("def g(x):\n    return 0\ndef f(x):\n    return 2\n", tests=tests, allow=True)
    assert honest.passed, honest
    assert sb.run("def f(x):\n    return 2\n", tests=["assert repr(f(1)) == '2'"], allow=True).passed

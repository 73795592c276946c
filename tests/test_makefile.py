"""``make``'s browser step: it says before it apt-installs Chromium, and ``NO_BROWSER=1`` skips it.
Run with a PATH holding only stand-ins (no browser, a root ``id``, an ``apt-get`` that logs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _make_browser(tmp_path: Path, *args: str) -> tuple[str, list[str]]:
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {log}\necho "apt-get ran" \n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed: the repository's set-up path needs it")
    out = subprocess.run([make, "-s", "-C", str(REPO), "browser", *args], env={"PATH": str(bin_dir)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, (log.read_text().splitlines() if log.exists() else [])


def test_the_browser_install_is_announced_first(tmp_path):
    stdout, calls = _make_browser(tmp_path)
    assert calls == ["apt-get update -qq", "apt-get install -y -qq chromium",
                     "apt-get update -qq", "apt-get install -y -qq chromium chromium-driver"]
    lines = [line for line in stdout.splitlines() if line != "apt-get ran"]
    assert lines[0].startswith("installing Debian's chromium with apt-get") and "NO_BROWSER=1" in lines[0]
    assert lines[1].startswith("installing Debian's chromium-driver with apt-get") and "NO_BROWSER=1" in lines[1]


def test_no_browser_skips_it(tmp_path):
    stdout, calls = _make_browser(tmp_path, "NO_BROWSER=1")
    assert calls == [] and stdout.startswith("note: PNG figures need Chromium")
    assert "the explorer's browser test needs chromedriver" in stdout


def test_install_installs_the_browser():
    """`make install` (and so `make test` and `make demo`) runs the browser step: a fresh machine gets
    Chromium from the README's commands alone."""
    out = subprocess.run([shutil.which("make") or "make", "-n", "-C", str(REPO), "install"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "apt-get install -y -qq chromium" in out.stdout


HIDE_BROWSER = """
import shutil, sys
shutil.which = lambda *args, **kwargs: None  # no chromium, no chromedriver on PATH
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[1]]))
"""


def test_a_missing_browser_fails_its_tests_not_the_collection(tmp_path):
    """Without a browser under `make test`, the browser tests fail with the reason and every other test
    still runs (an error at import would abort the whole collection: 0 tests run)."""
    import os
    import sys

    env = {**os.environ, "CEL_LENS_REQUIRE_BROWSER": "1"}
    target = str(REPO / "tests" / "report" / "test_explorer_browser.py")
    out = subprocess.run([sys.executable, "-c", HIDE_BROWSER, target], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "error during collection" not in text and "Interrupted" not in text
    assert "needs chromium, chromedriver" in text and " passed" not in text


def _pytest_line(target: str) -> list[str]:
    """The pytest command `make -n <target>` prints, split into words."""
    out = subprocess.run([shutil.which("make") or "make", "-n", "-C", str(REPO), target],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if " -m pytest " in line]
    assert len(lines) == 1, out.stdout
    return lines[0].split()


def test_test_fast_runs_the_unit_tier_and_test_runs_everything():
    """`make test-fast` selects the unit tier (tests/conftest.py); `make test` (CI) selects nothing away."""
    fast = _pytest_line("test-fast")
    assert fast[fast.index("-m", fast.index("pytest")) + 1] == "unit"
    full = _pytest_line("test")
    words = full[full.index("pytest"):]
    assert not {"-m", "-k", "--deselect", "--ignore", "-x"} & set(words), words

"""The probe ``make test`` reads, and ``CEL_LENS_REQUIRE_SANDBOX``: with it, a sandbox test that
skips (a kernel layer missing) fails with the skip's reason; without it, it skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cel_lens import sandbox as sb
from cel_lens.sandbox import probe

REPO = Path(__file__).resolve().parents[2]
# a sandbox test run where the machine "has no namespaces" (the layers an empty program got, faked)
NO_NAMESPACES = """
import sys
import cel_lens.sandbox as sb
sb.isolation = lambda allow=None: ("process", "rlimits", "guard")
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--confcutdir", sys.argv[2], "-k", "kernel_objects and namespaces", sys.argv[1]]))
"""


def test_probe_says_what_the_machine_gives(kernel_layers):
    out = subprocess.run([sys.executable, "-m", "cel_lens.sandbox.probe"], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert out.returncode == 0
    complete = all(layer in kernel_layers for layer in probe.REQUIRED_LAYERS)
    assert out.stdout == ("1\n" if complete else "")
    assert complete or "kernel layers missing here" in out.stderr


def test_probe_refuses_a_sandbox_that_does_not_run(monkeypatch):
    def broken(allow=None):
        raise OSError("no fork here")

    monkeypatch.setattr(probe, "isolation", broken)
    assert probe.missing_layers() == ["the sandbox did not run (OSError: no fork here)"]
    monkeypatch.setattr(probe, "isolation", lambda allow=None: ("process", "seccomp", "pidns"))
    assert "netns" in probe.missing_layers() and "seccomp" not in probe.missing_layers()


@pytest.mark.parametrize("required", ["1", ""])
def test_required_sandbox_turns_skips_into_failures(tmp_path, required):
    """The namespaces half of the concurrent-judges test, on a machine without namespaces: skipped,
    or failed with the reason under ``CEL_LENS_REQUIRE_SANDBOX=1``."""
    env = {**os.environ, probe.REQUIRE_ENV: required, sb.ALLOW_ENV: "1"}
    target = str(REPO / "tests" / "sandbox" / "test_ipc.py")
    out = subprocess.run([sys.executable, "-c", NO_NAMESPACES, target, str(REPO / "tests" / "sandbox")], capture_output=True, text=True,
                         timeout=300, env=env, cwd=REPO)
    text = out.stdout + out.stderr
    if required:
        assert out.returncode == 1 and ("1 failed" in text or "1 error" in text), text  # a fixture skips: setup
        assert "CEL_LENS_REQUIRE_SANDBOX=1" in text and "namespaces are not permitted" in text
    else:
        assert out.returncode == 0 and "1 skipped" in text, text


def test_make_test_sets_it_from_the_probe():
    """``make test`` asks the probe (it does not assume the layers), so a machine without them still
    runs the suite, with those tests skipped."""
    import shutil

    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed: the repository's set-up path needs it")
    out = subprocess.run([make, "-n", "-C", str(REPO), "test"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "CEL_LENS_REQUIRE_SANDBOX=$(CEL_LENS_ALLOW_CODE_EXECUTION=1 .venv/bin/python -m cel_lens.sandbox.probe || true)" in out.stdout

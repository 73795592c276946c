"""Fixtures of the sandbox tests: the machine's kernel layers, the two modes every hostile program
runs in, a directory outside the sandbox with canaries, and ``hostile``: run a program and check
what every hostile program must satisfy.

Hostile programs run twice: with the kernel layers (namespaces) where the machine allows them,
and in the weaker guard-only mode (what a locked-down container gets, opted in with
``CEL_LENS_SANDBOX_WEAK=1``). Programs that bypass the guard on purpose (``import posix``) run
only where the kernel layer that stops them applies (fixture ``namespaces``).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import pytest

from cel_lens import sandbox as sb
from cel_lens.sandbox import runner
from cel_lens.sandbox.probe import REQUIRE_ENV

TIMEOUT = 1.0
SLACK = 2.0  # interpreter start-up (not counted in the timeout) on a loaded 2-core machine
MBPP = Path(__file__).resolve().parents[3] / "shared" / "data" / "mbpp" / "mbpp.jsonl"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """With ``CEL_LENS_REQUIRE_SANDBOX=1`` (``make test`` where the probe finds the kernel layers,
    :mod:`cel_lens.sandbox.probe`), a sandbox test that skips fails instead, with the skip's reason."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(REQUIRE_ENV) == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_ENV}=1 (the kernel layers are expected here), but the test skipped: {reason}"


@pytest.fixture(scope="session")
def kernel_layers() -> tuple[str, ...]:
    return sb.isolation(allow=True)


@pytest.fixture(params=["namespaces", "guard-only"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kernel_layers) -> str:
    if request.param == "namespaces":
        if "pidns" not in kernel_layers:
            pytest.skip(f"namespaces are not permitted on this machine (layers: {kernel_layers})")
    else:
        monkeypatch.setattr(runner, "NAMESPACES", "off")
        monkeypatch.setenv(sb.WEAK_ENV, "1")
    return request.param


@pytest.fixture
def namespaces(kernel_layers, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    if "pidns" not in kernel_layers:
        pytest.skip(f"namespaces are not permitted on this machine (layers: {kernel_layers})")
    monkeypatch.setattr(runner, "NAMESPACES", "require")  # never run these programs without them
    return kernel_layers


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the sandbox with a canary file, and a place for the sandbox's temp dirs."""
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "canary.txt").write_text("canary\n")
    (d / "sub" / "nested.txt").write_text("nested\n")
    (tmp_path / "sandboxes").mkdir()
    return d


def snapshot(root: Path) -> dict[str, tuple[int, str, int]]:
    """Every file under ``root`` with its mode, content hash and modification time."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (st.st_mode, digest, st.st_mtime_ns)
    return out


def processes_mentioning(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the sandboxes' temp root)."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd:
                pids.append(int(pid))
    return pids


@pytest.fixture
def sandbox_processes() -> Callable[[str], list[int]]:
    """:func:`processes_mentioning`, for the tests: processes whose command line names a sandbox root."""
    return processes_mentioning


@pytest.fixture
def hostile(outside: Path) -> Callable[..., sb.Outcome]:
    """Run code and check what every hostile program must satisfy: not passed, within its time,
    nothing outside changed, its directory deleted, no process left."""

    def run_hostile(code: str, **kw) -> sb.Outcome:
        root = outside.parent / "sandboxes"
        before = snapshot(outside)
        t0 = time.monotonic()
        out = sb.run(code, timeout=TIMEOUT, allow=True, tmp_root=str(root), **kw)
        elapsed = time.monotonic() - t0
        assert not out.passed, out
        assert out.status in ("failed", "timeout", "error"), out
        assert elapsed <= TIMEOUT + SLACK, (elapsed, out)
        assert snapshot(outside) == before, "a file outside the sandbox changed"
        assert list(root.iterdir()) == [], "the sandbox's temporary directory was not deleted"
        assert processes_mentioning(str(root)) == [], "a sandbox process outlived run()"
        return out

    return run_hostile

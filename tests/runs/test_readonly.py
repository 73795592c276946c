"""Reading a finished run needs no write access: rerunning it writes nothing at all, and in a
directory that cannot be written it still answers; an unfinished run there is one clear error."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cel_lens.config import SearchConfig
from cel_lens.runs import RecordingOracle, RunDir, RunReadOnlyError
from cel_lens.runs.lock import LOCK
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic"}, "task": {"name": "toy"}, "k": 2}
ORACLE = dict(n_layers=4, n_heads=4, n_dist=100, n_test=100, base_acc=0.5, effects={"L1H2": 0.1}, seed=0)
SEARCH = dict(k=2, pool_size=4, n_null=6, n_boot=200, chunk=4)


def snapshot(path: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, int]]:
    """Every file under ``path`` (but ``skip``) with its bytes and modification time (ns)."""
    files = [p for p in sorted(path.rglob("*")) if p.is_file() and p.name not in skip]
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_rerun_of_a_finished_run_writes_nothing(tmp_path):
    with RunDir.open(tmp_path / "run", MANIFEST) as run:
        first = run_search(RecordingOracle(SyntheticOracle(**ORACLE), run), SearchConfig(**SEARCH), progress=False)
    before = snapshot(run.path, skip=(LOCK,))  # the lock file names its latest holder
    oracle = SyntheticOracle(**ORACLE)
    with RunDir.open(run.path, MANIFEST) as again:
        assert again.finished and again.writable
        assert run_search(RecordingOracle(oracle, again), SearchConfig(**SEARCH), progress=False) == first
    assert oracle.calls == [] and snapshot(run.path, skip=(LOCK,)) == before


# argv[1]: run directory; argv[2:5]: oracle, search, manifest.
_CHILD = """
import json, sys
from cel_lens.runs import RecordingOracle, RunDir
from cel_lens.config import SearchConfig
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle
oracle_kw, search_kw, manifest = (json.loads(a) for a in sys.argv[2:5])
oracle = SyntheticOracle(**oracle_kw)
try:
    with RunDir.open(sys.argv[1], manifest) as run:
        result = run_search(RecordingOracle(oracle, run), SearchConfig(**search_kw), progress=False)
except Exception as err:
    print(json.dumps({"error": str(err), "type": type(err).__name__}))
    sys.exit(2)
print(json.dumps({"heads": result.heads, "gain": result.gain, "calls": len(oracle.calls), "writable": run.writable}))
"""


def _read_only_prefix(root: Path) -> list[str]:
    """How to run a command that cannot write under ``root``: as this user once ``root`` is
    ``chmod a-w`` (not root), or (root, whom permission bits do not stop) inside a private mount
    namespace where ``root`` is bind-mounted read-only."""
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
    prefix = [unshare or "unshare", "-m", "sh", "-c", script, "sh"]
    if not unshare or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without mount namespaces: no way to make a directory read-only for this test")
    return prefix


def _as_reader(prefix: list[str], script: Path, run: Path) -> tuple[int, dict]:
    """Run the child under ``prefix`` (see :func:`_read_only_prefix`)."""
    args = [sys.executable, str(script), str(run), json.dumps(ORACLE), json.dumps(SEARCH), json.dumps(MANIFEST)]
    proc = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def ro_root(tmp_path):
    """A directory to make read-only; made writable again afterwards so that it can be removed."""
    root = tmp_path / "ro"
    root.mkdir()
    yield root
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


@pytest.mark.slow  # subprocesses importing torch: ~10 s
def test_finished_run_in_a_read_only_directory(ro_root, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    run = ro_root / "run"
    with RunDir.open(run, MANIFEST) as rd:
        first = run_search(RecordingOracle(SyntheticOracle(**ORACLE), rd), SearchConfig(**SEARCH), progress=False)
    unfinished = ro_root / "unfinished"
    shutil.copytree(run, unfinished)
    (unfinished / "result.json").unlink()
    prefix = _read_only_prefix(ro_root)
    before = snapshot(run)
    code, out = _as_reader(prefix, script, run)
    assert code == 0, out
    assert (out["heads"], out["gain"], out["calls"], out["writable"]) == (first.heads, first.gain, 0, False)
    assert snapshot(run) == before
    code, out = _as_reader(prefix, script, unfinished)
    assert code == 2 and out["type"] == "RunReadOnlyError"
    assert out["error"] == (
        f"run directory {unfinished} is not writable and its run has not finished "
        "(give it write access to resume it, or use another output directory)"
    )
    code, out = _as_reader(prefix, script, run / "new")  # nor can a new one be made inside
    assert code == 2 and out["type"] == "RunReadOnlyError" and "cannot create run directory" in out["error"]


def test_read_only_writes_are_one_clear_error(tmp_path, monkeypatch):
    with RunDir.open(tmp_path / "run", MANIFEST) as run:
        run.record_event("hello")
    reader = RunDir(run.path)
    reader.writable = False  # as RunDir.open leaves a directory it could not lock
    with pytest.raises(RunReadOnlyError, match=f"run directory {run.path} is not writable: cannot record the 'x' event"):
        reader.record_event("x")

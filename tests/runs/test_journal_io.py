"""The bytes of a run directory: a changed line is refused with its file and line, records written
before checksums existed still read, and a write that fails (disk full, file size limit) names its
file, leaves no temporary file and leaves the record readable."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cel_lens.config import SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.runs import RecordingOracle, RunDir, RunRecordError, RunWriteError, load_run
from cel_lens.runs.journal_io import CHECK, line_checksum
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic"}, "task": {"name": "toy"}, "k": 2}
ORACLE = dict(n_layers=4, n_heads=4, n_dist=120, n_test=120, base_acc=0.5, effects={"L1H2": 0.1}, seed=0)
SEARCH = dict(k=2, pool_size=4, n_null=6, n_boot=200, chunk=4)


@pytest.fixture
def finished(tmp_path) -> Path:
    run = RunDir.open(tmp_path / "run", MANIFEST)
    run_search(RecordingOracle(SyntheticOracle(**ORACLE), run), SearchConfig(**SEARCH), progress=False)
    run.close()
    return run.path


def _raw(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path / "evaluations.jsonl").read_text().splitlines()]


def _write_raw(path: Path, lines: list[dict]) -> None:
    (path / "evaluations.jsonl").write_text("".join(json.dumps(o) + "\n" for o in lines))


def test_every_line_carries_a_checksum_of_its_content(finished):
    lines = _raw(finished)
    assert lines and all(o[CHECK] == line_checksum(o) for o in lines)
    assert all(len(o[CHECK]) == 16 for o in lines)
    assert CHECK not in RunDir(finished).lines()[0]  # readers never see it


@pytest.mark.parametrize("field, value", [("bits", None), ("n_correct", 0), ("heads", "L3H3+L2H2")])
def test_a_changed_line_is_refused_naming_file_and_line(finished, field, value):
    lines = _raw(finished)
    i = next(i for i, o in enumerate(lines) if o.get("type") == "eval" and o["split"] == "dist" and o["heads"] != "intact")
    if field == "bits":  # flip every bit of the first byte: still valid base64, still valid JSON
        raw = bytearray(__import__("base64").b64decode(lines[i]["bits"]))
        raw[0] ^= 0xFF
        value = __import__("base64").b64encode(bytes(raw)).decode()
    lines[i][field] = value
    _write_raw(finished, lines)
    want = f"{finished / 'evaluations.jsonl'}: line {i + 1} does not match its checksum"
    for read in (lambda: RunDir(finished).lines(), lambda: load_run(finished),
                 lambda: RecordingOracle(SyntheticOracle(**ORACLE), RunDir.open(finished, MANIFEST))):
        with pytest.raises(RunRecordError) as err:
            read()
        assert str(err.value).startswith(want)


def test_records_without_checksums_still_read_and_resume(finished):
    reference = load_run(finished)
    _write_raw(finished, [{k: v for k, v in o.items() if k != CHECK} for o in _raw(finished)])  # an old run
    old = load_run(finished)
    assert old.result == reference.result and len(old.evaluations) == len(reference.evaluations)
    run = RunDir.open(finished, MANIFEST)
    run._closed_run = False  # as if unfinished: let it append
    run.append_evaluations("dist", [HeadSet.parse("L3H3+L0H1")], torch.ones(1, 120, dtype=torch.bool), "extra")
    assert len(RunDir(finished).evaluations()) == len(reference.evaluations) + 1  # mixed: fine
    lines = _raw(finished)
    assert CHECK in lines[-1] and CHECK not in lines[0]
    _write_raw(finished, [*lines, {k: v for k, v in lines[-1].items() if k != CHECK}])
    with pytest.raises(RunRecordError, match=f"line {len(lines) + 1} has no checksum"):
        RunDir(finished).lines()


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_names_the_file_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    run = RunDir.open(tmp_path / "run", MANIFEST)
    run.append_evaluations("dist", [HeadSet()], torch.ones(1, 5, dtype=torch.bool), "intact")
    before = run.evaluations_path.read_bytes()
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(RunWriteError) as err:
        run.append_evaluations("dist", [HeadSet.parse("L1H1")], torch.ones(1, 5, dtype=torch.bool), "stage1")
    assert str(err.value) == f"could not write {run.evaluations_path}: No space left on device (the file was left as it was)"
    assert err.value.errno == errno.ENOSPC and isinstance(err.value, OSError)
    assert run.evaluations_path.read_bytes() == before  # the appended bytes were cut off again
    with pytest.raises(RunWriteError, match=f"could not write {run.result_path}: No space left"):
        run.write_result({"heads": "L1H1"})
    with pytest.raises(RunWriteError, match="could not write .*manifest.json"):
        RunDir.open(tmp_path / "other", MANIFEST)
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == [] and not run.result_path.exists()
    monkeypatch.undo()
    assert RunDir.open(tmp_path / "other", MANIFEST).manifest == MANIFEST  # the failed creation refuses nothing


# Runs a search into argv[1] until a write fails; reports what the failure said and what is left.
_FILL_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from pathlib import Path
    from cel_lens.runs import RecordingOracle, RunDir, RunWriteError, load_run
    from cel_lens.config import SearchConfig
    from cel_lens.selection import run_search
    from cel_lens.testing import SyntheticOracle
    path, limit, oracle_kw, search_kw, manifest = sys.argv[1], int(sys.argv[2]), *map(json.loads, sys.argv[3:6])
    if limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    out = {}
    try:
        with RunDir.open(path, manifest) as run:
            run_search(RecordingOracle(SyntheticOracle(**oracle_kw), run), SearchConfig(**search_kw), progress=False)
    except RunWriteError as err:
        out = {"error": str(err), "errno": err.errno}
    out["files"] = sorted(p.name for p in Path(path).iterdir())
    out["complete"] = Path(path, "evaluations.jsonl").read_bytes().endswith(b"\\n")
    out["evaluations"] = len(load_run(path).evaluations)
    print(json.dumps(out))
    """
)


def _fill(script_dir: Path, run_path: Path, limit: int = 0, prefix: list[str] = ()) -> dict:
    script = script_dir / "fill.py"
    script.write_text(_FILL_CHILD)
    args = [str(run_path), str(limit), json.dumps(ORACLE), json.dumps(SEARCH), json.dumps(MANIFEST)]
    proc = subprocess.run([*prefix, sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a subprocess importing torch: ~5 s
def test_file_size_limit_mid_search(tmp_path):
    """A real failing write from the kernel (RLIMIT_FSIZE: EFBIG) in the middle of a search."""
    out = _fill(tmp_path, tmp_path / "run", limit=4000)  # the whole search writes about 6,000 bytes
    assert out["errno"] == errno.EFBIG
    assert out["error"].startswith(f"could not write {tmp_path / 'run' / 'evaluations.jsonl'}: File too large")
    assert out["files"] == [".lock", "evaluations.jsonl", "manifest.json"] and out["complete"]
    assert out["evaluations"] > 0


@pytest.mark.slow  # a subprocess importing torch in its own mount namespace: ~5 s
def test_disk_full_on_a_tiny_tmpfs(tmp_path):
    """A really full disk: a 12 KiB tmpfs, mounted in a private mount namespace (root only)."""
    unshare = shutil.which("unshare")
    probe = unshare and subprocess.run([unshare, "-m", "sh", "-c", f"mount -t tmpfs -o size=12k tmpfs {tmp_path}"],
                                       capture_output=True)
    if not probe or probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and unshare); test_file_size_limit_mid_search covers the failing write")
    mount = tmp_path / "mnt"
    mount.mkdir()
    (tmp_path / "run.sh").write_text(f'mount -t tmpfs -o size=12k tmpfs {mount} && exec "$@"\n')
    out = _fill(tmp_path, mount / "run", prefix=[unshare, "-m", "sh", str(tmp_path / "run.sh")])
    assert out["errno"] == errno.ENOSPC
    assert out["error"].startswith(f"could not write {mount / 'run'}/") and "No space left on device" in out["error"]
    assert not [f for f in out["files"] if f.endswith(".tmp")] and out["complete"]

"""Run directories: manifest checks, append-only records that survive a killed writer, the caching
oracle, resume after SIGKILL, and the proof that selection preceded the test split."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
import torch

from cel_lens.config import SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.oracle import Stage1Scores
from cel_lens.runs import (
    CachedOracle,
    RecordingOracle,
    RunConfigError,
    RunDir,
    decode_bits,
    encode_bits,
    load_run,
)
from cel_lens.selection import run_search
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic", "weights_sha256": "abc"}, "task": {"name": "toy", "dist_hash": "d1"}, "k": 3, "seed": 0}
ORACLE = dict(
    n_layers=4, n_heads=4, n_dist=300, n_test=300, base_acc=0.5,
    effects={"L1H2": 0.06, "L2H3": 0.05, "L0H0": -0.1, "L3H1": -0.08}, background_sd=0.01, noise=0.05, seed=0,
)
SEARCH = dict(k=3, pool_size=6, n_null=20, n_boot=500, chunk=3)


def _keys(evals) -> list[tuple[str, str]]:
    return [(e.split, str(e.heads)) for e in evals]


# -- encoding and manifest ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000])
def test_bits_roundtrip(n):
    x = torch.rand(n, generator=torch.Generator().manual_seed(n)) < 0.5
    bits = encode_bits(x)
    assert len(bits) <= 4 * ((n + 7) // 8 + 2) // 3 + 4  # base64 of n/8 bytes
    assert torch.equal(decode_bits(bits, n), x)


def test_mismatch_names_options_and_splits_not_hashes(tmp_path):
    """``cel-lens demo --n-dist 1000`` after a default demo listed four sha256 digits strings."""
    digest = lambda c: c * 64  # noqa: E731
    old = {"model": {"id": "m", "weights_sha256": digest("a")}, "options": {"k": 3},
           "task": {"name": "t", "options": {"n_dist": 2000}},
           "splits": {s: {"n": 2000, "content_sha256": digest(c)} for s, c in (("dist", "b"), ("test", "c"))}}
    new = json.loads(json.dumps(old))
    new["task"]["options"]["n_dist"] = new["splits"]["dist"]["n"] = 1000
    new["splits"]["dist"]["content_sha256"], new["splits"]["test"]["content_sha256"] = digest("d"), digest("e")
    new["model"]["weights_sha256"] = digest("f")
    RunDir.open(tmp_path / "run", old).close()
    with pytest.raises(RunConfigError) as err:
        RunDir.open(tmp_path / "run", new)
    msg = str(err.value)
    assert not any(digest(c)[:12] in msg for c in "abcdef")
    assert "task.options.n_dist: 2000 -> 1000" in msg and "splits.dist.n: 2000 -> 1000" in msg
    assert "the dist and test splits hold other examples" in msg and "model.weights_sha256 differs" in msg


def test_manifest_created_reused_and_mismatch_names_fields(tmp_path):
    path = tmp_path / "run"
    run = RunDir.open(path, MANIFEST)
    assert json.loads(run.manifest_path.read_text()) == MANIFEST
    RunDir.open(path, dict(MANIFEST))  # same configuration: reused
    changed = {**MANIFEST, "k": 2, "task": {"name": "other", "dist_hash": "d1"}, "extra": 1}
    with pytest.raises(RunConfigError) as err:
        RunDir.open(path, changed)
    msg = str(err.value)
    assert "k: 3 -> 2" in msg and "task.name: 'toy' -> 'other'" in msg and "extra: absent -> 1" in msg
    assert "dist_hash" not in msg and "model" not in msg and "seed" not in msg
    RunDir.open(path, {**MANIFEST, "k": 2}, ignore=["k"])  # ignored fields are not compared
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("x")
    with pytest.raises(RunConfigError, match="not empty"):
        RunDir.open(tmp_path / "busy", MANIFEST)
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "nowhere")


# -- the record ---------------------------------------------------------------------------------


def test_truncated_last_line_is_ignored_and_repaired(tmp_path):
    run = RunDir.open(tmp_path / "run", MANIFEST)
    c = torch.tensor([[True, False, True], [False, False, True]])
    run.append_evaluations("dist", [HeadSet(), HeadSet.parse("L1H1")], c, "stage1")
    with open(run.evaluations_path, "ab") as f:
        f.write(b'{"type":"eval","split":"dist","heads":"L2H')  # a writer killed mid-line
    evals = RunDir(run.path).evaluations()
    assert _keys(evals) == [("dist", "intact"), ("dist", "L1H1")]
    assert torch.equal(evals[1].correct, c[1]) and evals[1].stage == "stage1"
    assert evals[0].accuracy == pytest.approx(2 / 3)
    run = RunDir.open(run.path, MANIFEST)  # reopening cuts the partial line
    run.append_evaluations("dist", [HeadSet.parse("L2H2")], c[:1], "stage1")
    assert run.evaluations_path.read_bytes().endswith(b"\n")
    assert _keys(run.evaluations()) == [("dist", "intact"), ("dist", "L1H1"), ("dist", "L2H2")]
    # a corrupt line in the middle is an error, not silently skipped
    lines = run.evaluations_path.read_text().splitlines()
    run.evaluations_path.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        run.evaluations()


def test_cached_oracle_answers_from_record(tmp_path):
    run = RunDir.open(tmp_path / "run", MANIFEST)
    inner = SyntheticOracle(**ORACLE)
    cached = CachedOracle(inner, run)
    sets = [HeadSet(), HeadSet.parse("L1H2"), HeadSet(), HeadSet.parse("L0H0+L1H2")]
    first = cached.evaluate("dist", sets, stage="s")
    assert len(inner.calls) == 3 and cached.misses == 3 and cached.hits == 1  # duplicate evaluated once
    again = CachedOracle(SyntheticOracle(**ORACLE), run)  # a new process: everything from the record
    assert torch.equal(again.evaluate("dist", sets), first)
    assert again.misses == 0 and again.oracle.calls == []
    assert torch.equal(first, inner.evaluate("dist", sets))  # the record holds the oracle's answers
    with pytest.raises(RuntimeError, match="before a selection"):
        cached.evaluate("test", [HeadSet()])
    run.record_event("selected", heads="L1H2")
    cached.note_selection()
    assert cached.evaluate("test", [HeadSet()]).shape == (1, 300)


# -- runs of the search -------------------------------------------------------------------------


def test_search_run_records_everything_and_resumes_without_reevaluating(tmp_path):
    reference = run_search(SyntheticOracle(**ORACLE), SearchConfig(**SEARCH), progress=False)
    run = RunDir.open(tmp_path / "run", MANIFEST)
    first = SyntheticOracle(**ORACLE)
    result = run_search(RecordingOracle(first, run), SearchConfig(**SEARCH), progress=False)
    assert result == reference
    loaded = load_run(run.path)
    assert loaded.result == result and loaded.manifest == MANIFEST
    keys = _keys(loaded.evaluations)
    assert len(keys) == len(set(keys)) == len(set(first.calls))  # every evaluation recorded once
    lines = run.lines()
    kinds = [o.get("event", o.get("split")) for o in lines]
    sel = kinds.index("selected")
    assert kinds.count("selected") == 1 and "test" not in kinds[:sel] and "dist" not in kinds[sel:]
    assert lines[sel]["heads"] == result.heads
    assert run.events("stage1_scores")[0]["scores"] == result.scores
    # the same command again: no evaluation at all, same result, still one selection
    second = SyntheticOracle(**ORACLE)
    again = run_search(RecordingOracle(second, RunDir.open(run.path, MANIFEST)), SearchConfig(**SEARCH), progress=False)
    assert again == result
    assert second.calls == []
    # its seconds are this process's: it says how many evaluations it read instead of timing them
    assert "resumed_sets" not in result.timings and again.timings["resumed_sets"] == len(keys)
    assert len(RunDir(run.path).events("selected")) == 1
    # a rerun that would select differently after the test split was read is refused
    bad_scores = torch.zeros(4, 4)
    bad_scores[3, 3] = 1.0
    with pytest.raises(RuntimeError, match="already selected"):
        run_search(
            RecordingOracle(SyntheticOracle(**ORACLE), run), SearchConfig(**{**SEARCH, "pool_size": 1, "k": 1}),
            scores=Stage1Scores(bad_scores, "dist", "given"), progress=False,
        )


_CHILD = textwrap.dedent(
    """
    import json, sys
    from cel_lens.runs import RecordingOracle, RunDir
    from cel_lens.config import SearchConfig
    from cel_lens.selection import run_search
    from cel_lens.testing import SyntheticOracle
    oracle_kw, search_kw, manifest = (json.loads(a) for a in sys.argv[2:5])
    oracle = SyntheticOracle(**oracle_kw, delay=float(sys.argv[5]))
    run_search(RecordingOracle(oracle, RunDir.open(sys.argv[1], manifest)), SearchConfig(**search_kw), progress=False)
    """
)


@pytest.mark.slow  # a subprocess importing torch plus a deliberately slow oracle: ~7-9 s
def test_resume_after_sigkill_mid_stage_two(tmp_path):
    """Kill a search over a slow oracle with SIGKILL while stage 2 is being recorded, rerun it: the
    same result, and no head set recorded before the kill is evaluated again."""
    path = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    args = [json.dumps(ORACLE), json.dumps(SEARCH), json.dumps(MANIFEST), "0.15"]
    proc = subprocess.Popen([sys.executable, str(script), str(path), *args], cwd=tmp_path)
    reader = RunDir(path)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if reader.evaluations_path.exists() and any(o.get("stage") == "stage2" for o in reader.lines()):
                break
            if proc.poll() is not None:
                pytest.fail(f"child exited early with {proc.returncode}")
            time.sleep(0.01)
        else:
            pytest.fail("child did not reach stage 2 in time")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not reader.result_path.exists()
    before = reader.evaluations()
    stages = Counter(e.stage for e in before)
    n_subsets = 6 + 15 + 20
    assert 0 < stages["stage2"] < n_subsets and "test" not in {e.split for e in before}
    # as if the kill had also cut a line in half
    with open(reader.evaluations_path, "ab") as f:
        f.write(b'{"type":"eval","split":"dist","hea')

    oracle = SyntheticOracle(**ORACLE)  # same configuration, counts its evaluations
    result = run_search(RecordingOracle(oracle, RunDir.open(path, MANIFEST)), SearchConfig(**SEARCH), progress=False)
    assert result == run_search(SyntheticOracle(**ORACLE), SearchConfig(**SEARCH), progress=False)  # same as an uninterrupted search
    recorded_before = set(_keys(before))
    evaluated_after = [(split, str(hs)) for split, hs in oracle.calls]
    assert not recorded_before & set(evaluated_after)  # nothing recorded is evaluated again
    assert len(evaluated_after) == len(set(evaluated_after))
    final = _keys(load_run(path).evaluations)
    assert len(final) == len(set(final)) == len(recorded_before) + len(evaluated_after)
    assert load_run(path).result == result



def test_a_manifest_records_the_code_version():
    """A row's numbers can be traced to the code that made them: the package's source hash, and in a
    git checkout the commit and whether the package had uncommitted changes (issue 57)."""
    import hashlib
    from pathlib import Path

    import cel_lens
    from cel_lens.runs.manifest import code_version, package_versions

    code = package_versions()["cel_lens_code"]
    assert code == code_version()
    root = Path(cel_lens.__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted((root / "cel_lens").rglob("*.py")):
        digest.update(str(path.relative_to(root / "cel_lens")).encode() + b"\0" + path.read_bytes())
    assert code["source_sha256"] == digest.hexdigest()
    if (root / ".git").exists():
        assert len(code["commit"]) == 40 and isinstance(code["dirty"], bool)

"""tasks/avoid.py: a committed list of read rows kept out of D_test, on the real data files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cel_lens as cl
from cel_lens.tasks.avoid import load_avoid, without_avoided

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("# a comment line\n" + "\n".join(lines) + "\n")
    return path


def test_arithmetic_test_split_leaves_out_the_listed_rows_and_keeps_dist(tmp_path: Path) -> None:
    plain = cl.load_task("arithmetic", n_dist=50, n_test=40, seed=3)
    listed = [e.id for e in plain.test.examples[:10]] + [plain.test.examples[10].content_hash]
    avoid = write(tmp_path / "read.txt", listed)
    task = cl.load_task("arithmetic", n_dist=50, n_test=40, seed=3, avoid_test=str(avoid))
    ids = {e.id for e in task.test.examples}
    assert len(ids) == 40
    assert not ids & {e.id for e in plain.test.examples[:11]}
    assert [e.id for e in task.dist.examples] == [e.id for e in plain.dist.examples]
    # the rows that stayed are the same draw, in the same order, with the next rows after them
    assert [e.id for e in task.test.examples][:29] == [e.id for e in plain.test.examples[11:]]
    rec = task.options["avoid_test_file"]
    assert rec["entries"] == 11 and rec["rows_left_out"] == 11 and len(rec["sha256"]) == 64
    assert task.options["avoid_test"] == str(avoid)


def test_no_avoid_list_draws_what_it_drew_before() -> None:
    a = cl.load_task("arithmetic", n_dist=20, n_test=20, seed=1)
    assert "avoid_test" not in a.options


def test_boolq_from_validation_leaves_out_the_listed_rows(tmp_path: Path) -> None:
    plain = cl.load_task("boolq", n_dist=10, n_test=30, seed=0, dist_from="validation")
    avoid = write(tmp_path / "read.txt", [e.id for e in plain.test.examples])
    task = cl.load_task("boolq", n_dist=10, n_test=30, seed=0, dist_from="validation", avoid_test=str(avoid))
    assert not {e.id for e in task.test.examples} & {e.id for e in plain.test.examples}
    assert task.options["avoid_test_file"]["rows_left_out"] == 30
    with pytest.raises(ValueError, match="dist_from='validation'"):
        cl.load_task("boolq", n_dist=10, n_test=30, avoid_test=str(avoid))


def test_boolq_reserve_keeps_rows_out_of_both_splits(tmp_path: Path) -> None:
    plain = cl.load_task("boolq", n_dist=40, n_test=30, seed=0, dist_from="validation")
    kept = [e.id for e in plain.dist.examples[:20]] + [e.content_hash for e in plain.test.examples[:10]]
    reserve = write(tmp_path / "reserved.txt", kept)
    task = cl.load_task("boolq", n_dist=40, n_test=30, seed=0, dist_from="validation", reserve=str(reserve))
    used = {e.id for e in task.dist.examples} | {e.id for e in task.test.examples}
    assert len(used) == 70
    assert not used & ({e.id for e in plain.dist.examples[:20]} | {e.id for e in plain.test.examples[:10]})
    rec = task.options["reserve_file"]
    assert rec["entries"] == 30 and rec["rows_left_out"] == 30 and task.options["reserve"] == str(reserve)
    assert "reserve" not in plain.options
    with pytest.raises(ValueError, match="dist_from='validation'"):
        cl.load_task("boolq", n_dist=10, n_test=30, reserve=str(reserve))
    with pytest.raises(FileNotFoundError, match="reserve: no file"):
        cl.load_task("boolq", n_dist=10, n_test=30, dist_from="validation", reserve=str(tmp_path / "nope.txt"))


def test_a_missing_list_is_an_error_not_an_empty_list(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="avoid_test"):
        cl.load_task("arithmetic", n_dist=5, n_test=5, avoid_test=str(tmp_path / "nope.txt"))
    assert without_avoided([1, 2], load_avoid(None)) == [1, 2]


def test_read_rows_script_lists_ledger_reads_and_earlier_splits(tmp_path: Path, monkeypatch) -> None:
    from cel_lens.evaluation.seal import SealReader, record_test_read

    task = cl.load_task("arithmetic", n_dist=5, n_test=6, seed=2)

    class Model:  # what the ledger needs of a model: an id (no weights to fingerprint)
        cfg = type("Cfg", (), {"model_name": "m"})()

    monkeypatch.setenv("CEL_LENS_LEDGER", str(tmp_path / "ledger"))
    record_test_read(Model(), task.test, [], reader=SealReader("test"))
    out = tmp_path / "rows.txt"
    env = {"CEL_LENS_LEDGER": str(tmp_path / "ledger"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "scripts/read_rows.py", "--task", "arithmetic", "--split", "n_dist=0,n_test=4,seed=9",
            "--out", str(out)]
    subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True)
    ids = {ln for ln in out.read_text().splitlines() if not ln.startswith("#")}
    earlier = {e.id for e in cl.load_task("arithmetic", n_dist=0, n_test=4, seed=9).test.examples}
    assert ids == {e.id for e in task.test.examples} | earlier
    fresh = cl.load_task("arithmetic", n_dist=5, n_test=6, seed=2, avoid_test=str(out))
    assert not {e.id for e in fresh.test.examples} & ids

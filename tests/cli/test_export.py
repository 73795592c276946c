"""``cel-lens export``: a run on the real Arithmetic file exported and verified, heads exported
without a run, and option errors answered in one line before anything is written."""

from __future__ import annotations

import json
import shutil

import pytest

from cel_lens.cli import main


@pytest.fixture(scope="module")
def arithmetic_run(tiny_checkpoints, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_export") / "run"
    args = ["search", "--model", str(tiny_checkpoints["llama"]), "--task", "arithmetic", "--data-dir", str(data_dir),
            "--n-dist", "8", "--n-test", "16", "--k", "1", "--pool", "2", "--n-null", "2", "--out", str(out),
            "--no-progress", "--json"]
    assert main(args) == 0
    return out


def test_export_and_verify_a_run(arithmetic_run, data_dir, tmp_path, capsys):
    capsys.readouterr()
    code = main(["export", str(arithmetic_run), "--out", str(tmp_path / "out"), "--verify", "--data-dir", str(data_dir),
                 "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "16/16 per-example decisions on D_test equal the run's ablated evaluation" in text
    assert "plain transformers" in text and (tmp_path / "out" / "config.json").is_file()
    code = main(["export", str(arithmetic_run), "--out", str(tmp_path / "again"), "--verify", "--data-dir", str(data_dir),
                 "--no-progress", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verify"]["ok"] and out["verify"]["n"] == 16 and out["kind"] == "hf"
    assert out["heads"] == json.loads((arithmetic_run / "result.json").read_text())["heads"]


def test_a_differing_decision_exits_1(arithmetic_run, data_dir, tmp_path, capsys):
    """One recorded D_test decision flipped (and its line re-checksummed, as if recorded so):
    verification names that example and fails."""
    from cel_lens.runs import decode_bits, encode_bits
    from cel_lens.runs.journal_io import CHECK, encode_lines

    run = tmp_path / "run"
    shutil.copytree(arithmetic_run, run)
    heads = json.loads((run / "result.json").read_text())["heads"]
    lines = [json.loads(x) for x in (run / "evaluations.jsonl").read_text().splitlines()]
    for line in lines:
        if line.get("type") == "eval" and line["split"] == "test" and line["heads"] == heads:
            bits = decode_bits(line["bits"], line["n"])
            bits[3] = ~bits[3]
            line["bits"] = encode_bits(bits)
    (run / "evaluations.jsonl").write_bytes(encode_lines([{k: v for k, v in x.items() if k != CHECK} for x in lines]))
    code = main(["export", str(run), "--out", str(tmp_path / "o"), "--verify", "--data-dir", str(data_dir),
                 "--no-progress", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["verify"]["ok"] and out["verify"]["matches"] == 15
    assert len(out["verify"]["mismatched_ids"]) == 1


def test_export_heads_without_a_run(tiny_checkpoints, tmp_path, capsys):
    code = main(["export", "--heads", "L0H1+L2H3", "--model", str(tiny_checkpoints["smollm3"]),
                 "--out", str(tmp_path / "out"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["heads"] == "L0H1+L2H3" and out["edited_tensors"] == 2


@pytest.mark.parametrize("argv,message", [
    (["export", "--out", "X"], "give RUN_DIR, or --heads"),
    (["export", "--heads", "L0H1", "--out", "X"], "--heads needs --model"),
    (["export", "R", "--heads", "L0H1", "--out", "X"], "not both"),
    (["export", "--heads", "L0H1", "--model", "m", "--verify", "--out", "X"], "--verify needs RUN_DIR"),
    (["export", "/no/such/run", "--out", "X"], "not a run directory"),
])
def test_option_errors_are_one_line(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / a) if a == "X" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cel-lens: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "X").exists()


def test_non_empty_output_is_refused(arithmetic_run, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    assert main(["export", str(arithmetic_run), "--out", str(tmp_path / "taken")]) == 2
    assert "not empty" in capsys.readouterr().err

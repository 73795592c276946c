"""``cel-lens table``: one-line errors, a grid on a tiny checkpoint with the real Arithmetic file and
MBPP (which fails in its row without code execution), and ``--report`` rebuilding the same outputs."""

from __future__ import annotations

import json

import pytest

from cel_lens.cli import main

OUTPUTS = ("table.md", "table.json", "report.html")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["table"], "give --models and --tasks"),
        (["table", "--models", "organism"], "give --models and --tasks"),
        (["table", "--report", "somewhere", "--models", "organism"], "give no --models"),
        (["table", "--report", "/no/such/grid"], "no grid.json"),
        (["table", "--models", "organism", "--tasks", "organism_a,nope"], "unknown task"),
        (["table", "--models", "organism", "--tasks", "organism_a", "--k", "0"], "k must be"),
        (["table", "--models", "organism", "--tasks", "organism_a", "--parallel-pairs", "2"], "--parallel-pairs > 1 needs"),
        (["table", "--models", "organism", "--tasks", "organism_a", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["table", "--report", "somewhere", "--task-option", "organism_a:n_dist=3"], "--task-option"),
        (["table", "--models", "organism", "--tasks", "organism_a", "--task-option", "boolq:n_dist=3"], "not a task of this grid"),
        (["table", "--models", "organism", "--tasks", "organism_a", "--task-option", "n_dist=3"], "TASK:KEY=VALUE"),
    ],
)
def test_errors_are_one_line(capsys, tmp_path, argv, message):
    argv = [a if a != "somewhere" else str(tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cel-lens: error: ") and err.count("\n") == 1 and message in err


def test_table_on_a_tiny_checkpoint_then_report_rebuilds_it(capsys, tiny_checkpoints, data_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("CEL_LENS_ALLOW_CODE_EXECUTION", raising=False)
    model, out = str(tiny_checkpoints["llama"]), tmp_path / "grid"
    code = main([
        "table", "--models", model, "--tasks", "arithmetic,mbpp", "--data-dir", str(data_dir), "--loader", "hooked",
        "--n-dist", "16", "--n-test", "16", "--k", "2", "--pool", "3", "--n-null", "4", "--n-boot", "100",
        "--out", str(out), "--no-progress", "--no-png", "--json",
    ])
    assert code == 0
    table = json.loads(capsys.readouterr().out)
    arithmetic, mbpp = table["rows"]
    assert (arithmetic["task"], arithmetic["status"], arithmetic["n_dist"], arithmetic["n_test"]) == ("arithmetic", "ok", 16, 16)
    assert mbpp["status"] == "failed" and "--allow-code-execution" in mbpp["error"]
    assert table == json.loads((out / "table.json").read_text())
    before = {name: (out / name).read_bytes() for name in OUTPUTS}
    for name in OUTPUTS:
        (out / name).unlink()
    assert main(["table", "--report", str(out), "--no-png"]) == 0
    printed = capsys.readouterr().out
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    assert printed.startswith(before["table.md"].decode())


def test_task_options_of_a_grid_name_their_task():
    from cel_lens.cli.table import task_overrides
    from cel_lens.config import OptionError

    items = ["boolq:dist_from=validation", "boolq:n_dist=100", "mbpp:max_new_tokens=128"]
    assert task_overrides(items) == {"boolq": {"dist_from": "validation", "n_dist": 100}, "mbpp": {"max_new_tokens": 128}}
    for bad in ("dist_from=validation", ":n=1", "boolq:novalue", "boolq:n=1"):
        with pytest.raises(OptionError):
            task_overrides([bad] + (["boolq:n=2"] if bad == "boolq:n=1" else []))

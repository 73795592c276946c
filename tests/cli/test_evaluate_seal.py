"""``cel-lens evaluate`` on D_test says in one line that it breaks the seal, and records the read."""

from __future__ import annotations

from cel_lens.cli import main
from cel_lens.evaluation.seal import ledger_file


def test_evaluate_on_the_test_split_breaks_the_seal_in_one_line(capsys):
    args = ["evaluate", "--model", "organism", "--task", "organism_a", "--n-dist", "8", "--n-test", "8", "--no-progress"]
    assert main([*args, "--split", "dist"]) == 0
    assert "seal" not in capsys.readouterr().err
    assert '"split_name": "test"' not in ledger_file("organism_a").read_text()  # a D_dist read: no test read
    assert main([*args, "--split", "test", "--heads", "L0H0"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "seal" in line]
    assert len(err) == 1 and err[0].startswith("note: reading D_test of organism_a")
    assert '"entry": "cel-lens evaluate"' in ledger_file("organism_a").read_text()

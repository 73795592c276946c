"""scripts/real_model_rows.py renders the real-model rows from synthetic records: a sealed row with a
significant gain, an unsealed one (reported, not counted), an underpowered one (too few discordant
examples), a pre-screen row with and without its measured recall, a sealed row not run yet, and the
order git history shows; scripts/seal_row.py commits a manifest before the search reads D_test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cel_lens.selection.result import Result
from cel_lens.stats.decision import gain_bounds, minimum_detectable_effect, minimum_detectable_effect_random
from script_modules import load_script

REPO = Path(__file__).resolve().parents[1]


rows = load_script("real_model_rows")
seal_row = load_script("seal_row")


def manifest(task: str = "arithmetic", n_dist: int = 1000, n_test: int = 1000, **task_options) -> dict:
    return {"model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "task": {"name": task, "options": task_options},
            "splits": {"dist": {"n": n_dist}, "test": {"n": n_test}},
            "options": {"split_seed": 36, "scorer": "exact", "k": 2, "pool_size": 6}}


def result(wins: int, losses: int, n: int = 1000, *, sealed: bool = True, scorer: str = "exact", **extra) -> dict:
    gain = (wins - losses) / n
    # the keys a result.json always has (the script reads it through Result.from_dict), then the checks
    r = {"heads": "L1H5+L2H1", "n_dist": 1000, "n_test": n, "k": 2, "pool_size": 6, "scorer": scorer, "seed": 0,
         "n_layers": 3, "n_heads": 6, "scores": [[0.0] * 6 for _ in range(3)], "dist_gain": 0.05,
         "pool": ["L1H5", "L2H1", "L0H0", "L0H1", "L1H0", "L2H0"], "subsets": [],
         "dist_acc_intact": 0.40, "dist_acc_ablated": 0.45, "test_acc_intact": 0.40, "test_acc_ablated": 0.40 + gain,
         "gain": gain, "ci_low": gain - 0.02, "ci_high": gain + 0.02, "ci_method": "tango", "p_value": 0.5,
         "alpha": 0.05, "null_gains": [0.0] * 20, "null_p": 1 / 21, "null_min_p": 1 / 21,
         "selection_stability": {"selected_frequency": 0.6, "n_resamples": 100, "wins": []}, "adjusted": {"p_value": 0.01},
         "ablation_controls": {"mean": {"gain": 0.01}, "resample": {"gain": 0.0}},
         "leave_one_out": {"heads": [{"head": "L1H5", "p_holm": 0.01}, {"head": "L2H1", "p_holm": 0.3}],
                           "supported": ["L1H5"], "alpha": 0.05},
         "calibration": {"applies": False}, "selected_before_test": sealed,
         "seal": {"prior_test_reads": 0 if sealed else 2, "reads": [],
                  "reason": None if sealed else "D_test was read 2 time(s) before the selection"},
         "decision": {"wins": wins, "losses": losses, "n": n}, "timings": {"stage1": 600.0, "test": 60.0}}
    r.update(extra)
    return r


def write(folder: Path, man: dict, res: dict | None = None, recall: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(man))
    if res is not None:
        (folder / "result.json").write_text(json.dumps(res))
    if recall is not None:
        (folder / "prescreen_recall.json").write_text(json.dumps(recall))
    return folder


def test_significant_sealed_row_states_its_gain(tmp_path):
    rec = rows.record("a", write(tmp_path / "a", manifest(), result(60, 20)))
    assert rec["evidence"] and rec["sealed"].startswith("yes")
    assert rec["power"]["p_one_sided"] < 0.05
    low = gain_bounds(60, 20, 1000)[0]
    assert rec["conclusion"].startswith(f"Ŝ raised D_test accuracy by +4.0 pp, at least {rows.pp2(low)} (one-sided")


def test_null_row_states_what_its_test_detects_and_of_what(tmp_path):
    """An absence is stated of what met D_test only, with the discordance it assumes (issue 57: "no head
    set raises accuracy by more than +0.6 pp" was the power of Ŝ's test at its observed discordance)."""
    rec = rows.record("a", write(tmp_path / "a", manifest(), result(25, 25)))
    mde = minimum_detectable_effect(1000, 0.05, 0.05, 0.8)
    assert rec["power"]["mde"] == pytest.approx(mde) and 0 < mde < 0.05
    assert rec["power"]["mde_random"] == pytest.approx(minimum_detectable_effect_random(1000, 0.05))
    assert rec["conclusion"].startswith("no gain shown for Ŝ (one-sided exact p ")
    assert f"its test detects {rows.pp2(mde)} with 80% power at n = 1000 and the observed 50 discordant examples" in rec["conclusion"]
    assert f"its gain is at most {rows.pp2(gain_bounds(25, 25, 1000)[1])}" in rec["conclusion"]
    assert "only Ŝ and 20 random head sets of its size met D_test" in rec["conclusion"]
    assert "no head set raised" not in rows.markdown([rec])


def test_unsealed_row_is_reported_and_not_evidence(tmp_path):
    rec = rows.record("a", write(tmp_path / "a", manifest(), result(60, 20, sealed=False)))
    assert not rec["evidence"]
    assert rec["sealed"].startswith("**no**: D_test was read 2 time(s)")  # no reads kept: the recorded reason
    assert rec["conclusion"].startswith("NOT SEALED, not counted as evidence: Ŝ raised")
    no_seal = {k: v for k, v in result(60, 20).items() if k != "seal"}
    assert not rows.record("b", write(tmp_path / "b", manifest(), no_seal))["evidence"]


def test_underpowered_row_says_it_cannot_detect(tmp_path):
    rec = rows.record("a", write(tmp_path / "a", manifest(n_test=16), result(1, 1, n=16)))
    assert rec["power"]["mde"] is None
    assert "too few discordant examples (1 + 1 of 16)" in rec["conclusion"]
    assert "none (too few discordant examples)" in rows.markdown([rec])


def test_calibration_and_null_caveats(tmp_path):
    """One calibrated comparison (best prior on D_test) with its bounds and verdict; the prior shift
    named only when its own test rejects."""
    cal = {"applies": True, "survives": False, "gain_cal": 0.005, "test_acc_intact_cal": 0.6, "test_acc_ablated_cal": 0.605,
           "ci_low_cal": 0.001, "ci_high_cal": 0.02, "p_value_cal": 0.3125, "gain_best": 0.002, "wins_cal": 3,
           "losses_cal": 1, "test_acc_intact_best": 0.603, "test_acc_ablated_best": 0.605, "majority_rate": 0.6,
           "majority_answer": " yes"}
    rec = rows.record("a", write(tmp_path / "a", manifest("boolq", dist_from="validation"),
                                 result(60, 20, calibration=cal, null_p=0.3)))
    assert "not shown to survive calibration (whether the answer prior moved was not tested)" in rec["conclusion"]
    assert "null p 0.3" in rec["conclusion"] and "answer-prior shift" not in rec["conclusion"]
    assert rec["description"] == "boolq, plain (D_dist from validation)"
    low, high = gain_bounds(3, 1, 1000)
    assert rec["calibrated"] == (f"best prior on D_test: 60.3 % → 60.5 %: +0.20 pp [{rows.pp2(low)}, {rows.pp2(high)}], "
                                 "p 0.31, **not shown to survive**; always answering yes: 60.0 % (the difference not tested)")
    assert "+0.50 pp" not in rec["calibrated"]  # the D_dist-refit gain, a second comparison, is not in the column
    moved = rows.record("b", write(tmp_path / "b", manifest("boolq"), result(
        60, 20, calibration={**cal, "p_prior": 0.001, "moves_prior": True})))
    assert "and the answer prior moves (prior-shift test p 0.001)" in moved["conclusion"]


def test_prescreen_recall_is_shown_only_when_measured(tmp_path):
    plain = rows.record("a", write(tmp_path / "a", manifest(), result(5, 5, scorer="prescreen")))
    assert plain["scorer"] == "pre-screen (recall of exact's pool not measured on this row)"
    assert "its pool from a pre-screen whose recall of exact's pool was not measured" in plain["conclusion"]
    measured = rows.record("b", write(tmp_path / "b", manifest(), result(5, 5, scorer="prescreen"), {"recall": 1.0}))
    assert measured["scorer"] == "pre-screen, recall of exact's pool 1.0 (measured on this row)"


def test_folder_of_rows_markdown_and_json(tmp_path):
    write(tmp_path / "rows" / "b-finished", manifest(), result(25, 25))
    write(tmp_path / "rows" / "a-pending", manifest("boolq", 500, 1000))
    table = rows.main([str(tmp_path / "rows")])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| a-pending (boolq, plain) | 500 / 1000 | exact, 2, 6 (planned) | not run")
    assert all(line.count(" | ") == len(rows.COLUMNS) - 1 for line in lines[:1] + lines[2:])
    data = json.loads(rows.main([str(tmp_path / "rows")], as_json=True))
    assert [d["row"] for d in data] == ["a-pending", "b-finished"]
    assert data[0]["status"] == "sealed, not run" and data[1]["power"]["wins"] == 25
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "real_model_rows.py"), str(tmp_path / "rows"), "--json"],
                         capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == json.loads(json.dumps(data))


def _git_repo(path: Path) -> Path:
    path.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.org"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


def test_git_order_seals_or_contradicts(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    good = write(repo / "good", manifest(), result(25, 25))
    seal_row.commit([good / "manifest.json"], "manifest")
    seal_row.commit([good / "result.json"], "result")
    rec = rows.record("good", good)
    assert rec["evidence"] and "before result" in rec["sealed"]
    bad = write(repo / "bad", manifest(), result(25, 25))
    subprocess.run(["git", "add", "bad"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "both at once"], cwd=repo, check=True)
    rec = rows.record("bad", bad)
    assert not rec["evidence"] and "result committed with or before the manifest" in rec["sealed"]


FAKE_SEARCH = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    out = Path(sys.argv[sys.argv.index("--out") + 1]); out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps({"task": {"name": "arithmetic"}, "splits": {}}))
    time.sleep(1.0)
    with open(out / "evaluations.jsonl", "a") as f:
        f.write(json.dumps({"kind": "eval", "split": "dist"}) + "\\n")
        f.write(json.dumps({"type": "event", "event": "prescreen", "pass": "attribution", "first_scores": [[1.0]]}) + "\\n")
        f.write(json.dumps({"kind": "eval", "split": "test"}) + "\\n")
    (out / "manifest.json").write_text(json.dumps({"task": {"name": "arithmetic"}, "splits": {}, "test_seal": {}}))
    (out / "result.json").write_text(RESULT)
""").replace("RESULT", repr(json.dumps({k: v for k, v in result(5, 5).items() if k != "seal"})))  # written before the ledger


def test_seal_row_commits_the_manifest_before_the_test_split(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    (repo / "fake.py").write_text(FAKE_SEARCH)
    row, run_dir = repo / "results" / "m" / "row", repo / "runs" / "row"
    code = seal_row.main([str(row), "--run-dir", str(run_dir), "--", sys.executable, str(repo / "fake.py"),
                          "--out", str(run_dir)])
    assert code == 0
    log = subprocess.run(["git", "log", "--format=%s", "--name-only"], cwd=repo, capture_output=True, text=True).stdout
    assert log.count("Real-model row row:") == 2 and log.count("results/m/row/result.json") == 1
    first = subprocess.run(["git", "log", "--format=%H", "--", "results/m/row/manifest.json"], cwd=repo,
                           capture_output=True, text=True).stdout.split()[-1]
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", first], cwd=repo, capture_output=True, text=True).stdout
    assert "results/m/row/manifest.json" in tree and "result.json" not in tree
    assert "evaluations.jsonl" not in log
    assert "test_seal" in (row / "manifest.json").read_text()  # the final manifest, committed with the result
    assert json.loads((row / "prescreen.json").read_text()) == {"event": "prescreen", "pass": "attribution",
                                                                "first_scores": [[1.0]]}
    assert "results/m/row/prescreen.json" in log


def test_seal_row_refuses_a_run_that_read_the_test_split(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    run_dir = repo / "runs" / "row"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "evaluations.jsonl").write_text(json.dumps({"kind": "eval", "split": "test"}) + "\n")
    with pytest.raises(RuntimeError, match="already evaluated D_test"):
        seal_row.seal_manifest(repo / "results" / "row", run_dir, "row")
    assert not (repo / "results" / "row" / "manifest.json").exists()


def test_seal_only_then_resume_commits_the_result_once(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    (repo / "fake.py").write_text(FAKE_SEARCH)
    row, run_dir = repo / "results" / "row", repo / "runs" / "row"
    command = ["--", sys.executable, str(repo / "fake.py"), "--out", str(run_dir)]
    assert seal_row.main([str(row), "--run-dir", str(run_dir), "--seal-only", *command]) == 0
    assert (row / "manifest.json").exists() and not (run_dir / "result.json").exists()
    assert seal_row.main([str(row), "--run-dir", str(run_dir), *command]) == 0  # the resumed search
    log = subprocess.run(["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True).stdout
    assert log.count("its manifest") == 1 and log.count("its result") == 1
    assert rows.record("row", row)["sealed"].startswith("**unknown** (no seal record); manifest committed")


def test_a_parked_row_resumes_on_another_machine_with_its_ledger(tmp_path, monkeypatch):
    repo = _git_repo(tmp_path / "repo")
    (repo / "fake.py").write_text(FAKE_SEARCH)
    row, here = repo / "results" / "row", repo / "runs" / "row"
    assert seal_row.main([str(row), "--run-dir", str(here), "--seal-only", "--", sys.executable,
                          str(repo / "fake.py"), "--out", str(here)]) == 0
    lines = [json.dumps({"kind": "eval", "split": "dist", "i": i}) for i in range(2)]
    (here / "evaluations.jsonl").write_text("\n".join(lines) + '\n{"kind": "ev')  # a line cut mid-write
    monkeypatch.setenv("CEL_LENS_LEDGER", str(tmp_path / "ledger_a"))
    (tmp_path / "ledger_a").mkdir()
    (tmp_path / "ledger_a" / "arithmetic.jsonl").write_text('{"kind": "read", "m": "a"}\n{"kind": "read", "m": "both"}\n')
    assert seal_row.main([str(row), "--run-dir", str(here), "--park"]) == 0
    tracked = subprocess.run(["git", "ls-files", "results/row/parked"], cwd=repo, capture_output=True, text=True).stdout
    assert tracked.split() == ["results/row/parked/evaluations.jsonl.gz", "results/row/parked/ledger/arithmetic.jsonl.gz",
                               "results/row/parked/manifest.json"]
    # another machine: no run directory, its own ledger (one line shared with the first)
    monkeypatch.setenv("CEL_LENS_LEDGER", str(tmp_path / "ledger_b"))
    (tmp_path / "ledger_b").mkdir()
    (tmp_path / "ledger_b" / "arithmetic.jsonl").write_text('{"kind": "read", "m": "both"}\n{"kind": "read", "m": "b"}')
    there = repo / "elsewhere" / "row"
    assert seal_row.main([str(row), "--run-dir", str(there), "--", sys.executable, str(repo / "fake.py"), "--out", str(there)]) == 0
    assert (there / "evaluations.jsonl").read_text().splitlines()[:2] == lines  # resumed from the parked journal
    ledger = (tmp_path / "ledger_b" / "arithmetic.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["m"] for x in ledger) == ["a", "b", "both"]  # merged once, the local cut line kept apart
    assert not (row / "parked").exists() and (row / "result.json").exists()
    tracked = subprocess.run(["git", "ls-files", "results/row"], cwd=repo, capture_output=True, text=True).stdout
    assert "parked" not in tracked and "results/row/result.json" in tracked
    status = subprocess.run(["git", "status", "--porcelain", "results"], cwd=repo, capture_output=True, text=True).stdout
    assert status == ""


def test_a_parked_row_reports_its_progress(tmp_path):
    import gzip

    row = write(tmp_path / "row", manifest())
    journal = [{"type": "event", "event": "search_started", "n_heads": 3, "n_layers": 2},
               {"type": "eval", "split": "dist", "stage": "intact", "acc": 0.25},
               *({"type": "eval", "split": "dist", "heads": h, "stage": "stage1", "acc": a}
                 for h, a in (("L0H0", 0.5), ("L0H1", 0.25), ("L1H0", 0.75), ("L0H2", 0.75), ("L1H0", 0.75)))]
    # a head journaled twice counts once; of two heads tied at the top the earlier layer leads
    (row / "parked").mkdir()
    (row / "parked" / "evaluations.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in journal).encode()))
    rec = rows.record("row", row)
    # passes: layer 0's heads run 2 layers, layer 1's 1 layer: (3 x 2 + 1) of (3 x 2 + 3 x 1) = 7 / 9
    assert rec["conclusion"] == ("not finished: parked with 4 of 6 stage-1 heads journaled (77.8 % of stage 1's layer "
                                 "passes; intact D_dist accuracy 25.0 %; leading so far: L0H2, 75.0 %)")
    assert not rec["evidence"]


def test_parking_refuses_a_run_of_another_row(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    row = write(repo / "results" / "row", manifest())
    other = write(repo / "runs" / "other", manifest(n_test=500))
    with pytest.raises(RuntimeError, match="not the run sealed"):
        seal_row.park(row, other, "row")
    assert not (row / "parked").exists()


def test_a_row_sealed_before_a_rename_is_the_same_row(tmp_path):
    """A manifest committed when the task's answer type was called ``kind`` describes the same row as
    the resumed search's, which writes ``answer_type``; a real difference still tells them apart."""
    import json

    new = {"model": {"id": "m"}, "task": {"name": "boolq", "answer_type": "multiple_choice", "metric": "acc"},
           "splits": {"test": {"n": 3}}, "options": {"k": 2}, "examples": {"test": ["a"]}}
    old = {**new, "task": {"name": "boolq", "kind": "multiple_choice", "metric": "acc"}}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    c.write_text(json.dumps({**new, "options": {"k": 3}}))
    assert seal_row.same_row(a, b) and seal_row.same_row(b, a)
    assert not seal_row.same_row(a, c)


def test_heatmap_from_the_record_alone(tmp_path):
    # the heatmap reads the typed result (Result.from_dict), as the rows do
    from cel_lens.selection.paired import enhancement_decision

    decision = enhancement_decision([1] * 25 + [0] * 25 + [1] * 950, [0] * 25 + [1] * 25 + [1] * 950)
    res = result(25, 25, scores=[[0.01, -0.02, 0.0], [0.03, 0.0, -0.01]], pool=["L1H0", "L0H0"], n_layers=2, n_heads=3,
                 heads="L1H0", dist_gain=0.03, seed=0, decision=decision,
                 subsets=[{"heads": "L1H0", "size": 1, "dist_acc": 0.43, "dist_gain": 0.03, "score_sum": 0.03},
                          {"heads": "L0H0", "size": 1, "dist_acc": 0.41, "dist_gain": 0.01, "score_sum": 0.01}])
    write(tmp_path / "rows" / "a", manifest(), res)
    write(tmp_path / "rows" / "b", manifest())  # not run: no figure
    written = rows.figures([str(tmp_path / "rows")], tmp_path / "fig", ["html"])
    assert written == [tmp_path / "fig" / "a.html"]
    assert "L1H0" in written[0].read_text()


def test_prescreen_first_pass_against_exact_on_the_kept_heads(tmp_path):
    nan = float("nan")
    res = result(5, 5, scorer="prescreen", scores=[[0.01, nan, 0.03], [nan, 0.02, 0.0]])
    folder = write(tmp_path / "a", manifest(), res)
    (folder / "prescreen.json").write_text(json.dumps({"pass": "attribution", "first_scores": [[1.0, -5, 3.0], [-4, 2.0, 0.5]]}))
    rec = rows.record("a", folder)
    assert rec["prescreen_agreement"] == {"kept": 4, "heads": 6, "spearman_kept": pytest.approx(1.0), "first_pass": "attribution"}
    assert "attribution kept 4 of 6 heads, Spearman with exact on them 1.00" in rec["scorer"]


def test_a_null_too_small_to_compare_says_so(tmp_path):
    rec = rows.record("a", write(tmp_path / "a", manifest(), result(60, 20, null_p=0.25, null_min_p=0.25)))
    assert "its null is too small to compare (smallest possible p 0.25 > α)" in rec["conclusion"]


def test_a_result_without_a_decision_record(tmp_path):
    old = {k: v for k, v in result(5, 5).items() if k != "decision"}
    rec = rows.record("a", write(tmp_path / "a", manifest(), old))
    assert rec["power"]["mde"] is None and "no decision record" in rec["conclusion"]


def test_reads_after_the_manifest_commit_are_named_but_still_unseal():
    seal = {"prior_test_reads": 3, "reads": [{"entry": "search /tmp/x", "time": "2026-12-02T08:49:47.29+00:00"}]}
    after = {"manifest.json": "abc 2026-12-02T08:37:16+00:00"}
    before = {"manifest.json": "abc 2026-12-02T09:00:00+00:00"}
    assert rows._after_manifest(seal, after) == " (every one of them after the manifest was committed)"
    assert rows._after_manifest(seal, before) == ""
    res = result(5, 5, sealed=False)
    res["seal"]["reads"] = seal["reads"]
    ok, text = rows.sealed(Result.from_dict(res), None, Path("."))
    assert not ok and text.startswith("**no**: the ledger holds 2 read(s) of these D_test rows by this model before "
                                      "the selection, the first by search /tmp/x at 2026-12-02T08:49:47")


def test_scorer_agreement_table_follows_the_rows(tmp_path):
    folder = write(tmp_path / "rows" / "exact-row", manifest(), result(25, 25))
    assert "Spearman with exact" not in rows.main([str(tmp_path / "rows")])  # no agreement.json: no table
    agreement = {"scorers": [{"scorer": "attribution", "spearman": 0.31, "recall@6": 0.5, "recall@12": 0.25,
                              "cpu_s": 145.3, "cost_vs_exact": 0.04}], "exact_stage1_s": 3632.5,
                 "exact_stage1_source": "the row's own stage1_s (wall seconds, one thread, one process)"}
    (folder / "agreement.json").write_text(json.dumps(agreement))
    table = rows.main([str(tmp_path / "rows")])
    assert table.splitlines()[-1] == ("| exact-row | attribution | 0.31 | 0.50 | 0.25 | n/a | 145 | nan | 0.040 (CPU ÷ "
                                      "seconds given: the row's own stage1_s (wall seconds, one thread, one process)) | "
                                      "3,632, the row's own timing (wall seconds) |")
    # like against like: the row's own wall seconds are divided into the scorer's wall seconds
    agreement["scorers"][0]["wall_s"] = 363.25
    (folder / "agreement.json").write_text(json.dumps(agreement))
    assert "| 145 | 363 | 0.100 (wall ÷ exact's wall, one thread each) |" in rows.main([str(tmp_path / "rows")])
    # a resumed row's ratio divides by a scan measured elsewhere and scaled: the table says so
    agreement.update(exact_stage1_s=22653.4, exact_scan_gflop=2205425.0, exact_stage1_source="RESULTS.md, scaled")
    (folder / "agreement.json").write_text(json.dumps(agreement))
    assert rows.main([str(tmp_path / "rows")]).splitlines()[-1].endswith(
        "| 0.006 (CPU ÷ exact's CPU extrapolated by FLOP count) | 22,653, extrapolated: a scan measured elsewhere, "
        "scaled by FLOP count |")
    agreement.update(exact_stage1_s=0.0, exact_scan_gflop=None)
    agreement["scorers"][0]["cost_vs_exact"] = None
    (folder / "agreement.json").write_text(json.dumps(agreement))
    assert rows.main([str(tmp_path / "rows")]).splitlines()[-1].endswith("| n/a | not timed (no ratio) |")


def test_scorer_agreement_compares_over_every_head():
    import torch

    agree = load_script("scorer_agreement")
    exact = torch.tensor([[0.03, 0.02, 0.0], [-0.01, 0.01, 0.0]], dtype=torch.float64)
    same = agree.compare("same", exact.clone(), exact, cpu=10.0, wall=12.0, exact_s=100.0)
    assert same["spearman"] == pytest.approx(1.0) and same["recall@6"] == 1.0 and same["cost_vs_exact"] == 0.1
    flipped = agree.compare("flipped", -exact, exact, cpu=1.0, wall=1.0, exact_s=0.0)
    assert flipped["spearman"] < 0 and flipped["cost_vs_exact"] is None


def test_minutes_say_whether_they_cover_the_whole_search():
    whole = rows.search_minutes({"stage1_s": 60.0, "stage2_s": 30.0, "test_s": 30.0})
    assert whole == {"minutes": 2.0, "minutes_cover": "the whole search", "resumed_sets": 0}
    # a resumed search timed only its last process; the count of resumed evaluations is not seconds
    last = rows.search_minutes({"resumed_sets": 200.0, "stage1_s": 60.0, "stage2_s": 60.0, "test_s": 0.0})
    assert last == {"minutes": 2.0, "minutes_cover": "the last process", "resumed_sets": 200}


def test_scorer_agreement_takes_no_resumed_rows_seconds_for_exacts_cost():
    agree = load_script("scorer_agreement")
    assert agree.exact_seconds({"stage1_s": 5880.0}, None, None)[0] == 5880.0
    seconds, source = agree.exact_seconds({"stage1_s": 600.0, "resumed_sets": 120.0}, None, None)
    assert seconds == 0.0 and source.startswith("not timed: the row's search resumed 120 evaluations")
    assert agree.exact_seconds({"resumed_sets": 1.0}, 21190.0, "a scan") == (21190.0, "a scan")
    with pytest.raises(SystemExit, match="needs --exact-source"):
        agree.exact_seconds({}, 10.0, None)
    with pytest.raises(SystemExit, match="needs --exact-s or --exact-scaled"):
        agree.exact_seconds({}, None, "a scan")
    with pytest.raises(SystemExit, match="not both"):
        agree.check_exact_options(10.0, "a scan", [4238.3, 412631.0])
    with pytest.raises(SystemExit, match="--exact-scaled needs --exact-source"):
        agree.check_exact_options(None, None, [4238.3, 412631.0])
    with pytest.raises(SystemExit, match="positive"):
        agree.check_exact_options(None, "a scan", [4238.3, 0.0])
    agree.check_exact_options(None, "a scan", [4238.3, 412631.0])


def test_scorer_agreement_refuses_half_an_exact_figure_before_loading_anything(tmp_path):
    agree = load_script("scorer_agreement")
    with pytest.raises(SystemExit, match="needs --exact-source"):  # no manifest here: it stops before reading one
        agree.main([str(tmp_path / "no-row"), "--exact-s", "100"])


def test_stability_is_not_estimated_when_most_resamples_needed_unevaluated_subsets(tmp_path):
    """A range whose lower end is what was certain says nothing (the sealed BoolQ row: 906 of 1,000
    resamples unknown): no share is given then; with a few unknown, the share is of the known ones."""
    stab = {"method": "reselect", "selected_frequency": 0.059, "upper": 0.664, "unknown": 605, "incomplete": 0.906,
            "n_resamples": 1000, "wins": []}
    write(tmp_path / "rows" / "a", manifest(), result(60, 20, selection_stability=stab))
    write(tmp_path / "rows" / "b", manifest(), result(60, 20))
    write(tmp_path / "rows" / "c", manifest(), result(60, 20, selection_stability={**stab, "incomplete": 0.2, "unknown": 100,
                                                                                   "selected_frequency": 0.4}))
    table = rows.main([str(tmp_path / "rows")])
    assert "| not estimated (906 of 1000 resamples needed a subset never evaluated) |" in table
    assert "| 60 % |" in table and "| 50 % of the 800 of 1000 resamples whose winner is known |" in table
    assert "between" not in table
    data = json.loads(rows.main([str(tmp_path / "rows")], as_json=True))
    assert data[0]["stability"] == {"selected_frequency": 0.059, "upper": 0.664, "unknown": 605, "incomplete": 0.906,
                                    "n_resamples": 1000}


def test_scan_count_of_a_split_by_hand(tiny_model):
    """The count that scales a measured scan to a row is the intact pass plus every head resumed at
    its layer, over the prompts as the evaluator encodes them: for a one-example split of T tokens
    with one target token, the benchmarks' per-piece costs summed by hand."""
    from benchmarks.limit import Shape, head_flops, intact_flops
    from cel_lens.evaluation import encode_pair
    from cel_lens.tasks import Example, Split

    agree = load_script("scorer_agreement")
    split = Split("dist", (Example("a/0", "12 + 30 =", target=" 42"),), task="arithmetic", answer_type="exact_match")
    ctx, cont = encode_pair(tiny_model, "12 + 30 =", " 42")
    shape, T, scored = Shape.from_hooked_config(tiny_model.cfg), len(ctx) + len(cont) - 1, len(cont)
    by_hand = intact_flops(shape, T, scored) + shape.n_heads * sum(head_flops(shape, layer, T, scored)
                                                                   for layer in range(shape.n_layers))
    assert agree.scan_gflop(tiny_model, split) == pytest.approx(by_hand / 1e9)


def test_the_code_version_column():
    """A manifest that records its code says which; an older row says how much of the statistics'
    code changed between its seal and its result."""
    man = {"versions": {"cel_lens_code": {"commit": "0123456789abcdef" * 2 + "01234567", "dirty": True,
                                          "source_sha256": "f" * 64}}}
    assert rows.code_text(man, None) == "commit 01234567 (with uncommitted changes)"
    assert rows.code_text({"versions": {"cel_lens_code": {"source_sha256": "ab" * 32}}}, 3) == "source sha256 abababababab"
    assert rows.code_text({}, 7) == "not recorded; 7 commit(s) to selection, stats, scoring, evaluation between seal and result"
    assert rows.code_text({}, None) == "not recorded"

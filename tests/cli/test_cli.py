"""The ``cel-lens`` command end to end: help texts, one-line errors, search/evaluate on a tiny
checkpoint and the real Arithmetic and BoolQ files, and resuming a search killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import argparse

import pytest

from cel_lens.cli import COMMANDS, build_parser, main


@pytest.fixture(scope="module")
def llama_dir(tiny_checkpoints) -> str:
    return str(tiny_checkpoints["llama"])


def test_every_subcommand_has_help(capsys):
    with pytest.raises(SystemExit) as top:
        main(["--help"])
    assert top.value.code == 0
    for name in COMMANDS:
        with pytest.raises(SystemExit) as sub:
            main([name, "--help"])
        assert sub.value.code == 0, name
        assert "usage: cel-lens " + name in capsys.readouterr().out


def _parsers(parser: argparse.ArgumentParser, name: str = "cel-lens") -> list[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every subcommand parser below it."""
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += _parsers(sub, f"{name} {sub_name}")
    return found


def test_help_shows_each_default_once():
    """``--help`` used to say "(default: the paper's size) (default: None)": a text naming its default
    and argparse's appended one; and "(default: None)" / "(default: False)" say nothing."""
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                continue
            text = parser.formatter_class(prog=name)._get_help_string(action) % vars(action)
            assert text.lower().count("default") <= 1, f"{name} {action.option_strings}: {text}"
            assert "(default: None)" not in text and "(default: False)" not in text, f"{name} {action.option_strings}"
    search = dict(_parsers(build_parser()))["cel-lens search"].format_help()
    assert "(default: 8)" in " ".join(search.split())  # a real value is still shown


def test_errors_are_one_line_with_exit_code_2(capsys, data_dir):
    code = main(["search", "--model", "/no/such/checkpoint", "--task", "arithmetic", "--data-dir", str(data_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("cel-lens: error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    code = main(["evaluate", "--model", "x", "--task", "no-such-task", "--data-dir", str(data_dir)])
    assert code == 2 and "unknown task" in capsys.readouterr().err


def _search_args(model: str, data_dir: Path, out: Path, task: str = "arithmetic") -> list[str]:
    return [
        "search", "--model", model, "--loader", "hooked", "--task", task, "--data-dir", str(data_dir),
        "--n-dist", "24", "--n-test", "24", "--k", "2", "--pool", "4", "--n-null", "5",
        "--out", str(out), "--no-progress", "--json",
    ]


@pytest.mark.parametrize("task", ["arithmetic", "boolq"])
def test_search_json_end_to_end(capsys, llama_dir, data_dir, tmp_path, task):
    assert main(_search_args(llama_dir, data_dir, tmp_path / "run", task)) == 0
    res = json.loads(capsys.readouterr().out)
    for key in ("heads", "dist_acc_intact", "dist_acc_ablated", "test_acc_intact", "test_acc_ablated",
                "gain", "ci_low", "ci_high", "p_value", "null_gains", "scores"):
        assert key in res, key
    assert res["n_dist"] == 24 and res["n_test"] == 24 and len(res["null_gains"]) == 5
    assert len(res["scores"]) == 3 and len(res["scores"][0]) == 4
    assert (tmp_path / "run" / "result.json").is_file() and (tmp_path / "run" / "manifest.json").is_file()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["task"]["name"] == task and manifest["options"]["pool_size"] == 4


def test_evaluate_of_the_test_split_needs_no_train_file(capsys, llama_dir, data_dir, tmp_path):
    """``evaluate --task boolq`` read BoolQ's train file (D_dist's source) to evaluate D_test."""
    root = tmp_path / "data"
    (root / "boolq").mkdir(parents=True)
    (root / "boolq" / "dev.jsonl").symlink_to((data_dir / "boolq" / "dev.jsonl").resolve())
    code = main(["evaluate", "--model", llama_dir, "--loader", "hooked", "--task", "boolq", "--data-dir", str(root),
                 "--n-test", "10", "--json", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["n"] == 10


def _with_chat_template(src: str, dest: Path) -> str:
    """A copy of a checkpoint whose tokenizer has a chat template (an Instruct model's, in small)."""
    import shutil

    shutil.copytree(src, dest)
    config = dest / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["chat_template"] = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"
    config.write_text(json.dumps(data))
    return str(dest)


def test_chat_template_flag_reaches_the_evaluation_and_the_run(capsys, llama_dir, data_dir, tmp_path):
    model = _with_chat_template(llama_dir, tmp_path / "instruct")
    args = ["--model", model, "--loader", "hooked", "--task", "arithmetic", "--data-dir", str(data_dir), "--no-progress"]
    assert main(["evaluate", *args, "--n-test", "6", "--json", "--chat-template"]) == 0
    assert json.loads(capsys.readouterr().out)["chat_template"] is True
    assert main(["evaluate", *args, "--n-test", "6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chat_template"] is False
    out = tmp_path / "run"
    assert main(["search", *args, "--n-dist", "6", "--n-test", "6", "--k", "1", "--pool", "2", "--n-null", "2",
                 "--out", str(out), "--json", "--chat-template"]) == 0
    assert json.loads((out / "manifest.json").read_text())["task"]["options"]["chat_template"] is True


@pytest.mark.parametrize("rule", ["always", "never"])
def test_bos_flag_reaches_the_model_and_the_run(capsys, llama_dir, data_dir, tmp_path, rule):
    """``--bos`` overrides the tokenizer's own rule; the manifest records it with the model, so runs
    with different rules never share a directory."""
    out = tmp_path / "run"
    args = ["--model", llama_dir, "--loader", "hooked", "--task", "arithmetic", "--data-dir", str(data_dir),
            "--no-progress", "--n-dist", "6", "--n-test", "6", "--k", "1", "--pool", "2", "--n-null", "2"]
    assert main(["search", *args, "--out", str(out), "--json", "--bos", rule]) == 0, capsys.readouterr().err
    bos = json.loads((out / "manifest.json").read_text())["model"]["bos"]
    assert bos["rule"] == rule and bos["prepends_bos"] is (rule == "always")
    assert main(["search", *args, "--out", str(out), "--json", "--bos", "always" if rule == "never" else "never"]) == 2
    assert "bos" in capsys.readouterr().err


def test_max_new_tokens_flag_sets_the_generation_budget(data_dir):
    from cel_lens.cli.common import load_task_from_args

    args = build_parser().parse_args(["evaluate", "--model", "x", "--task", "mbpp", "--data-dir", str(data_dir),
                                      "--n-test", "3", "--max-new-tokens", "16"])
    assert load_task_from_args(args, splits=("test",)).test.max_new_tokens == 16


def test_evaluate_reports_gain_ci_and_p(capsys, llama_dir, data_dir):
    code = main(["evaluate", "--model", llama_dir, "--loader", "hooked", "--task", "boolq", "--data-dir",
                 str(data_dir), "--n-dist", "8", "--n-test", "20", "--heads", "L0H1,L2H3", "--json", "--no-progress"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 20 and out["ablated"]["heads"] == "L0H1+L2H3"
    assert out["gain"] == pytest.approx(out["ablated"]["accuracy"] - out["intact"]["accuracy"])
    assert 0.0 <= out["p_value"] <= 1.0 and out["gain_ci"][0] <= out["gain"] <= out["gain_ci"][1]


@pytest.mark.slow
def test_search_resumes_after_sigkill(llama_dir, data_dir, tmp_path):
    """Kill ``cel-lens search`` with SIGKILL mid-run, run the same command again: it resumes without
    re-evaluating recorded head sets and reaches the result of an uninterrupted run."""
    args = _search_args(llama_dir, data_dir, tmp_path / "killed")
    args[args.index("--pool") + 1] = "6"  # 6 + 15 subsets: long enough to be killed in stage 2
    cmd = [sys.executable, "-m", "cel_lens.cli", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "killed" / "evaluations.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and sum(1 for line in log.read_text().splitlines() if '"eval"' in line) >= 14:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the search finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = [json.loads(x) for x in log.read_text().splitlines() if x.strip().endswith("}")]
    recorded = {(x["split"], x["heads"]) for x in before if x.get("type") == "eval"}
    assert recorded and not (tmp_path / "killed" / "result.json").exists()

    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    evals = [(x["split"], x["heads"]) for x in lines if x.get("type") == "eval"]
    assert len(evals) == len(set(evals)), "a head set was evaluated twice"
    assert recorded <= set(evals)

    fresh_args = list(args)
    fresh_args[fresh_args.index("--out") + 1] = str(tmp_path / "fresh")
    fresh = subprocess.run([sys.executable, "-m", "cel_lens.cli", *fresh_args], env=env, capture_output=True,
                           text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    a, b = json.loads(resumed.stdout), json.loads(fresh.stdout)
    a.pop("timings"), b.pop("timings")
    assert a == b


@pytest.mark.parametrize("command", ["search", "evaluate"])
def test_the_model_is_checked_before_the_task(command, capsys, tmp_path):
    """A hub model that is not cached (offline here) fails first, in one line, before the task's
    own data error (an empty data directory) and before anything loads."""
    start = time.perf_counter()
    code = main([command, "--model", "someone/not-downloaded", "--task", "arithmetic", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "someone/not-downloaded is not in the local Hugging Face cache" in err
    assert time.perf_counter() - start < 30


def test_an_unreachable_hub_turns_the_task_offline(monkeypatch):
    """No network and no offline mode: one bounded probe, then offline mode for this process, so a
    task read from the hub fails at once instead of after the hub client's five retries."""
    import argparse

    from cel_lens.cli.common import check_names_first
    from cel_lens.model import hub

    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    check_names_first(argparse.Namespace(model="organism", task="arithmetic", data_dir="somewhere"))
    assert "HF_DATASETS_OFFLINE" not in os.environ  # local data: the hub is not asked
    check_names_first(argparse.Namespace(model="organism", task="arithmetic", data_dir=None))
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_quick_preset_and_plan_print_the_cost_and_write_nothing(capsys, tmp_path, monkeypatch):
    from cel_lens.config import QUICK

    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "organism", "--task", "organism_a", "--no-progress", "--plan", "--json"]
    assert main([*base, "--quick"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert list(tmp_path.iterdir()) == []  # a plan writes no run directory
    stages = {s["name"]: s for s in plan["stages"]}
    assert stages["intact"]["examples"] == QUICK["n_dist"] and stages["test"]["examples"] == QUICK["n_test"]
    assert "subsets of a pool of 4, up to 2 heads" in stages["stage 2"]["note"]  # k 2; pool 6 > the 4 heads
    assert plan["seconds_per_unit"] > 0 and plan["seconds"] > 0
    assert main([*base, "--quick", "--k", "1", "--n-dist", "30"]) == 0  # explicit options win over the preset
    plan = json.loads(capsys.readouterr().out)
    assert plan["stages"][0]["examples"] == 30 and "up to 1 head" in plan["stages"][2]["note"]
    assert main(base[:-1]) == 0  # the defaults, as text
    out = capsys.readouterr().out
    assert "stage 1 (exact)  4 head sets x 2,000 dist" in out and "estimate from the first timed batch" in out


def test_quick_takes_the_cuts_its_budget_needs_and_records_them(capsys, tmp_path, monkeypatch):
    """With a budget no plan meets, ``--quick`` takes every cut that lowers its estimate, says so on
    stderr, plans and runs the cut search, and writes what it gave up beside the run; an option
    given explicitly is never cut. On the organism (4 heads) the pre-screen (an attribution pass of
    3 units, then the pool's 4 heads) costs more than exact stage 1's 4 heads, the pool already
    holds every head and the null is capped at 5 sets: none of those is said to be given up."""
    import cel_lens.cli.search as search_cli
    from cel_lens.selection.plan_quick import QUICK_CUTS

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(search_cli, "QUICK_SEARCH_S", 1e-9)
    base = ["search", "--model", "organism", "--task", "organism_a", "--no-progress", "--quick"]
    assert main([*base, "--plan", "--json"]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    sizes = [c.gives_up for c in QUICK_CUTS if set(c.changes) <= {"n_dist", "n_test"}]
    others = [c.gives_up for c in QUICK_CUTS if not set(c.changes) <= {"n_dist", "n_test"}]
    assert "still does not fit" in captured.err and all(text in captured.err for text in sizes)
    assert not any(text in captured.err for text in others)
    stages = {s["name"]: s for s in plan["stages"]}
    assert stages["intact"]["examples"] == 50 and stages["test"]["examples"] == 50
    assert "stage 1 (exact)" in stages
    assert main([*base, "--plan", "--json", "--n-dist", "150"]) == 0  # explicit: not cut
    assert json.loads(capsys.readouterr().out)["stages"][0]["examples"] == 150
    assert main([*base, "--out", "run", "--n-null", "3", "--n-boot", "50"]) == 0
    record = json.loads((tmp_path / "run" / search_cli.QUICK_RECORD).read_text())
    assert record["changes"] == {"n_dist": 50, "n_test": 50} and record["fits"] is False
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["options"]["scorer"] == "exact" and manifest["splits"]["dist"]["n"] == 50
    assert manifest["options"]["n_null"] == 3 and manifest["options"]["pool_size"] == 6

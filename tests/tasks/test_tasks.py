"""Tasks: paper-sized splits from the offline files, lm-eval prompt formats, seeds, disjointness,
actionable errors, checksums and the MBPP judge.

Real data: ``../shared/data`` relative to the repo root (Arithmetic, MBPP, BoolQ validation);
HellaSwag and BoolQ train come from the shipped synthetic fixtures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import types
from collections import Counter
from pathlib import Path

import pytest

from cel_lens.tasks import (
    DataNotFoundError,
    Example,
    SplitOverlapError,
    Task,
    available_tasks,
    fixture_data_dir,
    load_task,
    task_info,
)
from cel_lens.tasks import boolq, hellaswag, mbpp
from cel_lens.tasks.base import drop_same_text
from cel_lens.tasks.io import FIXTURES_DIR, OFFICIAL_SHA256, check_unique_ids, sha256_file
from cel_lens.tasks.arithmetic import CONFIGS, format_context

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (SHARED / "README.md").is_file(), reason=f"real task data not found at {SHARED} (../shared/data)"
)
pytestmark = pytest.mark.filterwarnings("ignore:.*test fixture.*:UserWarning")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """../shared/data merged with the fixtures (HellaSwag, BoolQ train)."""
    if not SHARED.is_dir():
        pytest.skip(f"real task data not found at {SHARED}")
    return fixture_data_dir(SHARED, dest=tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def arith(data_dir: Path) -> Task:
    return load_task("arithmetic", data_dir=data_dir)


@pytest.fixture(scope="module")
def mbpp_task(data_dir: Path) -> Task:
    return load_task("mbpp", data_dir=data_dir)


def _raw_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------
# registry and CLI
# ------------------------------------------------------------------------------------------------
def test_registry_lists_the_four_tasks_with_paper_defaults() -> None:
    assert {"arithmetic", "mbpp", "hellaswag", "boolq"} <= set(available_tasks())
    sizes = {n: (task_info(n)["n_dist"], task_info(n)["n_test"]) for n in ("arithmetic", "mbpp", "hellaswag", "boolq")}
    # MBPP: the paper's 374 train problems but 3 worded like a test problem
    assert sizes == {"arithmetic": (2000, 1000), "mbpp": (361, 500), "hellaswag": (2000, 10042), "boolq": (2000, 3270)}
    assert task_info("hellaswag")["metric"] == "acc_norm" and task_info("mbpp")["metric"] == "pass@1"


def test_cli_tasks_lists_sources_and_local_files(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cel_lens.cli import main

    assert main(["tasks", "--json", "--data-dir", str(SHARED)]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["task"]: r for r in out["tasks"]}
    assert rows["boolq"]["hub"] == "aps/super_glue (boolq)" and rows["boolq"]["answer_type"] == "multiple_choice"
    assert rows["boolq"]["local"] == {"boolq/train.jsonl": "missing", "boolq/dev.jsonl": "found"}
    assert set(rows["arithmetic"]["local"].values()) == {"found"}
    assert main(["tasks", "--data-dir", str(data_dir)]) == 0
    table = capsys.readouterr().out
    assert "hellaswag/hellaswag_val.jsonl (fixture)" in table and "mbpp/mbpp.jsonl (found)" in table


# ------------------------------------------------------------------------------------------------
# Arithmetic
# ------------------------------------------------------------------------------------------------
@needs_data
def test_arithmetic_paper_sizes_every_config_and_rows_match_ids(arith: Task) -> None:
    assert (len(arith.dist), len(arith.test)) == (2000, 1000)
    assert arith.answer_type == "exact_match" and arith.test.answer_type == "exact_match"
    for split in (arith.dist, arith.test):
        per_config = Counter(e.meta["config"] for e in split)
        assert set(per_config) == set(CONFIGS)  # each of the 10 configs is represented
    assert not {e.content_hash for e in arith.dist} & {e.content_hash for e in arith.test}
    raw = {cfg: _raw_rows(SHARED / "arithmetic" / f) for cfg, f in CONFIGS.items()}
    for e in [*arith.dist, *arith.test]:
        _, cfg, row = e.id.split("/")
        assert cfg == e.meta["config"]
        assert e.target == raw[cfg][int(row)]["completion"] and e.target.startswith(" ")
        assert e.prompt.startswith("Question: What is ") and e.prompt.endswith("?\nAnswer:")
    assert all(s["official"] is True and s["fixture"] is False for s in arith.options["sources"])


@needs_data
def test_arithmetic_readme_rows_give_lm_eval_prompts(data_dir: Path) -> None:
    # the README's rows, by hand
    assert format_context("\n\nQ: What is 98 plus 45?\n\nA:") == "Question: What is 98 plus 45?\nAnswer:"
    assert format_context("\n\nQ: What is (9 + 8) * 2?\n\nA:") == "Question: What is (9 + 8) * 2?\nAnswer:"
    rows = _raw_rows(SHARED / "arithmetic" / "two_digit_addition.jsonl")
    i = next(i for i, r in enumerate(rows) if r["context"] == "\n\nQ: What is 98 plus 45?\n\nA:")
    big = load_task("arithmetic", n_dist=19991, n_test=0, data_dir=data_dir)  # the whole distinct pool
    by_id = {e.id: e for e in big.dist}
    ex = by_id[f"arithmetic/2da/{i}"]
    assert (ex.prompt, ex.target) == ("Question: What is 98 plus 45?\nAnswer:", " 143")
    first_1dc = by_id["arithmetic/1dc/0"]
    assert (first_1dc.prompt, first_1dc.target) == ("Question: What is (9 + 8) * 2?\nAnswer:", " 34")
    assert by_id["arithmetic/1dc/1"].target == " -6"


@needs_data
def test_arithmetic_seeds_and_sizes(data_dir: Path, arith: Task) -> None:
    again = load_task("arithmetic", data_dir=data_dir, seed=0)
    assert again.dist.ids == arith.dist.ids and again.test.ids == arith.test.ids
    assert again.dist.content_hash == arith.dist.content_hash
    other = load_task("arithmetic", data_dir=data_dir, seed=1)
    assert other.dist.ids != arith.dist.ids and set(other.test.ids) != set(arith.test.ids)
    small = load_task("arithmetic", n_dist=40, n_test=30, data_dir=data_dir, configs=("2da", "1dc"))
    assert (len(small.dist), len(small.test)) == (40, 30)
    assert {e.meta["config"] for e in [*small.dist, *small.test]} <= {"2da", "1dc"}
    with pytest.raises(ValueError, match=r"asked for 25000 .* has 19991"):
        load_task("arithmetic", n_dist=25000, data_dir=data_dir)
    with pytest.raises(ValueError, match="unknown arithmetic config"):
        load_task("arithmetic", data_dir=data_dir, configs=("7dz",))
    with pytest.raises(ValueError, match="arithmetic: unknown option.*shots"):
        load_task("arithmetic", data_dir=data_dir, shots=5)


# ------------------------------------------------------------------------------------------------
# MBPP
# ------------------------------------------------------------------------------------------------
# lm-eval's mbpp prompt for task_id 11, written out by hand: three shots (task_id 2, 3, 4; their
# code keeps MBPP's \r\n line ends and trailing spaces) each closed by "\n[DONE]" + "\n\n".
EXPECTED_MBPP_11 = (
    "You are an expert Python programmer, and here is your task: Write a function to find the similar "
    "elements from the given two tuple lists. Your code should pass these tests:\n\n"
    "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
    "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)\n"
    "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)\n"
    "[BEGIN]\n"
    "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) "
    "\n[DONE]\n\n"
    "You are an expert Python programmer, and here is your task: Write a python function to identify "
    "non-prime numbers. Your code should pass these tests:\n\n"
    "assert is_not_prime(2) == False\nassert is_not_prime(10) == True\nassert is_not_prime(35) == True\n"
    "[BEGIN]\n"
    "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in range(2,int(math.sqrt(n)) + 1):\r\n"
    "        if n % i == 0:\r\n            result = True\r\n    return result"
    "\n[DONE]\n\n"
    "You are an expert Python programmer, and here is your task: Write a function to find the largest "
    "integers from a given list of numbers using heap queue algorithm. Your code should pass these tests:\n\n"
    "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] \n"
    "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] \n"
    "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, 58, 35]\n"
    "[BEGIN]\n"
    "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = hq.nlargest(n, nums)\r\n"
    "  return largest_nums"
    "\n[DONE]\n\n"
    "You are an expert Python programmer, and here is your task: Write a python function to remove first "
    "and last occurrence of a given character from the string. Your code should pass these tests:\n\n"
    'assert remove_Occ("hello","l") == "heo"\n'
    'assert remove_Occ("abcda","a") == "bcd"\n'
    'assert remove_Occ("PHP","P") == "H"\n'
    "[BEGIN]\n"
)


@needs_data
def test_mbpp_splits_are_the_official_task_id_ranges(mbpp_task: Task) -> None:
    assert (len(mbpp_task.dist), len(mbpp_task.test)) == (361, 500)
    near = {606, 683, 731, 658, 965, 952, 673, 777, 837, 945}  # near-paraphrases of test problems
    assert {e.meta["task_id"] for e in mbpp_task.dist} == set(range(601, 975)) - {602, 704, 872} - near
    assert {e.meta["task_id"] for e in mbpp_task.test} == set(range(11, 511))
    assert mbpp_task.answer_type == "generation" and mbpp_task.metric == "pass@1"
    assert mbpp_task.judge is mbpp.judge and mbpp_task.test.judge is mbpp.judge
    assert mbpp_task.options["stop"] == ["[DONE]"] and mbpp_task.options["max_new_tokens"] == 256
    assert mbpp_task.options["sources"][0]["official"] is True


@needs_data
def test_mbpp_prompt_equals_hand_written_three_shot(mbpp_task: Task) -> None:
    ex = next(e for e in mbpp_task.test if e.id == "mbpp/11")
    assert ex.prompt == EXPECTED_MBPP_11
    assert ex.meta["test_list"] == (
        'assert remove_Occ("hello","l") == "heo"',
        'assert remove_Occ("abcda","a") == "bcd"',
        'assert remove_Occ("PHP","P") == "H"',
    )
    assert ex.meta["challenge_test_list"][0] == 'assert remove_Occ("hellolloll","l") == "helollol"'
    assert mbpp_task.test.stop_strings(ex) == ("[DONE]",) and ex.target is None
    # every prompt shares the same 3-shot prefix and ends with its own problem
    prefix = EXPECTED_MBPP_11[: EXPECTED_MBPP_11.rindex("You are an expert")]
    assert all(e.prompt.startswith(prefix) and e.prompt.endswith("\n[BEGIN]\n") for e in mbpp_task.dist)


@needs_data
def test_mbpp_seeded_subsamples(data_dir: Path) -> None:
    a = load_task("mbpp", n_dist=20, n_test=10, seed=3, data_dir=data_dir)
    b = load_task("mbpp", n_dist=20, n_test=10, seed=3, data_dir=data_dir)
    c = load_task("mbpp", n_dist=20, n_test=10, seed=4, data_dir=data_dir)
    assert a.dist.ids == b.dist.ids and a.test.ids == b.test.ids and a.dist.ids != c.dist.ids
    assert all(601 <= e.meta["task_id"] <= 974 for e in a.dist) and all(11 <= e.meta["task_id"] <= 510 for e in a.test)
    with pytest.raises(ValueError, match="has 361 after leaving out 3 worded like a test problem and 10 near-paraphrases"):
        load_task("mbpp", n_dist=362, data_dir=data_dir)


def test_extract_code() -> None:
    assert mbpp.extract_code("def f():\n    return 1\n[DONE]\nprint('junk')") == "def f():\n    return 1\n"
    fenced = "Here you go:\n```python\ndef f():\n    return 2\n```\nDone.[DONE] more"
    assert mbpp.extract_code(fenced) == "def f():\n    return 2\n"
    assert mbpp.extract_code("x = 1") == "x = 1"


def _example(tests: tuple[str, ...], setup: str = "") -> Example:
    return Example(id="mbpp/x", prompt="p", meta={"test_list": tests, "test_setup_code": setup})


def test_mbpp_judges_build_the_program_their_way(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    mains = []

    def run(program: str, *, tests: list[str], setup: str = "", entry_points: tuple = (),
            main: bool = True) -> types.SimpleNamespace:
        calls.append((program, setup, tests, entry_points))
        mains.append(main)
        scope: dict = {}
        try:
            exec("\n".join([program, setup, *tests]), scope)  # trusted, hand-written code only
            return types.SimpleNamespace(passed=True)
        except (AssertionError, SyntaxError, NameError):
            return types.SimpleNamespace(passed=False)

    fake = types.ModuleType("cel_lens.sandbox")
    fake.run = run
    monkeypatch.setitem(sys.modules, "cel_lens.sandbox", fake)
    import cel_lens

    monkeypatch.setattr(cel_lens, "sandbox", fake, raising=False)
    ex = _example(("assert add(2, 3) == 5",), setup="import math")
    # lm-eval: the completion up to [DONE] is the program; no setup
    assert mbpp.judge(ex, "def add(a, b):\n    return a + b\n[DONE]\nthis is not python")
    assert calls[-1] == ("def add(a, b):\n    return a + b\n", "", ["assert add(2, 3) == 5"], ())
    assert not mbpp.judge(ex, "def add(a, b):\n    return a * b\n[DONE]")
    assert not mbpp.judge(ex, "```python\ndef add(a, b):\n    return a + b\n```\n[DONE]")  # no fence extraction
    # fenced: the first fenced block, then the setup
    assert mbpp.judge_fenced(ex, "Sure:\n```python\ndef add(a, b):\n    return a + b\n```\n[DONE]")
    assert calls[-1] == ("def add(a, b):\n    return a + b\n", "import math", ["assert add(2, 3) == 5"], ())
    # a reference solution that defines a built-in name: the tests mean the program's function
    ref = Example(id="mbpp/126", prompt="p", meta={"test_list": ("assert sum(10, 15) == 6",),
                                                   "reference_code": "def sum(a, b):\n    return 6"})
    mbpp.judge(ref, "def sum(a, b):\n    return 6\n")
    assert calls[-1][3] == ("sum",)
    assert set(mains) == {False}  # no __main__ block runs, as in lm-eval's exec(program, {})


def test_mbpp_judge_option(data_dir: Path) -> None:
    default = load_task("mbpp", n_dist=2, n_test=2, data_dir=data_dir)
    assert default.judge is mbpp.judge and default.options["judge"] == "lm-eval"
    fenced = load_task("mbpp", n_dist=2, n_test=2, data_dir=data_dir, judge="fenced")
    assert fenced.judge is mbpp.judge_fenced and fenced.test.judge is mbpp.judge_fenced
    assert fenced.options["judge"] == "fenced"
    with pytest.raises(ValueError, match="unknown judge 'humaneval'.*'lm-eval', 'fenced'") as err:
        load_task("mbpp", data_dir=data_dir, judge="humaneval")
    assert "\n" not in str(err.value)


@needs_data
def test_mbpp_judge_runs_reference_and_wrong_code_in_the_real_sandbox(
    mbpp_task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cel_lens.sandbox", reason="cel_lens.sandbox not available")
    monkeypatch.setenv("CEL_LENS_ALLOW_CODE_EXECUTION", "1")
    ex = next(e for e in mbpp_task.test if e.id == "mbpp/11")
    assert mbpp.judge(ex, ex.meta["reference_code"] + "\n[DONE]")
    assert not mbpp.judge(ex, "def remove_Occ(s, ch):\n    return s\n[DONE]")


@needs_data
def test_mbpp_judges_differ_on_fences_and_setup_code(mbpp_task: Task, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cel_lens.sandbox", reason="cel_lens.sandbox not available")
    monkeypatch.setenv("CEL_LENS_ALLOW_CODE_EXECUTION", "1")
    by_id = {e.id: e for e in [*mbpp_task.test, *mbpp_task.dist]}
    ex11 = by_id["mbpp/11"]
    fenced_11 = "Here is the function:\n```python\n" + ex11.meta["reference_code"] + "\n```\n[DONE]"
    assert not mbpp.judge(ex11, fenced_11)  # lm-eval runs the fence as Python: a SyntaxError
    assert mbpp.judge_fenced(ex11, fenced_11)
    ex367 = by_id["mbpp/367"]  # its asserts use trees that only test_setup_code builds
    assert ex367.meta["test_setup_code"]
    ref_367 = ex367.meta["reference_code"] + "\n[DONE]"
    assert mbpp.judge_fenced(ex367, ref_367)
    assert not mbpp.judge(ex367, ref_367)


def test_mbpp_train_problems_worded_like_a_test_problem_are_left_out_and_recorded(tmp_path: Path) -> None:
    def row(task_id: int, text: str, arg: int = 1) -> dict:
        return {"task_id": task_id, "text": text, "code": "pass", "test_setup_code": "",
                "test_list": [f"assert f({arg}) == {arg}"] * 3, "challenge_test_list": []}

    rows = [row(t, f"Shot {t}.") for t in (2, 3, 4)] + [row(11, "Same problem."), row(12, "Other problem.")]
    # 601 repeats 11 exactly; 602 repeats 12's text with other tests and other spacing and case
    rows += [row(601, "Same problem."), row(602, "other  PROBLEM.", arg=2), row(603, "New problem.")]
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "mbpp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = load_task("mbpp", data_dir=tmp_path)
    assert t.dist.ids == ["mbpp/603"] and sorted(t.test.ids) == ["mbpp/11", "mbpp/12"]
    dedup = t.options["deduplication"]
    assert dedup["removed"] == 2 and dedup["pairs"] == [["mbpp/601", "mbpp/11"], ["mbpp/602", "mbpp/12"]]
    with pytest.raises(ValueError, match="has 1 after leaving out 2 worded like a test problem"):
        load_task("mbpp", n_dist=2, data_dir=tmp_path)


@needs_data
def test_mbpp_real_near_duplicates_are_the_three_known_twins(mbpp_task: Task) -> None:
    pairs = mbpp_task.options["deduplication"]["pairs"]
    assert sorted(map(tuple, pairs)) == [("mbpp/602", "mbpp/217"), ("mbpp/704", "mbpp/248"), ("mbpp/872", "mbpp/216")]
    texts = {e.dedup_key for e in mbpp_task.test}
    assert not any(e.dedup_key in texts for e in mbpp_task.dist)


@needs_data
def test_mbpp_near_paraphrases_are_dropped_and_recorded(mbpp_task: Task) -> None:
    from cel_lens.tasks.paraphrase import jaccard, tokens

    near = mbpp_task.options["deduplication"]["near_paraphrases"]
    pairs = {(a, b): s for a, b, s in near["pairs"]}
    assert near["removed"] == 10 and ("mbpp/658", "mbpp/362") in pairs and ("mbpp/673", "mbpp/439") in pairs
    test = [tokens(e.meta.get("text") or e.prompt) for e in mbpp_task.test]
    worst = max(jaccard(tokens(e.meta.get("text") or e.prompt), t) for e in mbpp_task.dist for t in test)
    assert worst < 0.9  # no pair of D_dist/D_test problems left at or above the stated threshold


def test_same_text_across_splits_is_an_overlap_even_with_other_content() -> None:
    a = Example(id="t/1", prompt="What is  2+2?", target=" 4")
    b = Example(id="t/2", prompt="what is 2+2?", target=" four")
    assert a.content_hash != b.content_hash and a.dedup_key == b.dedup_key == "what is 2+2?"
    with pytest.raises(SplitOverlapError, match="normalised prompt text: t/1=t/2"):
        Task(name="t", answer_type="exact_match", dist=[a], test=[b])
    kept, removed = drop_same_text([a, Example(id="t/3", prompt="What is 3+3?")], [b])
    assert [e.id for e in kept] == ["t/3"] and removed == [("t/1", "t/2")]


# ------------------------------------------------------------------------------------------------
# BoolQ
# ------------------------------------------------------------------------------------------------
def test_boolq_prompt_format_by_hand() -> None:
    row = {"question": "is the sky blue", "title": "Sky", "answer": True, "passage": "The sky is blue."}
    ex = boolq.make_example(row, "train", 7)
    assert ex.id == "boolq/train/7"
    assert ex.prompt == "Sky -- The sky is blue.\nQuestion: is the sky blue?\nAnswer:"  # SuperGLUE's passage
    assert (ex.choices, ex.label, ex.meta["title"]) == ((" no", " yes"), 1, "Sky")
    glue = boolq.make_example({"question": "q", "passage": "T -- p", "idx": 0, "label": 0}, "validation", 0)
    assert (glue.prompt, glue.label) == ("T -- p\nQuestion: q?\nAnswer:", 0)  # SuperGLUE rows as they are
    bare = boolq.make_example({"question": "q", "answer": False, "passage": "p"}, "validation", 0)
    assert (bare.prompt, bare.label, bare.meta["passage_titled"]) == ("p\nQuestion: q?\nAnswer:", 0, False)
    with pytest.raises(ValueError, match="needs an answer"):
        boolq.make_example({"question": "q", "passage": "p", "label": -1}, "test", 0)


@needs_data
def test_boolq_real_validation_and_fixture_train(data_dir: Path) -> None:
    t = load_task("boolq", n_dist=30, data_dir=data_dir)
    assert (len(t.dist), len(t.test)) == (30, 3270)
    assert t.answer_type == "multiple_choice" and t.metric == "acc"
    first = next(e for e in t.test if e.id == "boolq/validation/0")  # dev.jsonl's first row, by hand
    assert first.prompt.startswith("Ethanol fuel -- All biomass goes through at least some of these steps")
    # lm-eval's logged boolq sample (SuperGLUE's passage) for dev.jsonl row 8, as published
    canada = next(e for e in t.test if e.id == "boolq/validation/8")
    assert canada.prompt == (
        "American entry into Canada by land -- Persons driving into Canada must have their vehicle's "
        "registration document and proof of insurance.\nQuestion: can u drive in canada with us license?\nAnswer:"
    )
    assert t.options["rows_without_title"] == 30  # the synthetic train fixture has no titles
    assert first.prompt.endswith(
        "producing gasoline.\nQuestion: does ethanol take more energy make that produces?\nAnswer:"
    )
    assert first.label == 0
    assert sum(e.label for e in t.test) == 2033  # README: 2033 true
    val_src, train_src = t.options["sources"]
    assert (val_src["official"], val_src["fixture"]) == (True, False)
    assert (train_src["official"], train_src["fixture"]) == (False, True)
    assert t.options["train_rows_equal_to_test"] == 0
    # default n_dist (2,000) asks for more than the 48-row fixture holds: a clear error
    expected = r"asked for 2000 BoolQ D_dist examples but BoolQ train \(boolq/train.jsonl\) has 48"
    with pytest.raises(ValueError, match=expected):
        load_task("boolq", data_dir=data_dir)


@needs_data
def test_boolq_seeds(data_dir: Path) -> None:
    a = load_task("boolq", n_dist=20, n_test=50, seed=0, data_dir=data_dir)
    b = load_task("boolq", n_dist=20, n_test=50, seed=0, data_dir=data_dir)
    c = load_task("boolq", n_dist=20, n_test=50, seed=1, data_dir=data_dir)
    assert (a.dist.ids, a.test.ids) == (b.dist.ids, b.test.ids)
    assert a.dist.ids != c.dist.ids and a.test.ids != c.test.ids


def test_boolq_train_rows_equal_to_validation_never_enter_d_dist(tmp_path: Path) -> None:
    dev = [{"question": f"is {i} even", "answer": i % 2 == 0, "passage": f"Number {i}."} for i in range(3)]
    extra = [{"question": f"is {i} odd", "answer": i % 2 == 1, "passage": f"Number {i}."} for i in range(2)]
    (tmp_path / "boolq").mkdir()
    (tmp_path / "boolq" / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dev))
    (tmp_path / "boolq" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*dev, *extra]))
    t = load_task("boolq", n_dist=2, data_dir=tmp_path)
    assert sorted(t.dist.ids) == ["boolq/train/3", "boolq/train/4"]
    assert t.options["train_rows_equal_to_test"] == 3 and "deduplication" not in t.options
    with pytest.raises(ValueError, match="has 2 after leaving out 3 rows equal to test rows"):
        load_task("boolq", n_dist=3, data_dir=tmp_path)
    # a train row asking a validation question of the same passage, with another answer: same text
    twin = {"question": "IS 1 EVEN", "answer": True, "passage": "Number 1."}
    (tmp_path / "boolq" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*dev, *extra, twin]))
    t = load_task("boolq", n_dist=2, data_dir=tmp_path)
    assert t.options["deduplication"]["pairs"] == [["boolq/train/5", "boolq/validation/1"]]
    with pytest.raises(ValueError, match="leaving out 3 rows equal to test rows and 1 worded like a test row"):
        load_task("boolq", n_dist=3, data_dir=tmp_path)


def test_crafted_overlap_is_an_error_not_a_warning() -> None:
    a = boolq.make_example({"question": "q", "answer": True, "passage": "p"}, "train", 0)
    same = boolq.make_example({"question": "q", "answer": True, "passage": "p"}, "validation", 5)
    with pytest.raises(SplitOverlapError, match="boolq/train/0=boolq/validation/5"):
        Task(name="boolq", answer_type="multiple_choice", dist=[a], test=[same])


def test_duplicate_ids_are_rejected() -> None:
    a = Example(id="x/1", prompt="a")
    with pytest.raises(ValueError, match="duplicate example ids: x/1"):
        check_unique_ids([a, Example(id="x/1", prompt="b")], "x")


# ------------------------------------------------------------------------------------------------
# HellaSwag
# ------------------------------------------------------------------------------------------------
def _hs_row(label) -> dict:
    return {
        "ind": 5, "activity_label": "Home and Garden",
        "ctx_a": "[header] How to clean a mirror [title] Spray the glass. [step] Use a mild cleaner.",
        "ctx_b": "wipe", "ctx": "unused", "source_id": "wikihow~1", "split": "train", "split_type": "indomain",
        "endings": ["[step] Wipe in circles.", "Eat the mirror.", "  Paint it [substeps] red.", "Sell   it."],
        "label": label,
    }


def test_hellaswag_preprocessing_of_a_bracketed_row_by_hand() -> None:
    ex = hellaswag.make_example(_hs_row("2"), "train", 3)
    # " [title]" -> ". ", brackets removed, double spaces collapsed once, ctx_b capitalized
    assert ex.prompt == "Home and Garden: How to clean a mirror. Spray the glass. Use a mild cleaner. Wipe"
    # lm-eval keeps the space left where a leading "[step]" was: the choice starts with two spaces
    assert ex.choices == ("  Wipe in circles.", " Eat the mirror.", " Paint it red.", " Sell  it.")
    assert ex.label == 2 and ex.id == "hellaswag/train/3" and ex.meta["ind"] == 5
    assert ex.meta["choice_chars"] == (17, 15, 13, 9)  # ending lengths without the target delimiter
    # rowanz's raw schema (int label) gives the same example as the hub's (str label)
    assert hellaswag.make_example(_hs_row(2), "train", 3) == ex
    with pytest.raises(ValueError, match="no label"):
        hellaswag.make_example(_hs_row(""), "test", 0)


@needs_data
def test_hellaswag_loads_from_fixtures(data_dir: Path) -> None:
    t = load_task("hellaswag", n_dist=30, data_dir=data_dir)
    assert (len(t.dist), len(t.test)) == (30, 24)
    assert t.answer_type == "multiple_choice" and t.metric == "acc_norm" and t.options["metrics"] == ["acc_norm", "acc"]
    assert all(len(e.choices) == 4 and 0 <= e.label < 4 and "[" not in e.prompt for e in [*t.dist, *t.test])
    assert all(s["fixture"] for s in t.options["sources"])
    same = load_task("hellaswag", n_dist=30, data_dir=data_dir)
    other = load_task("hellaswag", n_dist=30, seed=1, data_dir=data_dir)
    assert same.dist.ids == t.dist.ids and other.dist.ids != t.dist.ids
    with pytest.raises(ValueError, match="asked for 2000 HellaSwag D_dist examples but HellaSwag train"):
        load_task("hellaswag", data_dir=data_dir)
    with pytest.raises(ValueError, match="asked for 25 HellaSwag D_test examples .* has 24"):
        load_task("hellaswag", n_dist=5, n_test=25, data_dir=data_dir)


def test_fixtures_follow_the_hub_schema_and_warn() -> None:
    root = fixture_data_dir()
    assert root == FIXTURES_DIR
    hub_keys = {
        "ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split", "split_type", "label"
    }
    for name in ("hellaswag_train.jsonl", "hellaswag_val.jsonl"):
        for r in _raw_rows(root / "hellaswag" / name):
            assert set(r) == hub_keys and isinstance(r["label"], str) and len(r["endings"]) == 4
    for r in _raw_rows(root / "boolq" / "train.jsonl"):
        assert set(r) == {"question", "answer", "passage"} and isinstance(r["answer"], bool)
        assert r["question"] == r["question"].lower() and not r["question"].endswith("?")
    readme = (root / "README.md").read_text()
    for rel in ("boolq/train.jsonl", "hellaswag/hellaswag_train.jsonl", "hellaswag/hellaswag_val.jsonl"):
        assert f"{sha256_file(root / rel)}  {rel}" in readme
    with pytest.warns(UserWarning, match="test fixture"):
        load_task("hellaswag", n_dist=3, data_dir=root)


def test_fixture_data_dir_prefers_real_files(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "boolq").mkdir(parents=True)
    rows = [{"question": f"is {i} small", "answer": True, "passage": f"{i} is small."} for i in range(3)]
    (real / "boolq" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (real / "boolq" / "dev.jsonl").write_text(json.dumps({"question": "q", "answer": False, "passage": "p"}) + "\n")
    merged = fixture_data_dir(real, dest=tmp_path / "merged")
    assert (merged / "hellaswag" / "hellaswag_val.jsonl").is_file()  # from the fixtures
    t = load_task("boolq", n_dist=3, data_dir=merged)
    assert t.options["sources"][1]["fixture"] is False and len(t.dist) == 3
    assert fixture_data_dir(real, dest=tmp_path / "merged") == merged  # idempotent


# ------------------------------------------------------------------------------------------------
# sources, errors, options, checksums
# ------------------------------------------------------------------------------------------------
def test_missing_files_are_actionable_errors(tmp_path: Path) -> None:
    for name, expected in [
        ("boolq", "BoolQ validation not found in .*: pass --data-dir with boolq/dev.jsonl"),
        ("hellaswag", "HellaSwag validation not found in .*hellaswag/hellaswag_val.jsonl"),
        ("mbpp", "MBPP .* not found in .*mbpp/mbpp.jsonl"),
        ("arithmetic", "Arithmetic 2da validation not found in .*arithmetic/two_digit_addition.jsonl"),
    ]:
        with pytest.raises(DataNotFoundError, match=expected):
            load_task(name, data_dir=tmp_path)
    (tmp_path / "boolq").mkdir()
    (tmp_path / "boolq" / "dev.jsonl").write_text(json.dumps({"question": "q", "answer": True, "passage": "p"}) + "\n")
    expected = r"BoolQ train not found in .*boolq/train.jsonl or connect to the Hugging Face hub"
    with pytest.raises(DataNotFoundError, match=expected):
        load_task("boolq", data_dir=tmp_path)
    with pytest.raises(DataNotFoundError, match="does not exist"):
        load_task("boolq", data_dir=tmp_path / "nope")


def test_env_var_names_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEL_LENS_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=re.escape(str(tmp_path))):
        load_task("boolq")


def test_offline_without_data_dir_fails_fast_with_the_same_advice(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CEL_LENS_DATA_DIR"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    code = textwrap.dedent(
        """
        from cel_lens.tasks import io, load_task, DataNotFoundError
        io.search_dirs = lambda: []  # no ../shared/data: the hub is the only place left
        try:
            load_task("boolq", n_dist=1)
        except DataNotFoundError as err:
            print("ERR", err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "ERR BoolQ validation not found: pass --data-dir DIR" in out.stdout
    assert "boolq/dev.jsonl" in out.stdout and "aps/super_glue" in out.stdout


@needs_data
def test_options_record_seed_sizes_sources_and_chat_template(data_dir: Path) -> None:
    t = load_task("arithmetic", n_dist=10, n_test=5, seed=7, data_dir=data_dir)
    assert t.options["chat_template"] is False
    assert (t.options["seed"], t.options["n_dist"], t.options["n_test"]) == (7, 10, 5)
    assert {s["path"] for s in t.options["sources"]} == {f"arithmetic/{f}" for f in CONFIGS.values()}
    json.dumps(dict(t.options))  # serialisable for run manifests
    chat = load_task("boolq", n_dist=5, n_test=5, data_dir=data_dir, chat_template=True)
    assert chat.options["chat_template"] is True
    # the splits carry the task's options, so an evaluator given only a split sees the choice
    assert chat.test.options["chat_template"] is True and chat.dist.options["chat_template"] is True


@needs_data
def test_real_files_match_the_readme_checksums() -> None:
    readme = (SHARED / "README.md").read_text(encoding="utf-8")
    recorded = {
        f"arithmetic/{m.group(1)}": m.group(2)
        for m in re.finditer(r"^\| (\w+\.jsonl) \| arithmetic_\w+ \| \d+ \| \d+ \| ([0-9a-f]{64}) \|$", readme, re.M)
    }
    for rel, header in (("mbpp/mbpp.jsonl", "**mbpp.jsonl**"), ("boolq/dev.jsonl", "**dev.jsonl**")):
        section = readme[readme.index(header):]
        recorded[rel] = re.search(r"sha256 `([0-9a-f]{64})`", section).group(1)
    assert len(recorded) == 12
    for rel, digest in recorded.items():
        assert sha256_file(SHARED / rel) == digest, rel
        assert OFFICIAL_SHA256[rel] == digest, rel


def _dev_only(tmp_path: Path, data_dir: Path) -> Path:
    """A data directory with BoolQ's validation file and no train file (as ../shared/data has it)."""
    root = tmp_path / "dev_only"
    (root / "boolq").mkdir(parents=True)
    (root / "boolq" / "dev.jsonl").symlink_to((data_dir / "boolq" / "dev.jsonl").resolve())
    return root


def test_one_split_loads_from_its_own_files_and_equals_the_full_load(tmp_path: Path, data_dir: Path) -> None:
    """``evaluate --task boolq`` needed the train file to read the test split."""
    root = _dev_only(tmp_path, data_dir)
    with pytest.raises(FileNotFoundError, match="train"):
        load_task("boolq", n_test=50, data_dir=root)
    test_only = load_task("boolq", n_test=50, data_dir=root, splits="test")
    full = load_task("boolq", n_dist=20, n_test=50, data_dir=data_dir)
    assert test_only.test.content_hash == full.test.content_hash and test_only.test.ids == full.test.ids
    assert len(test_only.dist) == 0 and test_only.options["splits"] == ["test"]
    for name in ("arithmetic", "organism_a"):  # loaders without a splits option: loaded whole, then cut
        one = load_task(name, n_dist=10, n_test=12, data_dir=data_dir, splits=("dist",))
        assert len(one.test) == 0 and one.dist.ids == load_task(name, n_dist=10, n_test=12, data_dir=data_dir).dist.ids
    with pytest.raises(ValueError, match="splits must name"):
        load_task("boolq", data_dir=root, splits=("train",))


def test_mbpp_generation_budget_is_an_option(data_dir: Path) -> None:
    task = load_task("mbpp", n_dist=3, n_test=3, data_dir=data_dir, max_new_tokens=32)
    assert task.options["max_new_tokens"] == 32 and task.test.max_new_tokens == 32
    assert load_task("mbpp", n_dist=3, n_test=3, data_dir=data_dir).test.max_new_tokens == mbpp.MAX_NEW_TOKENS
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        load_task("mbpp", n_dist=3, n_test=3, data_dir=data_dir, max_new_tokens=0)


def test_task_files_are_found_from_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_task("arithmetic")`` needed ``CEL_LENS_DATA_DIR`` even with ``./data`` or
    ``../shared/data`` holding the files; a directory missing one of the task's files is passed over."""
    from cel_lens.tasks import io

    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    root = tmp_path / "repo"
    (root / "data" / "arithmetic").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "arithmetic").mkdir(parents=True)
    row = json.dumps({"context": "Q: What is 1 plus 2?\n\nA:", "completion": " 3"})
    for name in io.OFFICIAL_SHA256:
        if name.startswith("arithmetic/"):
            rows = "\n".join(row.replace("1 plus", f"{i} plus") for i in range(12))
            (tmp_path / "shared" / "data" / name).write_text(rows + "\n")
    (root / "data" / "arithmetic" / "two_digit_addition.jsonl").write_text(row + "\n")  # one file of ten
    monkeypatch.chdir(root)
    assert io.resolve_data_dir(None, needs=["arithmetic/two_digit_addition.jsonl"]) == root / "data"
    task = load_task("arithmetic", n_dist=5, n_test=5)
    assert task.options["sources"][0]["data_dir"] == str(tmp_path / "shared" / "data")  # ./data lacks nine files
    assert io.resolve_data_dir(None, needs=["mbpp/nope.jsonl"]) is None  # nothing holds it: the hub


def test_an_unreachable_hub_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the offline switches, an unreachable hub took ~20 s of retries before the error."""
    from cel_lens.model import hub
    from cel_lens.tasks import io

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "_hub_reachable", lambda endpoint, timeout=5.0: False)
    monkeypatch.setattr(io, "search_dirs", lambda: [tmp_path / "data"])  # not ../shared/data, which holds a BoolQ file
    with pytest.raises(DataNotFoundError, match="the hub is not reachable"):
        load_task("boolq", n_dist=1)

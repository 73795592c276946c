"""tasks/arithmetic_choice.py: two-digit addition as two ordered choices, on the real file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cel_lens as cl
from cel_lens.tasks.arithmetic_choice import OFFSET, make_example, near_miss

ROOT = Path(__file__).resolve().parents[2]


def test_an_example_holds_the_right_sum_and_the_near_miss_smaller_first() -> None:
    row = {"context": "\n\nQ: What is 98 plus 45?\n\nA:", "completion": " 143"}
    e = make_example(row, 7)
    wrong = near_miss(row["context"], 143)
    assert abs(wrong - 143) == OFFSET
    assert e.choices == (f" {min(143, wrong)}", f" {max(143, wrong)}")
    assert e.choices[e.label] == " 143" and e.prompt == row["context"] and e.id == "arithmetic_choice/2da/7"
    assert make_example(row, 7) == e  # the near miss depends on the row alone


def test_the_loader_draws_disjoint_seeded_splits_with_both_orders(data_dir: Path) -> None:
    task = cl.load_task("arithmetic_choice", n_dist=100, n_test=200, seed=4, data_dir=str(data_dir))
    again = cl.load_task("arithmetic_choice", n_dist=100, n_test=200, seed=4, data_dir=str(data_dir))
    assert task.dist.ids == again.dist.ids and task.test.ids == again.test.ids
    assert not set(task.dist.ids) & set(task.test.ids)
    for e in [*task.dist, *task.test]:
        small, large = (int(c) for c in e.choices)
        assert large - small == OFFSET and int(e.choices[e.label]) == e.meta["right"]
    share = sum(e.label for e in task.test) / len(task.test)
    assert 0.35 < share < 0.65  # the sign of the near miss is not constant
    assert task.answer_type == "multiple_choice" and task.metric == "acc"


def test_reserved_rows_enter_neither_split_and_the_rest_fills_the_planted_row(data_dir: Path) -> None:
    reserve = ROOT / "results/planted/sums-plant-rows.txt"
    plan = json.loads((ROOT / "results/planted/sums-plant-rows.json").read_text())
    task = cl.load_task("arithmetic_choice", seed=59, data_dir=str(data_dir), reserve=str(reserve))
    held = set(plan["train"]) | set(plan["truth"])
    assert len(task.dist) == 500 and len(task.test) == 1000
    assert not held & (set(task.dist.ids) | set(task.test.ids))
    assert task.options["reserve_file"]["rows_left_out"] == 500
    with pytest.raises(ValueError, match="D_test"):
        cl.load_task("arithmetic_choice", n_test=1001, seed=59, data_dir=str(data_dir), reserve=str(reserve))


@pytest.mark.parametrize("kind", ["sums-capability", "sums3-capability", "ops-capability"])
def test_the_committed_row_plan_is_the_seeded_one(data_dir: Path, kind: str) -> None:
    from cel_lens.plant.sums import FIRST_LOOK, KINDS, SUMS_ROWS, sums_row_plan

    plan, reserve = sums_row_plan(str(data_dir), kind)
    rows = ROOT / SUMS_ROWS[kind]
    assert plan == json.loads(rows.read_text())
    assert reserve == rows.with_suffix(".txt").read_text()
    index = {part: [int(i.rsplit("/", 1)[1]) for i in plan[part]] for part in ("train", "truth")}
    assert max(index["train"]) < FIRST_LOOK <= min(index["truth"])
    assert all(i.startswith(f"arithmetic_choice/{KINDS[kind]}/") for i in plan["train"] + plan["truth"])


def test_another_file_is_a_fresh_pool_with_the_same_protocol(data_dir: Path) -> None:
    two = cl.load_task("arithmetic_choice", n_dist=50, n_test=100, seed=3, data_dir=str(data_dir))
    three = cl.load_task("arithmetic_choice", n_dist=50, n_test=100, seed=3, data_dir=str(data_dir), config="3da")
    assert all(e.id.startswith("arithmetic_choice/3da/") and e.meta["config"] == "3da" for e in three.dist)
    assert not {e.content_hash for e in two.test} & {e.content_hash for e in three.test}
    assert three.options["config"] == "3da" and three.options["protocol"].startswith("three-digit addition")
    assert three.options["choices"] == two.options["choices"] == "(smaller, larger): the right sum and the sum +/- 20"
    ops = cl.load_task("arithmetic_choice", n_dist=5, n_test=5, seed=3, data_dir=str(data_dir), config="1dc")
    assert ops.options["choices"] == "(smaller, larger): the right answer and the answer +/- 20"
    row = three.test[0]
    assert int(row.choices[row.label]) == row.meta["right"] and abs(int(row.choices[0]) - int(row.choices[1])) == OFFSET
    with pytest.raises(ValueError, match="not one of its files"):
        cl.load_task("arithmetic_choice", data_dir=str(data_dir), config="4ds")


def test_negative_answers_keep_the_smaller_first_order() -> None:
    row = {"context": "\n\nQ: What is (4 - 7) - 3?\n\nA:", "completion": " -6"}
    e = make_example(row, 1, "1dc")
    assert e.id == "arithmetic_choice/1dc/1" and int(e.choices[e.label]) == -6
    assert int(e.choices[0]) < int(e.choices[1]) and e.choices[0].startswith(" -")


def test_fresh_three_ops_rows_are_of_the_files_form_and_outside_it(data_dir: Path) -> None:
    from cel_lens.tasks.arithmetic_choice import fresh_three_ops, load_pool

    pool, _ = load_pool(str(data_dir), "1dc")
    fresh = fresh_three_ops(pool, 300, seed=5)
    assert fresh == fresh_three_ops(pool, 300, seed=5) and fresh != fresh_three_ops(pool, 300, seed=6)
    assert not {e.dedup_key for e in fresh} & {e.dedup_key for e in pool}
    assert len({e.id for e in fresh}) == 300 and all(e.id.startswith("arithmetic_choice/1dc-fresh/") for e in fresh)
    for e in fresh[:50]:  # the answer by hand, not by the module's table
        a, op1, b, op2, c = e.prompt.split("is ")[1].rstrip("?\n\nA:").replace("(", "").replace(")", "").split()
        first = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op1]
        assert e.meta["right"] == {"+": first + int(c), "-": first - int(c), "*": first * int(c)}[op2]
        assert int(e.choices[e.label]) == e.meta["right"]
    with pytest.raises(ValueError, match="outside the file"):
        fresh_three_ops(pool, 4562, seed=0)  # 9**3 * 9 = 6,561 problems, 2,000 in the file
    with pytest.raises(ValueError, match="is not a"):
        fresh_three_ops([make_example({"context": "\n\nQ: What is 98 plus 45?\n\nA:", "completion": " 143"}, 0, "1dc")], 1, 0)

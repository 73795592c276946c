"""Tasks and splits in a notebook: one-line reprs and short HTML summaries, never the examples."""

from __future__ import annotations

import html

from cel_lens.tasks.base import Example, Split, Task


def _task(n: int = 500) -> Task:
    dist = [Example(f"t/d/{i}", f"Question: what is {i} plus <b>{i}</b>?\nAnswer:", target=f" {2 * i}") for i in range(n)]
    test = [Example(f"t/t/{i}", f"Question: what is {i} times 3?\nAnswer:", target=f" {3 * i}") for i in range(n)]
    return Task("toy", "exact_match", Split("dist", tuple(dist)), Split("test", tuple(test)), options={"seed": 7, "source": "hand"})


def test_task_and_split_reprs_are_one_short_line():
    task = _task()
    assert repr(task) == "<Task 'toy': exact_match, acc, dist 500 / test 500 examples>"
    assert repr(task.test) == "<Split 'test' of 'toy': 500 examples, exact_match, acc>"
    assert repr(task.test[:3]) == "<Split 'test' of 'toy': 3 examples, exact_match, acc>"
    assert repr(Split("s", ())) == "<Split 's': 0 examples, answer type unset, acc>"
    assert str(task) == repr(task)


def test_html_summaries_are_short_escaped_and_show_the_first_examples():
    task = _task()
    page = task._repr_html_()
    assert len(page) < 2000 and "D_dist 500 / D_test 500" in page and "seed 7" in page
    assert "t/d/0" in page and "t/d/2" in page and "t/d/3" not in page  # the first three examples
    assert "<b>0</b>" not in page and html.escape("<b>0</b>") in page  # example text is escaped
    split_page = task.test._repr_html_()
    assert len(split_page) < 2000 and "t/t/0" in split_page and html.escape(repr(task.test)) in split_page
    mc = Split("m", (Example("m/0", "Pick:", choices=(" a", " b"), label=1),), answer_type="multiple_choice")
    assert "b (2 of 2)" in mc._repr_html_()

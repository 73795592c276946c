"""The local backend reports each choice's score from the forward passes that decide correctness,
and a search on a real (tiny) model carries the calibration into its result, resumed or not."""

import pytest
import torch

import cel_lens as cl
from cel_lens.backends.local import LocalOracle
from cel_lens.evaluation import evaluate
from cel_lens.heads import HeadSet
from cel_lens.runs import load_run
from cel_lens.tasks.base import Example, Task

WORDS = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird", "star"]


def _yes_no_task(n: int = 24) -> Task:
    examples = [
        Example(f"yn/{i}", f"Is {WORDS[i % 12]} a {WORDS[(i // 12 + i) % 12]} ({i})?\nAnswer:", choices=(" no", " yes"), label=i % 3 != 0)
        for i in range(2 * n)
    ]
    return Task("yes_no", "multiple_choice", tuple(examples[:n]), tuple(examples[n:]))


@pytest.mark.parametrize("metric", ["acc", "acc_norm"])
def test_choice_scores_decide_correctness(tiny_model, metric):
    task = _yes_no_task()
    task = Task(task.name, task.answer_type, task.dist.examples, task.test.examples, metric=metric)
    oracle = LocalOracle(tiny_model, task, batch_size=4, progress=False)
    sets = [HeadSet(), HeadSet.parse("L1H2")]
    correct, scores = oracle.evaluate_choices("dist", sets)
    labels = oracle.answer_key("dist").labels
    assert torch.equal(scores.argmax(-1) == labels, correct)
    direct = evaluate(tiny_model, task.dist, sets, progress=False)  # no activation store
    ll = direct.extra["choice_ll"]
    expected = ll if metric == "acc" else ll / torch.tensor([2.0, 3.0])  # "no", "yes": characters without the space
    torch.testing.assert_close(scores, expected, atol=1e-4, rtol=1e-5)
    oracle.close()


def test_search_result_has_the_calibration_and_a_rerun_reproduces_it(tiny_model, tmp_path):
    task = _yes_no_task()
    out = tmp_path / "run"
    run = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, n_boot=200, out=out, progress=False)
    cal = run.result.calibration
    assert cal["applies"] and cal["answer_type"] == "multiple_choice" and cal["names"] == [" no", " yes"]
    assert cal["majority_answer"] == " yes" and cal["majority_rate"] == pytest.approx(16 / 24)
    assert sum(cal["shares_intact"]) == pytest.approx(1.0)
    assert "survives calibration?" in str(run.result) and "threshold-free test" in str(run.result)
    assert "p_prior" in cal and "p_auc" in cal  # the prior-shift and margin-AUC tests ran from the recorded scores
    again = cl.search(tiny_model, task, k=1, pool_size=3, n_null=4, n_boot=200, out=out, progress=False)
    assert again.oracle.misses == 0 and again.result == run.result
    assert load_run(out).result.calibration == cal

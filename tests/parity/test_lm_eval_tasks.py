"""Per-example parity of lm-eval tasks loaded through cel_lens (:mod:`cel_lens.tasks.lm_eval_task`)
with lm-evaluation-harness's own ``simple_evaluate(log_samples=True)`` on the same documents.

One local YAML task of each output type (``tests/tasks/lm_eval_fixtures``: multiple_choice with
two few-shot examples, a LAMBADA-style loglikelihood task, generate_until with a regex filter and
exact match), over local JSON Lines files. cel_lens loads the task (``load_task(yaml)``) and
evaluates its D_test intact and with heads ablated (:func:`cel_lens.evaluate`); lm-eval is given the
same documents (``samples=`` D_test's doc ids) through its ``TaskManager`` (``include_path`` = the
fixtures folder) on its own ``HFLM``: once on the checkpoint, once on the checkpoint cel_lens exports
with the heads removed (:func:`cel_lens.model.checkpoint_edit.export_checkpoint`), so both sides
ablate through cel_lens. Compared per document: the prompt and continuations lm-eval requested, the
decision (acc and acc_norm; is-greedy acc; the generation, its filtered answer's exact match).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'cel_lens[parity]')")

from cel_lens.evaluation import evaluate  # noqa: E402
from cel_lens.evaluation import EvalContext  # noqa: E402
from cel_lens.evaluation.seal import SealReader  # noqa: E402
from cel_lens.heads import HeadSet  # noqa: E402
from cel_lens.model.checkpoint_edit import export_checkpoint  # noqa: E402
from cel_lens.model.load import load_model  # noqa: E402
from cel_lens.tasks import load_task  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "tasks" / "lm_eval_fixtures"  # their data_files are relative to the repository root
TASKS = ("cel_sum_mc", "cel_last_word", "cel_sum_gen")
SIZES = {"tiny": {"cel_sum_mc": 8, "cel_last_word": 10, "cel_sum_gen": 6},
         "smollm2": {"cel_sum_mc": 6, "cel_last_word": 8, "cel_sum_gen": 5}}
HEADS = {"tiny": HeadSet.parse("L0H1+L2H3"), "smollm2": HeadSet.parse("L0H1+L1H4+L2H2+L3H0")}
FEWSHOT_SEED = 1234


@contextlib.contextmanager
def _at_repo_root():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        yield


def lm_eval_samples(checkpoint: Path, name: str, doc_ids: list[int]) -> dict[int, dict]:
    """lm-eval's logged samples of task ``name`` (found in the fixtures folder by its TaskManager)
    for documents ``doc_ids``, on its HFLM over ``checkpoint``: ``{doc_id: sample}`` (the first
    filter's samples)."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(checkpoint), device="cpu", dtype="float32", batch_size=4)
    with _at_repo_root():
        out = simple_evaluate(
            model=lm, tasks=[name], task_manager=TaskManager(include_path=str(FIXTURES), include_defaults=False),
            samples={name: sorted(doc_ids)}, log_samples=True, bootstrap_iters=0, fewshot_random_seed=FEWSHOT_SEED,
            random_seed=0, numpy_random_seed=0, torch_random_seed=0, verbosity="ERROR",
        )
    samples = out["samples"][name]
    first = samples[0]["filter"]
    return {int(s["doc_id"]): s for s in samples if s["filter"] == first}


def compare(task, res, samples: dict[int, dict], v: int) -> dict:
    """Per-example comparison of cel_lens's result (variant ``v``) with lm-eval's samples: the
    differences (``problems``) and how many examples have the same inputs, decisions, generations."""
    out = {"problems": [], "inputs": 0, "decisions": 0, "gens": 0}
    for i, ex in enumerate(task.test):
        s = samples[ex.meta["doc_id"]]
        args = [tuple(a) for a in s["arguments"]]
        if task.answer_type == "multiple_choice":
            same_input = args == [(ex.prompt, c) for c in ex.choices]
            ours = (bool(res.extra["acc"][v, i]), bool(res.extra["acc_norm"][v, i]))
            theirs = (bool(s["acc"]), bool(s["acc_norm"]))
        elif task.answer_type == "exact_match":
            same_input = args == [(ex.prompt, ex.target)]
            ours, theirs = bool(res.correct[v, i]), bool(s["acc"])
        else:
            same_input = args[0][0] == ex.prompt
            out["gens"] += res.completions[v][i] == s["resps"][0][0]
            ours = (res.completions[v][i], bool(res.correct[v, i]))
            theirs = (s["resps"][0][0], bool(s["exact_match"]))
        out["inputs"] += same_input
        out["decisions"] += ours == theirs
        if not same_input or ours != theirs:
            out["problems"].append(f"{ex.id}: same input {same_input}, cel_lens {ours} vs lm-eval {theirs}")
    return out


def check_parity(model, checkpoint: Path, heads: HeadSet, name: str, n: int, tmp: Path, rows: list, label: str) -> dict:
    """Both sides on D_test of ``name``, intact and with ``heads`` ablated: the per-example
    differences (none expected); one row per variant goes to the parity table (``rows``)."""
    with _at_repo_root():
        task = load_task(str(FIXTURES / f"{name}.yaml"), n_dist=2, n_test=n)
    owner = EvalContext.from_environment(reader=SealReader("lm-eval parity"))  # this test owns its D_test reads
    res = evaluate(model, task.test, [HeadSet(), heads], batch_size=4, progress=False, context=owner)
    ablated = tmp / "ablated"  # exported once per model, shared by the tasks
    if not ablated.exists():
        export_checkpoint(checkpoint, heads, ablated)
    doc_ids = [e.meta["doc_id"] for e in task.test]
    problems = []
    for v, (variant, path) in enumerate((("intact", checkpoint), ("ablated", ablated))):
        got = compare(task, res, lm_eval_samples(path, task.options["lm_eval_task"], doc_ids), v)
        problems += [f"{variant}: {p}" for p in got["problems"]]
        m = len(task.test)
        rows.append({"task": f"lm-eval YAML {name}", "bos": label, "loader": "hooked", "variant": variant, "max_dll": None,
                     "decisions": f"{got['decisions']}/{m}", "inputs": f"{got['inputs']}/{m}",
                     "gens": f"{got['gens']}/{m}" if task.answer_type == "generation" else None})
    changed = not torch.equal(res.scores[0], res.scores[1]) or res.completions is not None and res.completions[0] != res.completions[1]
    return {"problems": problems, "changed": changed}


@pytest.mark.parametrize("name", TASKS)
def test_tiny_checkpoint_matches_lm_eval(name, parity_checkpoints, tmp_path_factory, parity_rows):
    checkpoint = parity_checkpoints["added"]
    model = load_model(checkpoint, device="cpu", dtype="float32", loader="hooked")
    out = check_parity(model, checkpoint, HEADS["tiny"], name, SIZES["tiny"][name],
                       tmp_path_factory.getbasetemp() / "lm_eval_tiny", parity_rows, "tiny (added)")
    assert not out["problems"], "\n".join(out["problems"])
    # a random tiny model generates one repeated token whatever the heads: only scores can move
    assert out["changed"] or name == "cel_sum_gen", "the ablation changed nothing: the ablated comparison says nothing"


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_smollm2_matches_lm_eval(name, smollm2_hooked, smollm2_dir, tmp_path_factory, parity_rows):
    out = check_parity(smollm2_hooked, smollm2_dir, HEADS["smollm2"], name, SIZES["smollm2"][name],
                       tmp_path_factory.getbasetemp() / "lm_eval_smollm2", parity_rows, "SmolLM2-135M-Instruct")
    assert not out["problems"], "\n".join(out["problems"])
    assert out["changed"], "the ablation changed nothing: the ablated comparison says nothing"


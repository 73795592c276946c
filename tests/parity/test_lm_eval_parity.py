"""Per-example parity with EleutherAI's lm-evaluation-harness (its ``HFLM``, its evaluator, its stock
task configs).

For each task (Arithmetic, all ten configs; BoolQ; HellaSwag; MBPP), each BOS convention of the
tokenizer (added by the tokenizer, present but not added, absent), each loader (``"hooked"``,
``"bridge"``) and each variant (intact; two heads ablated), the same examples go through lm-eval
and through :func:`cel_lens.evaluate` and are compared one by one: prompt text, token ids, the
log-likelihood of every continuation (|d| < 1e-4) and the decision (acc, acc_norm, pass@1); for
MBPP the generations too. cel_lens's examples are its own splits (``load_task``); lm-eval
evaluates the same documents of its local copy of the data.

lm-eval reads local files (``../shared/data``; the shipped fixtures for HellaSwag), through its
stock configs with only the dataset (and MBPP's generation budget) changed. On lm-eval's side a head
is ablated by zeroing its input columns of ``o_proj`` in the model ``HFLM`` loaded, which is what
zeroing ``hook_z`` does. (Both sides sum per-token log-probabilities in float32: HellaSwag's sums are a
few hundred nats, where float32's resolution is 3e-5 to 6e-5, so they agree to one or two units in
the last place.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'cel_lens[parity]')")

from cel_lens.evaluation import encode_pair, evaluate  # noqa: E402
from cel_lens.evaluation.generation import generation_prompts  # noqa: E402
from cel_lens.heads import HeadSet  # noqa: E402
from cel_lens.model.load import load_model  # noqa: E402
from cel_lens.sandbox import ALLOW_ENV  # noqa: E402
from cel_lens.tasks import load_task  # noqa: E402
from cel_lens.tasks.base import Split  # noqa: E402
from cel_lens.testing import BOS_CONVENTIONS  # noqa: E402

ABLATED = HeadSet.parse("L0H1+L2H3")
VARIANTS = {"intact": HeadSet(), "ablated": ABLATED}
TOL = 1e-4
MAX_GEN = 16  # MBPP's generation budget on both sides (lm-eval's max_gen_toks)
SIZES = {"arithmetic": 20, "boolq": 8, "hellaswag": 8, "mbpp": 2}
# a bridge decodes without a key/value cache (a full pass per token over ~1,500-token MBPP prompts)
BRIDGE_MBPP = 1
slow = pytest.mark.slow


@dataclasses.dataclass
class Case:
    """One task's examples on both sides: cel_lens's split, lm-eval's tasks and documents, and
    where each example sits among lm-eval's documents (``place[i] = (lm-eval task, doc_id)``)."""

    name: str
    split: Split
    tasks: dict[str, Any]
    doc_ids: dict[str, list[int]]
    place: list[tuple[str, int]]


def _row(example_id: str) -> int:
    return int(example_id.rsplit("/", 1)[1])


def build_case(name: str, data_dir: Path, tmp: Path, side) -> Case:
    """cel_lens's D_test sample of ``name`` and lm-eval's stock task(s) over the same documents."""
    n = SIZES[name]
    cache = tmp / "hf_datasets"
    if name == "arithmetic":
        split = load_task("arithmetic", n_dist=10, n_test=n, data_dir=data_dir).test
        place = [(f"arithmetic_{e.meta['config']}", _row(e.id)) for e in split]
        from cel_lens.tasks.arithmetic import CONFIGS

        tasks = {
            t: side.stock_task(t, {"validation": str(data_dir / "arithmetic" / CONFIGS[t.split("_")[1]])}, cache)
            for t in sorted({t for t, _ in place})
        }
    elif name == "boolq":
        split = load_task("boolq", n_dist=10, n_test=n, data_dir=data_dir).test
        place = [("boolq", _row(e.id)) for e in split]
        rows = side.write_jsonl(tmp / "boolq_validation.jsonl", side.superglue_boolq_rows(data_dir / "boolq" / "dev.jsonl"))
        tasks = {"boolq": side.stock_task("boolq", {"validation": str(rows)}, cache, training_split=None)}
    elif name == "hellaswag":
        split = load_task("hellaswag", n_dist=10, n_test=n, data_dir=data_dir).test
        place = [("hellaswag", _row(e.id)) for e in split]
        files = {"train": str(data_dir / "hellaswag" / "hellaswag_train.jsonl"),
                 "validation": str(data_dir / "hellaswag" / "hellaswag_val.jsonl")}
        tasks = {"hellaswag": side.stock_task("hellaswag", files, cache)}
    else:
        split = load_task("mbpp", n_dist=1, n_test=n, data_dir=data_dir).test
        rows = side.mbpp_test_rows(data_dir / "mbpp" / "mbpp.jsonl")
        position = {int(r["task_id"]): i for i, r in enumerate(rows)}
        place = [("mbpp", position[e.meta["task_id"]]) for e in split]
        test_file = side.write_jsonl(tmp / "mbpp_test.jsonl", rows)
        tasks = {"mbpp": side.stock_task("mbpp", {"test": str(test_file)}, cache, generation={"max_gen_toks": MAX_GEN})}
    doc_ids: dict[str, list[int]] = {}
    for t, d in place:
        doc_ids.setdefault(t, []).append(d)
    # sorted: lm-eval visits the chosen documents in file order and pairs them with this list
    return Case(name, split, tasks, {t: sorted(d) for t, d in doc_ids.items()}, place)


@pytest.fixture(scope="module")
def cel_models(parity_checkpoints):
    """cel_lens's model of each checkpoint and loader, loaded on first use."""
    built: dict[tuple[str, str], Any] = {}

    def get(bos: str, loader: str):
        if (bos, loader) not in built:
            built[bos, loader] = load_model(parity_checkpoints[bos], device="cpu", dtype="float32", loader=loader)
        return built[bos, loader]

    return get


@pytest.fixture(scope="module")
def lm_eval_results(lm_eval_models, data_dir, tmp_path_factory, lm_side):
    """lm-eval's logged samples per (task, BOS convention, variant), computed on first use, with
    the case they belong to."""
    cache: dict[tuple[str, str], tuple[Case, dict[str, dict]]] = {}

    def get(name: str, bos: str) -> tuple[Case, dict[str, dict]]:
        if (name, bos) not in cache:
            with lm_side.offline_code_eval():
                tmp = tmp_path_factory.mktemp(f"lm_eval_{name}_{bos}")
                runs = {}
                for variant, heads in VARIANTS.items():
                    case = build_case(name, data_dir, tmp, lm_side)  # fresh tasks: lm-eval keeps state in them
                    runs[variant] = lm_side.run(lm_eval_models(bos), case.tasks, case.doc_ids, heads)
            cache[name, bos] = (case, runs)
        return cache[name, bos]

    return get


def _compare_loglikelihood(case: Case, res, samples: dict, model, lm, v: int) -> dict:
    """Per-example prompts, token ids, log-likelihoods and decisions of a teacher-forced task."""
    stats = {"max_dll": 0.0, "decisions": 0, "inputs": 0, "mismatch": []}
    for i, ex in enumerate(case.split):
        task, doc = case.place[i]
        s = samples[task][doc]
        conts = list(ex.choices) if ex.choices else [ex.target]
        args = [tuple(a) for a in s["arguments"]]
        same_text = args == [(ex.prompt, c) for c in conts]
        same_ids = all(tuple(encode_pair(model, ex.prompt, c)) == tuple(lm._encode_pair(ctx, c)) for ctx, c in args)
        stats["inputs"] += same_text and same_ids
        theirs = [float(r[0][0]) for r in s["resps"]]
        if ex.choices:
            ours = [float(x) for x in res.extra["choice_ll"][v, i, : len(conts)]]
            decisions = [(bool(res.extra["acc"][v, i]), bool(s["acc"]))]
            if "acc_norm" in s:
                decisions.append((bool(res.extra["acc_norm"][v, i]), bool(s["acc_norm"])))
        else:
            ours = [float(res.scores[v, i])]
            decisions = [(bool(res.correct[v, i]), bool(s["acc"]))]
        stats["max_dll"] = max(stats["max_dll"], max(abs(a - b) for a, b in zip(ours, theirs)))
        stats["decisions"] += all(a == b for a, b in decisions)
        if not (same_text and same_ids and all(a == b for a, b in decisions)):
            stats["mismatch"].append(f"{ex.id}: text {same_text}, ids {same_ids}, decisions {decisions}")
    return stats


def _compare_generation(case: Case, res, samples: dict, model, lm, v: int) -> dict:
    """Per-example prompts, prompt token ids, generations and pass@1 decisions of MBPP."""
    stats = {"max_dll": None, "decisions": 0, "inputs": 0, "gens": 0, "mismatch": []}
    for i, ex in enumerate(case.split):
        task, doc = case.place[i]
        s = samples[task][doc]
        context = s["arguments"][0][0]
        theirs_ids = lm.tok_batch_encode([context], left_truncate_len=lm.max_length - MAX_GEN)[0][0].tolist()
        ours_ids = generation_prompts(model, case.split[i : i + 1], False, MAX_GEN)[0]
        same_inputs = context == ex.prompt and ours_ids == theirs_ids
        same_gen = res.completions[v][i] == s["resps"][0][0]
        same_decision = bool(res.correct[v, i]) == bool(s["pass_at_1"])
        stats["inputs"] += same_inputs
        stats["gens"] += same_gen
        stats["decisions"] += same_decision
        if not (same_inputs and same_gen and same_decision):
            stats["mismatch"].append(
                f"{ex.id}: inputs {same_inputs}, generation {res.completions[v][i]!r} vs {s['resps'][0][0]!r}, "
                f"decision {bool(res.correct[v, i])} vs {bool(s['pass_at_1'])}"
            )
    return stats


def _params():
    for task in ("arithmetic", "boolq", "hellaswag", "mbpp"):
        for bos in BOS_CONVENTIONS:
            for loader in ("hooked", "bridge"):
                marks = [slow] if task == "mbpp" or loader == "bridge" else []
                yield pytest.param(task, bos, loader, marks=marks, id=f"{task}-{bos}-{loader}")


@pytest.mark.parametrize(("task", "bos", "loader"), list(_params()))
def test_matches_lm_eval_per_example(task, bos, loader, cel_models, lm_eval_models, lm_eval_results, parity_rows, monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")  # MBPP's judge runs the generated code in cel_lens's sandbox
    case, runs = lm_eval_results(task, bos)
    if task == "mbpp" and loader == "bridge":
        case = dataclasses.replace(case, split=case.split.subset(BRIDGE_MBPP))
    model, lm = cel_models(bos, loader), lm_eval_models(bos)
    res = evaluate(model, case.split, list(VARIANTS.values()), batch_size=4, progress=False, max_new_tokens=MAX_GEN)
    compare = _compare_generation if task == "mbpp" else _compare_loglikelihood
    problems = []
    for v, variant in enumerate(VARIANTS):
        stats = compare(case, res, runs[variant], model, lm, v)
        n = len(case.split)
        parity_rows.append({
            "task": task, "bos": bos, "loader": loader, "variant": variant, "max_dll": stats["max_dll"],
            "decisions": f"{stats['decisions']}/{n}", "inputs": f"{stats['inputs']}/{n}",
            "gens": None if "gens" not in stats else f"{stats['gens']}/{n}",
        })
        problems += [f"{variant}: {m}" for m in stats["mismatch"]]
        if stats["max_dll"] is not None and stats["max_dll"] >= TOL:
            problems.append(f"{variant}: max |d loglik| {stats['max_dll']:.2e} >= {TOL}")
    assert not problems, "\n".join(problems)
    # the ablation must matter, or the ablated comparison says nothing
    if task != "mbpp":
        assert not torch.equal(res.scores[0], res.scores[1])


JUDGED = (11, 12, 16, 367)  # 11: passes lm-eval's judge only unfenced; 367 needs its test_setup_code


@slow
def test_mbpp_judge_decisions_match_lm_eval(data_dir, tmp_path, lm_side, monkeypatch):
    """Reference solutions, plain and in a ```python fence, judged by cel_lens's default MBPP judge
    and by lm-eval's own metric (``process_results``): the same pass/fail for every one."""
    monkeypatch.setenv(ALLOW_ENV, "1")
    task = load_task("mbpp", n_dist=1, data_dir=data_dir)  # the default judge is lm-eval's
    assert task.options["judge"] == "lm-eval"
    rows = lm_side.mbpp_test_rows(data_dir / "mbpp" / "mbpp.jsonl")
    by_id = {int(r["task_id"]): r for r in rows}
    with lm_side.offline_code_eval():
        lm_task = lm_side.stock_task("mbpp", {"test": str(lm_side.write_jsonl(tmp_path / "t.jsonl", rows))}, tmp_path)
        examples = {e.meta["task_id"]: e for e in task.test}
        verdicts = []
        for task_id in JUDGED:
            code = by_id[task_id]["code"]
            for completion in (code, f"```python\n{code}\n```"):
                ours = bool(task.judge(examples[task_id], completion))
                theirs = bool(lm_task.process_results(by_id[task_id], [completion])["pass_at_1"])
                verdicts.append((task_id, completion.startswith("```"), ours, theirs))
    assert all(ours == theirs for *_, ours, theirs in verdicts), verdicts
    assert (11, True, False, False) in verdicts  # the fenced reference fails lm-eval's judge

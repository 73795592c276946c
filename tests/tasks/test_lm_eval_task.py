"""lm-eval tasks as cel_lens tasks (:mod:`cel_lens.tasks.lm_eval_task`): loading by YAML path,
splits, identity, refusals, and the generation judge against lm-eval's own metric. Offline: the
tasks are the local YAMLs of ``lm_eval_fixtures`` (data files relative to the repository root)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'cel_lens[parity]')")

from cel_lens.tasks import load_task, loader_options, task_info  # noqa: E402
from cel_lens.tasks.base import check_disjoint  # noqa: E402
from cel_lens.tasks.lm_eval_task import check_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "tasks" / "lm_eval_fixtures"
MC, LL, GEN = (f"tests/tasks/lm_eval_fixtures/{n}.yaml" for n in ("cel_sum_mc", "cel_last_word", "cel_sum_gen"))


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch):
    """The fixtures' data_files are relative to the repository root, as lm-eval reads them."""
    monkeypatch.chdir(REPO)


def test_multiple_choice_examples_come_from_lm_eval():
    task = load_task(MC, n_dist=6, n_test=8, seed=1)
    assert (task.answer_type, task.metric, task.name) == ("multiple_choice", "acc", MC)
    rows = [json.loads(x) for x in (FIXTURES / "data" / "mc_test.jsonl").read_text().splitlines()]
    for ex in task.test:
        row = rows[ex.meta["doc_id"]]
        assert ex.prompt.endswith(f"Question: {row['question']}\nAnswer:")
        assert ex.prompt.count("Question:") == 3  # two few-shot examples from train, then the document
        assert ex.choices == tuple(" " + c for c in row["choices"]) and ex.label == row["answer"]
        assert ex.meta["choice_chars"] == tuple(len(c) for c in row["choices"])
    assert task.options["dist_from"] == "test"  # train is the few-shot source, so D_dist is the rest of test
    check_disjoint(task.dist, task.test)


def test_loglikelihood_and_generation_kinds():
    ll = load_task(LL, n_dist=5, n_test=5)
    assert (ll.answer_type, ll.metric) == ("exact_match", "acc") and ll.options["metrics"] == ["perplexity", "acc"]
    ex = ll.test[0]
    assert ex.target.startswith(" ") and " " not in ex.target[1:] and not ex.prompt.endswith(" ")
    gen = load_task(GEN, n_dist=3, n_test=4)
    assert (gen.answer_type, gen.metric, gen.options["filter"], gen.test.max_new_tokens) == ("generation", "exact_match", "number", 8)
    assert gen.test.stop_strings(gen.test[0]) == ("\n", "Q:")


def test_splits_are_seeded_disjoint_and_recorded():
    a, b, c = (load_task(LL, n_dist=20, n_test=20, seed=s) for s in (0, 0, 1))
    assert a.test.ids == b.test.ids and a.dist.ids == b.dist.ids
    assert a.test.ids != c.test.ids
    assert not set(a.test.ids) & set(a.dist.ids)
    for key in ("lm_eval_version", "yaml_sha256", "config_sha256", "data_files_sha256"):
        assert a.options[key]
    # loading with the recorded options gives the same task again
    again = load_task(LL, n_dist=20, n_test=20, **loader_options(LL, a.options))
    assert again.test.content_hash == a.test.content_hash and again.dist.content_hash == a.dist.content_hash


def test_identity_follows_the_yaml(tmp_path):
    copy = tmp_path / "cel_last_word.yaml"
    shutil.copy(FIXTURES / "cel_last_word.yaml", copy)
    one = load_task(str(copy), n_dist=3, n_test=3).options["yaml_sha256"]
    copy.write_text(copy.read_text() + "# edited\n")
    assert load_task(str(copy), n_dist=3, n_test=3).options["yaml_sha256"] != one


def test_near_duplicates_leave_d_dist(tmp_path):
    rows = [{"text": f"count {w} one two three"} for w in ("a", "b", "c", "d")] * 2 + [{"text": "COUNT  a one two three"}]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    yaml = (FIXTURES / "cel_last_word.yaml").read_text().replace("tests/tasks/lm_eval_fixtures/data/ll_test.jsonl", str(data))
    (tmp_path / "dups.yaml").write_text(yaml.replace("task: cel_last_word", "task: cel_dups"))
    task = load_task(str(tmp_path / "dups.yaml"), n_dist=2, n_test=2)
    assert len({e.dedup_key for e in [*task.dist, *task.test]}) == 4  # 9 rows, 4 distinct texts
    with pytest.raises(ValueError, match="asked for 3 dist"):
        load_task(str(tmp_path / "dups.yaml"), n_dist=3, n_test=2)


@pytest.mark.parametrize(("name", "why"), [
    ("cel_perplexity.yaml", "not a 0/1 decision"),
])
def test_refusals_before_loading(name, why):
    with pytest.raises(ValueError, match=why):
        task_info(f"tests/tasks/lm_eval_fixtures/{name}")


@pytest.mark.parametrize(("cfg", "why"), [
    ({"output_type": "generate_until", "metric_list": [{"metric": "bleu"}]}, "not per-example 0/1"),
    ({"output_type": "generate_until", "unsafe_code": True}, "sandbox"),
    ({"output_type": "generate_until", "generation_kwargs": {"do_sample": True}}, "sampled"),
    ({"output_type": "multiple_choice", "metric_list": [{"metric": "f1"}, {"metric": "mcc"}]}, "not per-example 0/1"),
    ({"output_type": "loglikelihood", "metric_list": [{"metric": "perplexity"}]}, "not per-example 0/1"),
    ({"group": "g", "task": None}, "group"),
])
def test_config_refusals(cfg, why):
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ValueError, match=why):
        check_config("x.yaml", cfg)


def test_metric_choice():
    cfg = {"output_type": "multiple_choice", "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]}
    assert check_config("x", cfg) == "acc" and check_config("x", cfg, "acc_norm") == "acc_norm"
    assert check_config("x", {"output_type": "loglikelihood"}) == "acc"  # lm-eval's defaults: perplexity, acc
    task = load_task(MC, n_dist=2, n_test=2, metric="acc_norm")
    assert task.metric == "acc_norm"


def test_hub_dataset_offline_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="dataset_path: json") as err:
        load_task("tests/tasks/lm_eval_fixtures/cel_hub.yaml", n_dist=2, n_test=2)
    assert "\n" not in str(err.value)


def test_wrong_options_are_refused():
    with pytest.raises(ValueError, match="data_dir"):
        load_task(MC, data_dir="somewhere")
    with pytest.raises(ValueError, match="max_new_tokens applies"):
        load_task(MC, n_dist=2, n_test=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="does not exist"):
        load_task("tests/tasks/lm_eval_fixtures/no_such.yaml")
    with pytest.raises(ValueError, match="no such directory"):
        load_task("lm_eval:cel_sum_mc", include_path="tests/no_such_folder")


@pytest.mark.parametrize("completion", ["13", " 13", "13\n", "It is 13.", "14", "", "no number", "-13"])
def test_generation_judge_is_lm_eval_metric(completion):
    """The judge's verdict equals lm-eval's own pipeline: its filter over the response, then
    process_results (built here from lm-eval's task object directly)."""
    from lm_eval.tasks import TaskManager

    task = load_task(GEN, n_dist=2, n_test=10)
    lm_task = TaskManager(include_path=str(FIXTURES), include_defaults=False).load("cel_sum_gen")["tasks"]["cel_sum_gen"]
    docs = list(lm_task.test_docs())
    for ex in task.test:
        doc = docs[ex.meta["doc_id"]]
        answer = completion.replace("13", doc["answer"])
        inst = lm_task.construct_requests(doc=doc, ctx=ex.prompt, metadata=("cel_sum_gen", ex.meta["doc_id"], 1))
        inst.resps = [answer]
        lm_task._filters[0].apply([inst])  # lm-eval's first filter pipeline ("number")
        theirs = lm_task.process_results(doc, [inst.filtered_resps["number"]])["exact_match"]
        assert task.judge(ex, answer) == bool(theirs)
    assert task.judge(task.test[0], task.test[0].target) is True


@pytest.mark.slow
def test_lm_eval_name_with_include_path_and_offline_hub(monkeypatch):
    """``lm_eval:NAME`` finds a task of an include folder through lm-eval's TaskManager (whose index
    of lm-eval's own YAMLs this builds: seconds), and a stock hub-backed task offline fails at once."""
    task = load_task("lm_eval:cel_last_word", n_dist=3, n_test=3, include_path=str(FIXTURES))
    assert task.name == "lm_eval:cel_last_word" and task.options["include_path"] == [str(FIXTURES)]
    assert task.test.ids == load_task(LL, n_dist=3, n_test=3).test.ids
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="allenai/ai2_arc .*dataset_path: json"):
        load_task("lm_eval:arc_easy", include_path=str(FIXTURES))
    with pytest.raises(ValueError, match="knows no task"):
        load_task("lm_eval:no_such_task_here", include_path=str(FIXTURES))


def test_cli_task_options(tmp_path):
    """``--include-path`` becomes the loader's include_path; ``--max-new-tokens`` is left to the
    loader of an lm-eval task by name (its kind is known once loaded) and refused for a YAML that
    does not generate."""
    import argparse

    from cel_lens.cli.common import task_options_from_args
    from cel_lens.config import OptionError

    base = dict(chat_template=False, task_option=[], include_path=[])
    args = argparse.Namespace(task="lm_eval:cel_sum_gen", max_new_tokens=4, **{**base, "include_path": [str(FIXTURES)]})
    assert task_options_from_args(args) == {"max_new_tokens": 4, "include_path": [str(FIXTURES)]}
    with pytest.raises(OptionError, match="generation tasks"):
        task_options_from_args(argparse.Namespace(task=MC, max_new_tokens=4, **base))


def test_search_on_a_yaml_task_records_it_and_resumes(tiny_checkpoints, tmp_path):
    """A search of a task given by its YAML path runs, records the task's identity in the manifest,
    and a second call resumes the run directory (the task loads again from its name and options)."""
    import cel_lens as cl
    from cel_lens.model.load import load_model

    model = load_model(tiny_checkpoints["llama"], device="cpu", dtype="float32", loader="hooked")
    kw = dict(n_dist=12, n_test=12, k=1, pool_size=2, n_null=2, n_boot=200, out=tmp_path / "run", progress=False)
    run = cl.search(model, MC, **kw)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["task"]["name"] == MC and manifest["task"]["options"]["yaml_sha256"]
    assert manifest["task"]["answer_type"] == "multiple_choice" and run.result.n_test == 12
    again = cl.search(model, MC, **kw)
    assert str(again.result.heads) == str(run.result.heads) and again.result.gain == run.result.gain

"""The paper's tasks through lm-eval's own YAMLs (:mod:`cel_lens.tasks.lm_eval_task`) against
cel_lens's built-in loaders: the same document gives the same example (prompt, continuations,
label or target; multiple choice: the characters acc_norm divides by), so every decision is the same.

lm-eval's stock YAML is included by a local YAML that only points its dataset at the local files
(``../shared/data``; the shipped HellaSwag fixture), as a user without the hub would. MBPP is not
compared here: lm-eval's ``mbpp`` runs model-written code (``unsafe_code``), which the adapter
refuses; cel_lens's built-in ``mbpp`` runs lm-eval's judge in its sandbox, and
``test_lm_eval_parity.py`` holds its parity.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install 'cel_lens[parity]')")

from cel_lens.tasks import load_task  # noqa: E402
from cel_lens.tasks.arithmetic import CONFIGS  # noqa: E402

N = {"boolq": 60, "hellaswag": 20, "arithmetic": 100}


def local_yaml(tmp: Path, stock: str, name: str, files: dict[str, str], **keys: object) -> str:
    """A YAML that includes lm-eval's stock config ``stock`` (relative to lm_eval/tasks) with the
    dataset read from local ``files`` (split -> path) and ``keys`` overridden."""
    import lm_eval.tasks

    lines = [f"include: {Path(lm_eval.tasks.__file__).parent / stock}", f"task: {name}", "dataset_path: json",
             "dataset_name: null", "dataset_kwargs:", "  data_files:"]
    lines += [f"    {split}: {path}" for split, path in files.items()]
    lines += [f"{k}: {'null' if v is None else v}" for k, v in keys.items()]
    path = tmp / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def adapted(yaml: str, builtin) -> list:
    """The adapter's examples of the built-in examples' documents (same row indices) under ``yaml``:
    lm-eval's task object from its TaskManager, examples built as :func:`load_task` builds them."""
    from lm_eval.tasks import TaskManager

    from cel_lens.tasks.lm_eval_docs import build_examples

    task = next(iter(TaskManager(include_defaults=False).load(yaml)["tasks"].values()))
    split = task.config.test_split if task.has_test_docs() else task.config.validation_split
    return build_examples(task, list(task.eval_docs), sorted({_row(e) for e in builtin}), split, 1234)


def same_examples(builtin, adapted, row_of) -> list[str]:
    """Ids of built-in examples whose document, through lm-eval's YAML, is a different example."""
    by_doc = {e.meta["doc_id"]: e for e in adapted}
    bad = []
    for ex in builtin:
        other = by_doc[row_of(ex)]
        chars = ex.meta.get("choice_chars") or ()
        if ex.content_hash != other.content_hash or (chars and tuple(chars) != tuple(other.meta["choice_chars"])):
            bad.append(f"{ex.id}: {ex.prompt[-60:]!r} {ex.choices or ex.target!r} vs {other.prompt[-60:]!r} "
                       f"{other.choices or other.target!r}")
    return bad


def _row(ex) -> int:
    return int(ex.id.rsplit("/", 1)[1])


@pytest.mark.slow
def test_boolq_and_hellaswag_yamls_give_the_builtin_examples(data_dir, tmp_path, lm_side):
    rows = lm_side.write_jsonl(tmp_path / "boolq_val.jsonl", lm_side.superglue_boolq_rows(data_dir / "boolq" / "dev.jsonl"))
    yaml = local_yaml(tmp_path, "super_glue/boolq/default.yaml", "boolq_local", {"validation": str(rows)}, training_split=None)
    small = load_task(yaml, n_dist=2, n_test=2)
    assert (small.answer_type, small.metric, small.options["dist_from"]) == ("multiple_choice", "acc", "validation")
    builtin = load_task("boolq", n_dist=10, n_test=N["boolq"], data_dir=data_dir).test
    bad = same_examples(builtin, adapted(yaml, builtin), _row)

    hs_files = {"train": str(data_dir / "hellaswag" / "hellaswag_train.jsonl"),
                "validation": str(data_dir / "hellaswag" / "hellaswag_val.jsonl")}
    yaml = local_yaml(tmp_path, "hellaswag/hellaswag.yaml", "hellaswag_local", hs_files)
    assert load_task(yaml, n_dist=2, n_test=2, metric="acc_norm").options["dist_from"] == "train"
    builtin = load_task("hellaswag", n_dist=10, n_test=N["hellaswag"], data_dir=data_dir).test
    bad += same_examples(builtin, adapted(yaml, builtin), _row)
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_arithmetic_yamls_give_the_builtin_examples(data_dir, tmp_path):
    builtin = load_task("arithmetic", n_dist=10, n_test=N["arithmetic"], data_dir=data_dir).test
    bad = []
    for config in sorted({e.meta["config"] for e in builtin}):
        path = data_dir / "arithmetic" / CONFIGS[config]
        yaml = local_yaml(tmp_path, f"arithmetic/arithmetic_{config}.yaml", f"arithmetic_{config}_local", {"validation": str(path)})
        mine = [e for e in builtin if e.meta["config"] == config]
        bad += same_examples(mine, adapted(yaml, mine), _row)
    small = load_task(yaml, n_dist=2, n_test=2)
    assert (small.answer_type, small.metric) == ("exact_match", "acc")
    assert not bad, "\n".join(bad)

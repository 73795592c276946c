"""Any lm-evaluation-harness task as a cel_lens task: ``load_task("lm_eval:NAME")`` or
``load_task("path/to/task.yaml")`` (``--task`` the same; ``include_path`` as lm-eval's ``--include_path``).

lm-eval's own ``TaskManager`` builds the task object; its documents, prompts, few-shot contexts,
choices, targets, filters and metric make the examples and the judge (:mod:`~cel_lens.tasks.lm_eval_docs`),
never a copy of its logic. cel_lens adds what a head search needs:

* **Splits.** D_test is a seeded sample of the task's evaluation split (``test_split``, else
  ``validation_split``: the documents lm-eval evaluates, ids = lm-eval's ``doc_id``). D_dist comes
  from ``dist_from``: by default the training split, else the validation split (when it is not the
  evaluation split), else the rest of the evaluation split; a split that few-shot examples are drawn
  from is skipped unless it is the evaluation split (lm-eval never shows a document itself there).
  Both keep one document per normalised ``doc_to_text`` (:func:`~cel_lens.tasks.base.normalise_text`);
  D_dist loses any document worded like a D_test one (recorded under ``deduplication``).
* **Refusals before anything loads** (one line each): an output type or metric that is not a
  per-example 0/1 decision (``loglikelihood_rolling``, perplexity, BLEU, F1, ...), a task that runs
  model-written code (``unsafe_code``: cel_lens runs code only through its sandbox, in its ``mbpp``
  task), sampling, repeats, a group, and, offline, a dataset on the Hugging Face hub (with how to
  point it at local files: ``dataset_path: json`` and ``dataset_kwargs.data_files``).
* **Identity.** ``options`` records the YAML's sha256, the resolved config's sha256, the local data
  files' sha256, lm-eval's version and the splits used, so a changed YAML or lm-eval is another run.

Decisions: ``multiple_choice`` → ``acc`` or ``acc_norm``; ``loglikelihood`` → ``acc`` (is-greedy);
``generate_until`` → the task's filter (``filter``, default its first) then ``exact_match``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from cel_lens.tasks.base import Task, TaskSpec, dedup_record, normalise_text
from cel_lens.tasks.io import check_size, seeded_sample
from cel_lens.tasks.lm_eval_docs import ANSWER_TYPES, LmEvalJudge, build_examples

__all__ = ["PREFIX", "DECISION_METRICS", "LOCAL_BUILDERS", "task_config", "check_config",
           "spec_info", "load_lm_eval_task", "lm_eval_spec"]

PREFIX = "lm_eval:"
DECISION_METRICS: dict[str, tuple[str, ...]] = {
    "multiple_choice": ("acc", "acc_norm"),
    "loglikelihood": ("acc",),
    "generate_until": ("exact_match",),
}
"""Per output type, the metrics that are one 0/1 decision per example (what a head search counts)."""
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")
"""``dataset_path`` values that read local files (``dataset_kwargs.data_files``)."""
N_CAP = 1000  # default size cap of each split
FEWSHOT_SEED = 1234  # lm-eval's simple_evaluate default (fewshot_random_seed)


def _include(include_path: Any) -> Optional[tuple[str, ...]]:
    if include_path in (None, "", [], ()):
        return None
    paths = (include_path,) if isinstance(include_path, (str, Path)) else tuple(include_path)
    missing = [str(p) for p in paths if not Path(p).is_dir()]
    if missing:
        raise ValueError(f"include_path: no such directory: {', '.join(missing)}")
    return tuple(str(Path(p).resolve()) for p in paths)


@functools.lru_cache(maxsize=4)
def _manager(include: Optional[tuple[str, ...]], defaults: bool) -> Any:
    """lm-eval's TaskManager (indexing lm-eval's own ~15k YAMLs takes seconds: once per process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include) if include else None, include_defaults=defaults)


def _yaml_path(spec: str, include: Optional[tuple[str, ...]]) -> Path:
    if not spec.startswith(PREFIX):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ValueError(f"lm-eval task file {spec} does not exist (relative to {Path.cwd()})")
        return path.resolve()
    name = spec[len(PREFIX):]
    entry = _manager(include, True).task_index.get(name)
    if entry is None:
        raise ValueError(f"{spec}: lm-eval knows no task {name!r}" + ("" if include else " (a task of your own: include_path=DIR)"))
    if entry.yaml_path is None:
        raise ValueError(f"{spec}: a tag of several tasks, not one task; name one of them")
    return Path(entry.yaml_path)


def task_config(spec: str, include_path: Any = None) -> tuple[Path, dict[str, Any]]:
    """The YAML file of ``spec`` and its config with includes merged (lm-eval's YAML loader; no
    function is imported, no dataset read)."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError as err:
        raise ImportError(f"{spec} is an lm-evaluation-harness task: pip install 'cel_lens[lm-eval]' ({err})") from None

    path = _yaml_path(spec, _include(include_path))
    return path, load_yaml(path, resolve_func=False, recursive=True)


def _metric_names(cfg: Mapping[str, Any]) -> list[str]:
    from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY

    listed = [m.get("metric") for m in cfg.get("metric_list") or [] if isinstance(m, Mapping)]
    return [str(m) for m in listed] or list(DEFAULT_METRIC_REGISTRY.get(cfg.get("output_type"), []))


def check_config(spec: str, cfg: Mapping[str, Any], metric: Optional[str] = None) -> str:
    """The 0/1 metric cel_lens decides by (``metric`` if given), or ValueError saying in one line why
    ``spec`` cannot be a head-search task."""
    if "group" in cfg and "task" not in cfg:
        raise ValueError(f"{spec} is a group of tasks (lm-eval 'group'); name one of its tasks")
    out = cfg.get("output_type", "generate_until")
    if out not in DECISION_METRICS:
        raise ValueError(f"{spec}: output type {out} scores a whole text's likelihood (perplexity), not a 0/1 decision per example")
    if cfg.get("unsafe_code"):
        raise ValueError(f"{spec} runs model-written code, which cel_lens runs only in its sandbox "
                         "through its own judges (the built-in 'mbpp' task)")
    if (cfg.get("generation_kwargs") or {}).get("do_sample") or int(cfg.get("repeats") or 1) != 1:
        raise ValueError(f"{spec}: sampled or repeated generations are not one greedy decision per example")
    if out != "generate_until" and isinstance(cfg.get("process_results"), str) and cfg["process_results"]:
        raise ValueError(f"{spec}: its own process_results decides {out} examples; cel_lens decides them as lm-eval's default does")
    names = _metric_names(cfg)
    ok = [m for m in names if m in DECISION_METRICS[out]]
    if metric is not None:
        if metric not in ok:
            raise ValueError(f"{spec}: metric {metric!r} is not one of its 0/1 metrics ({', '.join(ok) or 'none'})")
        return metric
    if not ok:
        raise ValueError(f"{spec}: its metrics ({', '.join(names)}) are not per-example 0/1 decisions "
                         f"(a {out} task needs {' or '.join(DECISION_METRICS[out])})")
    return ok[0]


def check_dataset(spec: str, cfg: Mapping[str, Any]) -> None:
    """Offline, a dataset on the hub fails here at once, with how to point it at local files."""
    source = str(cfg.get("dataset_path") or "")
    files = _file_list(cfg)
    remote = [f for f in files if "://" in f]
    if remote:
        source = remote[0]
    elif source in LOCAL_BUILDERS or (source and Path(source).expanduser().exists()):
        return
    from cel_lens.model.hub import hub_offline, hub_reachable  # here: cel_lens.model loads transformer_lens

    if hub_offline() or not hub_reachable():
        raise ConnectionError(
            f"{spec} reads {source} from the Hugging Face hub, which is offline: copy its YAML and set "
            "'dataset_path: json' and 'dataset_kwargs: {data_files: {" + str(cfg.get("test_split") or cfg.get("validation_split")
            or "test") + ": path/to/rows.jsonl}}', then pass that YAML's path (or its folder as include_path)")


def spec_info(spec: str) -> dict[str, Any]:
    """What ``spec`` declares, for listings and checks: cheap for a YAML path (read, checked, answer type and
    metric); ``lm_eval:NAME`` reports its answer type once loaded (finding it indexes lm-eval's YAMLs)."""
    info: dict[str, Any] = {"source": "lm-eval", "answer_type": None, "metric": None}
    if not spec.startswith(PREFIX):
        _, cfg = task_config(spec)
        info.update(answer_type=ANSWER_TYPES.get(cfg.get("output_type", "generate_until")), metric=check_config(spec, cfg),
                    output_type=cfg.get("output_type", "generate_until"))
    return info


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _split_files(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(split, path)`` of every file in ``dataset_kwargs.data_files``."""
    files = (cfg.get("dataset_kwargs") or {}).get("data_files") or {}
    files = {"data": files} if isinstance(files, (str, list)) else dict(files)
    return [(split, str(p)) for split, paths in files.items() for p in ([paths] if isinstance(paths, str) else paths)]


def _file_list(cfg: Mapping[str, Any]) -> list[str]:
    return [p for _, p in _split_files(cfg)]


def _data_files(cfg: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each local data file, keyed ``split:path``."""
    return {f"{split}:{p}": _sha256(Path(p).read_bytes()) for split, p in _split_files(cfg) if Path(p).is_file()}


def _docs(task: Any, split: Optional[str]) -> list[Mapping[str, Any]]:
    reader = {task.config.training_split: task.training_docs, task.config.validation_split: task.validation_docs,
              task.config.test_split: task.test_docs}
    return list(reader[split]())


def _dist_source(task: Any, eval_split: str, dist_from: Optional[str]) -> str:
    cfg = task.config
    defined = [s for s in (cfg.training_split, cfg.validation_split, cfg.test_split) if s]
    if dist_from is not None:
        if dist_from not in defined:
            raise ValueError(f"{cfg.task}: dist_from {dist_from!r} is not one of its splits ({', '.join(defined)})")
        return dist_from
    shots = (cfg.num_fewshot or 0) > 0
    fewshot_split = cfg.fewshot_split or cfg.training_split or cfg.validation_split
    for s in (cfg.training_split, cfg.validation_split):
        if s and s != eval_split and not (shots and s == fewshot_split):
            return s
    return eval_split


def _unique(docs: Sequence[Mapping[str, Any]], task: Any, skip: set[int] = frozenset()) -> dict[str, int]:
    """Normalised ``doc_to_text`` -> first document index with it (``skip``: indices left out)."""
    keys: dict[str, int] = {}
    for i, doc in enumerate(docs):
        if i not in skip:
            keys.setdefault(normalise_text(str(task.doc_to_text(doc))), i)
    return keys


def _choose_docs(task: Any, eval_split: str, dist_split: str, n_dist: Optional[int], n_test: Optional[int],
                 seed: int) -> tuple[list, list[int], list, list[int], list[tuple[str, str]]]:
    """Documents of both splits and the seeded, disjoint, deduplicated indices drawn from them."""
    name = task.config.task
    test_docs = _docs(task, eval_split)
    test_keys = _unique(test_docs, task)
    same = dist_split == eval_split
    half = len(test_keys) // 2 if same else len(test_keys)
    n_test = check_size(n_test, min(half, N_CAP), len(test_keys), "test", f"{name} {eval_split} (distinct documents)")
    test_ids = seeded_sample(sorted(test_keys.values()), n_test, seed, f"{name}/test")
    dist_docs = test_docs if same else _docs(task, dist_split)
    dist_keys = _unique(dist_docs, task, skip=set(test_ids) if same else set())
    chosen = {normalise_text(str(task.doc_to_text(test_docs[i]))): i for i in test_ids}
    removed = [(f"{name}/{dist_split}/{i}", f"{name}/{eval_split}/{chosen[k]}") for k, i in dist_keys.items() if k in chosen]
    eligible = sorted(i for k, i in dist_keys.items() if k not in chosen)
    n_dist = check_size(n_dist, min(len(eligible), N_CAP), len(eligible), "dist", f"{name} {dist_split} (distinct, unlike D_test)")
    return test_docs, test_ids, dist_docs, seeded_sample(eligible, n_dist, seed, f"{name}/dist"), removed


def _build(spec: str, include: Optional[tuple[str, ...]], path: Path) -> Any:
    """lm-eval's task object (its TaskManager; reads the dataset)."""
    from lm_eval.api.task import ConfigurableTask

    manager = _manager(include, spec.startswith(PREFIX))
    tasks = manager.load(spec[len(PREFIX):] if spec.startswith(PREFIX) else str(path))["tasks"]
    if len(tasks) != 1:
        raise ValueError(f"{spec} holds {len(tasks)} tasks ({', '.join(tasks)}); name one of them")
    task = next(iter(tasks.values()))
    if not isinstance(task, ConfigurableTask):
        raise ValueError(f"{spec}: a Python task class ({type(task).__name__}), not a YAML-configured task")
    if task.multiple_input or task.multiple_target:
        raise ValueError(f"{spec}: a context per choice or several correct choices is not one cel_lens decision")
    return task


def load_lm_eval_task(
    spec: str,
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    data_dir: Optional[str] = None,
    *,
    include_path: Any = None,
    dist_from: Optional[str] = None,
    num_fewshot: Optional[int] = None,
    fewshot_seed: Optional[int] = FEWSHOT_SEED,
    metric: Optional[str] = None,
    filter: Optional[str] = None,  # noqa: A002 - lm-eval's word
    max_new_tokens: Optional[int] = None,
    chat_template: bool = False,
    splits: Sequence[str] = ("dist", "test"),
) -> Task:
    """The lm-eval task ``spec`` (``"lm_eval:NAME"`` or a YAML path) as a :class:`Task` (module docstring).

    ``dist_from``: the lm-eval split D_dist is drawn from; ``num_fewshot`` overrides the YAML's;
    ``fewshot_seed``: lm-eval's ``fewshot_random_seed``; ``metric``: which 0/1 metric decides
    (default the task's first); ``filter``: a generate_until task's filter pipeline (default its
    first); ``max_new_tokens``: overrides ``generation_kwargs.max_gen_toks``.
    """
    if data_dir is not None:
        raise ValueError(f"{spec}: an lm-eval task names its data in its YAML (dataset_path, dataset_kwargs.data_files), not data_dir")
    if chat_template:
        raise ValueError(f"{spec}: chat templates are not supported for lm-eval tasks (prompts would differ from lm-eval's)")
    include = _include(include_path)
    path, cfg = task_config(spec, include)
    chosen = check_config(spec, cfg, metric)
    out = cfg.get("output_type", "generate_until")
    if max_new_tokens is not None and out != "generate_until":
        raise ValueError(f"{spec}: max_new_tokens applies to generate_until tasks; this one is {out}")
    check_dataset(spec, cfg)
    import lm_eval

    task = _build(spec, include, path)
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=int(num_fewshot))
    eval_split = task.config.test_split if task.has_test_docs() else task.config.validation_split
    dist_split = _dist_source(task, eval_split, dist_from)
    test_docs, test_ids, dist_docs, dist_ids, removed = _choose_docs(task, eval_split, dist_split, n_dist, n_test, seed)
    test = build_examples(task, test_docs, test_ids, eval_split, fewshot_seed) if "test" in splits else []
    dist = build_examples(task, dist_docs, dist_ids, dist_split, fewshot_seed) if "dist" in splits else []
    options = _options(spec, path, cfg, task, lm_eval.__version__, include, chosen, seed, fewshot_seed, removed,
                       {"dist_from": dist_split, "test_from": eval_split})
    judge = None
    if out == "generate_until":
        docs = {**{e.id: dist_docs[e.meta["doc_id"]] for e in dist}, **{e.id: test_docs[e.meta["doc_id"]] for e in test}}
        judge = LmEvalJudge(task, docs, chosen, filter)
        gen = task.config.generation_kwargs or {}
        options.update(filter=judge.filter_name, max_new_tokens=int(max_new_tokens or gen.get("max_gen_toks", 256)))
    elif filter is not None:
        raise ValueError(f"{spec}: filter applies to generate_until tasks; this one is {out}")
    return Task(name=spec, answer_type=ANSWER_TYPES[out], dist=tuple(dist), test=tuple(test), metric=chosen, judge=judge,
                options=options)


def _options(spec: str, path: Path, cfg: Mapping[str, Any], task: Any, version: str, include: Optional[tuple[str, ...]],
             metric: str, seed: int, fewshot_seed: Optional[int], removed: list, sources: Mapping[str, str]) -> dict[str, Any]:
    """What the run manifest records: the loader's options (to load it again) and the task's identity."""
    config = json.dumps(task.dump_config(), sort_keys=True, default=str).encode()
    opts: dict[str, Any] = {
        "source": "lm-eval", "lm_eval_version": version, "lm_eval_task": task.config.task, "yaml": str(path),
        "yaml_sha256": _sha256(path.read_bytes()), "config_sha256": _sha256(config),
        "include_path": list(include) if include else None, "output_type": cfg.get("output_type", "generate_until"),
        "metrics": _metric_names(cfg), "metric": metric, "seed": seed, "fewshot_seed": fewshot_seed,
        "num_fewshot": task.config.num_fewshot or 0, "dataset": str(cfg.get("dataset_path")),
        "data_files_sha256": _data_files(cfg), "chat_template": False, **sources,
        "protocol": f"lm-evaluation-harness {version} task {task.config.task}: its prompts, choices, targets, "
                    f"filters and metric ({metric}), from its task object",
    }
    if removed:
        opts["deduplication"] = dedup_record(removed)
    return opts


def lm_eval_spec(spec: str) -> TaskSpec:
    """The task ``spec`` (``"lm_eval:NAME"`` or a task YAML path) in the form the task registry
    gives every task: its loader (:func:`load_lm_eval_task` with ``spec`` bound) and its info
    (:func:`spec_info`)."""
    return TaskSpec(functools.partial(load_lm_eval_task, spec), spec_info(spec))

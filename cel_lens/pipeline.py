"""``cel_lens.search(model, task)``: the composition root of a CEL search.

It reads top to bottom: choose the backend (:mod:`cel_lens.backends`), load the task, open an
evaluation oracle over the model, write the manifest and open the run directory
(:mod:`cel_lens.runs`), score heads (:mod:`cel_lens.scoring`), run Algorithm 1
(:mod:`cel_lens.selection`) over an oracle that records every evaluation, and return a :class:`Run`.
The same call after a crash resumes and reaches the same result.

What a search computes is a :class:`~cel_lens.config.SearchConfig` (the manifest records it, and a
run directory refuses a different one); how it runs is :class:`~cel_lens.config.ExecutionSettings`
(device, batch size, store, progress, backend), which never changes a result. Every option is
checked before anything is loaded, the task (non-empty splits) before the model is, and nothing is
written to the run directory before all of that and the model have loaded: a bad input leaves no
directory behind to refuse the corrected rerun.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import torch

from cel_lens.backends.base import backend_class, get_backend
from cel_lens.config import RANK_RULES, ExecutionSettings, OptionError, SearchConfig, check_split_sizes
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.precision import resolve_precision
from cel_lens.evaluation.seal import SealReader, recorded_reads
from cel_lens.model.load import resolve_dtype
from cel_lens.oracle import DIST_SPLIT, Stage1Scores
from cel_lens.model.ablation import ablation_kind
from cel_lens.progress import info_stream, progress_session
from cel_lens.runs.ablation_record import learn_ablation
from cel_lens.runs.run_dir import RunDir
from cel_lens.runs.run_precision import PRECISION_RECORD, record_precision, search_precision_kind, show_search_precision
from cel_lens.runs.journal_io import write_json_atomic
from cel_lens.runs.manifest import EXAMPLES, build_manifest, default_run_dir
from cel_lens.runs.recording_oracle import RecordingOracle
from cel_lens.scoring.base import scorer_from_config
from cel_lens.selection.algorithm import run_search
from cel_lens.selection.plan import BatchTimer, SearchPlan, plan_search
from cel_lens.selection.plan_calibration import CALIBRATION_BUDGET_S
from cel_lens.selection.plan_calibration import calibration_layers  # noqa: F401 - where callers found it
from cel_lens.selection.plan_calibration import calibrate as calibrate_plan
from cel_lens.selection.plan_memory import search_memory
from cel_lens.selection.result import Result, format_result
from cel_lens.tasks.base import Task
from cel_lens.tasks.registry import SPLIT_NAMES, load_task, loaded_splits, loader_options

__all__ = ["SearchConfig", "ExecutionSettings", "TASK_OPTIONS", "SIZE_OPTIONS", "Run", "check_task", "resolve_task", "search", "plan"]

TASK_OPTIONS = ("n_dist", "n_test", "data_dir", "chat_template", "max_new_tokens")
"""Keyword arguments of :func:`search` that load a task given by name (with ``seed``):
``chat_template=True`` wraps prompts in the tokenizer's chat template (Instruct models),
``max_new_tokens`` is a generation task's budget (MBPP). Any other keyword the task's loader takes
(BoolQ's ``dist_from="validation"``) loads a task given by name too."""


@dataclass
class Run:
    """A finished search: its run directory, :class:`~cel_lens.selection.Result` and manifest, and
    the :class:`~cel_lens.selection.plan.SearchPlan` it printed (timed by its first batch)."""

    path: Optional[Path]
    result: Result
    manifest: dict[str, Any]
    oracle: Optional[RecordingOracle] = field(default=None, repr=False)
    plan: Optional[SearchPlan] = field(default=None, repr=False)

    def __str__(self) -> str:
        return format_result(self.result, extra=[("run directory", str(self.path))])

    def _repr_html_(self) -> str:
        return f"<p>run <code>{self.path}</code></p>{self.result._repr_html_()}"


def _loading_options(task: Any, options: Mapping[str, Any], taken: set[str]) -> set[str]:
    """The names in ``options`` (other than ``taken``: the config's and settings' fields) that the
    loader of ``task`` (a name, or a Task's name) takes as keywords: BoolQ's ``dist_from``, MBPP's
    ``judge``, ... (:func:`~cel_lens.tasks.registry.loader_options`); none for an unregistered task."""
    name = task if isinstance(task, str) else getattr(task, "name", None)
    try:
        return set(loader_options(name, {k: v for k, v in options.items() if k not in taken}))
    except (ValueError, TypeError):
        return set()


def _split_options(
    config: Optional[SearchConfig], settings: Optional[ExecutionSettings], options: Mapping[str, Any],
    task: Any = None,
) -> tuple[SearchConfig, ExecutionSettings, dict[str, Any]]:
    """Sort keyword options into the search config, the execution settings and task options (those
    of :data:`TASK_OPTIONS`, and any other keyword the loader of ``task`` takes)."""
    config_names = {f.name for f in fields(SearchConfig)}
    settings_names = {f.name for f in fields(ExecutionSettings)}
    loading = _loading_options(task, options, config_names | settings_names) | set(TASK_OPTIONS)
    unknown = sorted(set(options) - config_names - settings_names - loading)
    if unknown:
        raise TypeError(
            f"search() got unknown option(s) {', '.join(unknown)}; options are "
            f"{', '.join(sorted(config_names | settings_names | set(TASK_OPTIONS)))}, and the task loader's "
            "(e.g. BoolQ's dist_from)"
        )
    for name, kind in (("config", SearchConfig), ("settings", ExecutionSettings)):
        given = config if name == "config" else settings
        if given is not None and not isinstance(given, kind):
            raise TypeError(f"search() {name} must be a {kind.__name__}, got {type(given).__name__}")
    if isinstance(options.get("store_dtype"), torch.dtype):
        options = {**options, "store_dtype": str(options["store_dtype"]).removeprefix("torch.")}
    config = replace(config or SearchConfig(), **{k: v for k, v in options.items() if k in config_names})
    settings = replace(settings or ExecutionSettings(), **{k: v for k, v in options.items() if k in settings_names})
    task_options = {k: v for k, v in options.items() if k in loading}
    check_split_sizes(task_options.get("n_dist"), task_options.get("n_test"))
    config, settings = config.validate(), settings.validate()
    if ablation_kind(config.ablation).learns and not backend_class(settings.backend).in_process:
        raise OptionError(
            "ablation", f"ablation={config.ablation!r} runs on the local backend only ({settings.backend} workers "
            "load their own model copies, which would not carry the learnt ablation)"
        )
    return config, settings, task_options


def check_task(task: Task) -> Task:
    """``task`` if a search can run on it (a :class:`~cel_lens.tasks.Task` with a non-empty
    discovery and test split); ``ValueError`` naming the split otherwise."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task or a task name, got {type(task).__name__}")
    if loaded_splits(task) != SPLIT_NAMES:
        raise ValueError(
            f"task {task.name!r} was loaded with its {' and '.join(loaded_splits(task))} split only "
            "(load_task(..., splits=...)); a search needs both: load it without splits="
        )
    for name, option in (("dist", "n_dist"), ("test", "n_test")):
        if len(task.split(name)) == 0:
            raise ValueError(
                f"task {task.name!r} has an empty {name} split ({option}=0); a search needs at least one example in each split"
            )
    return task


SIZE_OPTIONS = ("n_dist", "n_test")
"""Task options that also apply to a :class:`~cel_lens.tasks.Task` object: its first ``n`` examples
of that split (splits are already shuffled by their seed), so ``search(model, task, **QUICK)`` and
``plan(model, task, **QUICK)`` both work on a loaded task."""


def resolve_task(task: Union[Task, str], config: SearchConfig, task_options: Mapping[str, Any]) -> Task:
    """The task :func:`search` and :func:`plan` run on, resolved once for both: a name is loaded
    with ``task_options``; a :class:`~cel_lens.tasks.Task` is cut to ``n_dist``/``n_test`` (its
    first examples; never grown), and any other loading option is refused for it."""
    if isinstance(task, str):
        return check_task(load_task(task, seed=config.task_seed, **task_options))
    loading = sorted(set(task_options) - set(SIZE_OPTIONS))
    if loading:
        raise TypeError(
            f"option(s) {', '.join(loading)} apply only to a task given by name, not to a Task object "
            "(pass them to load_task instead)"
        )
    check_task(task)
    sizes = {name: task_options[name] for name in SIZE_OPTIONS if task_options.get(name) is not None}
    if not sizes:
        return task
    cut = {split: task.split(split).subset(int(sizes[f"n_{split}"])) for split in ("dist", "test") if f"n_{split}" in sizes}
    return replace(task, **cut)


def _stage1_scores(
    config: SearchConfig, oracle: RecordingOracle, run: RunDir, settings: ExecutionSettings
) -> Optional[Stage1Scores]:
    """Scores of the config's scorer (:mod:`~cel_lens.scoring.base`; ``None`` when the search
    computes them itself, as exact), read back from the run directory when recorded (attribution
    scores are not bit-reproducible across machines), with the split they were recorded with
    (records older than that field were all written by this function, which scores D_dist only)."""
    scorer = scorer_from_config(config)
    if scorer.in_search:
        return None
    recorded = [e for e in run.events("stage1_scores") if e.get("scorer") == config.scorer]
    if recorded:
        return Stage1Scores(
            torch.tensor(recorded[0]["scores"], dtype=torch.float64), recorded[0].get("split", DIST_SPLIT), config.scorer
        )
    return scorer.score(oracle, batch_size=settings.batch_size, progress=settings.progress)


def _plan_for(config: SearchConfig, n_layers: int, n_heads: int, task: Task, controls: bool = True) -> SearchPlan:
    """The plan of ``config`` on a model of that layout and ``task``'s splits (raises when ``k``
    exceeds the model's heads)."""
    return plan_search(n_layers, n_heads, len(task.dist), len(task.test), config=config, controls=controls)


def _search_with_controls(
    config: SearchConfig, settings: ExecutionSettings, oracle: Any, recording: RecordingOracle, run_dir: RunDir,
    task: Task, test_reads: Any = None,
) -> Result:
    """Algorithm 1 under the config's ablation kind (learnt on D_dist first, when it learns); the
    search itself adds S-hat's D_test gain under the other kinds where the oracle declares
    :data:`~cel_lens.oracle.CONTROLS` (a model in this process), and writes the result once.
    ``test_reads``: the earlier D_test reads the selection is checked against (:mod:`cel_lens.evaluation.seal`)."""
    model = oracle.local_model()
    if model is not None:  # the search's ablation kind, learnt on D_dist first when it learns
        oracle.use_context(oracle.context.with_(ablation=learn_ablation(model, task.dist, config.ablation, config.seed,
                                                                        run_dir)))
    t0 = time.perf_counter()
    scores = _stage1_scores(config, recording, run_dir, settings)
    if scores is not None:  # a scorer that runs before the search (attribution, compressed): stage 1's time
        scores = replace(scores, seconds=time.perf_counter() - t0)
    return run_search(recording, config=config, scores=scores, progress=settings.progress, test_reads=test_reads)


class _PlanReport:
    """Prints the plan before stage 1 and the estimate after the first timed batch (when progress is
    shown: on stderr, or stdout in a notebook, :func:`~cel_lens.progress.info_stream`); keeps the
    timed plan for :attr:`Run.plan`."""

    def __init__(self, plan: SearchPlan, show: bool) -> None:
        self.plan, self.show = plan, show

    def start(self, recorded: int, finished: bool) -> None:
        self.plan = replace(self.plan, recorded=recorded)
        if self.show and not finished:
            print(self.plan, file=info_stream(), flush=True)

    def timed(self, seconds_per_unit: float, cpu_share: Optional[float] = None) -> None:
        self.plan = self.plan.timed(seconds_per_unit, cpu_share)
        if self.show:
            print(self.plan.estimate_line(), file=info_stream(), flush=True)


def plan(
    model: Any,
    task: Union[Task, str],
    config: Optional[SearchConfig] = None,
    *,
    settings: Optional[ExecutionSettings] = None,
    calibrate: bool = True,
    calibration_examples: int = 32,
    calibration_heads: int = 18,
    calibration_budget_s: float = CALIBRATION_BUDGET_S,
    **options: Any,
) -> SearchPlan:
    """What :func:`search` with the same arguments would evaluate, stage by stage, without
    searching or writing anything. With ``calibrate`` (default) the intact model and one batch of
    single-head ablations (every head of a few layers, about ``calibration_heads``,
    :func:`~cel_lens.selection.plan_calibration.calibration_layers`) run on the first ``calibration_examples``
    D_dist examples, fewer heads when they would pass ``calibration_budget_s`` CPU seconds (it
    says what it runs before running it); the plan carries the CPU time they took per head set per
    example (:meth:`SearchPlan.seconds`) and the CPU share measured with it
    (:meth:`SearchPlan.wall_seconds`), and what the calibration itself cost
    (``calibration_cpu_s``). ``calibrate=False`` runs nothing and estimates nothing. The default 32
    examples: a search's calls run over all of D_dist, and on 8 examples a call's own costs, spread
    over few examples, made SmolLM2's ``--quick`` plans 1.1-1.5x those on 32, which agree within 3 %."""
    config, settings, task_options = _split_options(config, settings, options, task)
    task = resolve_task(task, config, task_options)
    n = max(1, min(calibration_examples, len(task.dist)))
    sample = replace(task, dist=task.dist.subset(n), test=task.test.subset(1)) if calibrate else task
    context = EvalContext.from_environment(config.precision, reader=SealReader("plan"))
    oracle = get_backend(settings.backend).open(model, sample, replace(settings, progress=False), context=context)
    try:
        local = oracle.local_model()
        result = _plan_for(config, oracle.n_layers, oracle.n_heads, task, local is not None)
        if local is not None:  # the memory of the whole task's search, not the calibration sample's
            result = replace(result, memory=_memory_for(oracle, task, config, settings))
        if calibrate:
            result = calibrate_plan(result, oracle, task.dist.examples, sample.dist.examples, heads=calibration_heads,
                                    budget_s=calibration_budget_s, show=settings.progress)
    finally:
        oracle.close()
    return result


def _memory_for(oracle: Any, task: Task, config: SearchConfig, settings: ExecutionSettings) -> Any:
    """The search's memory plan on the oracle's model (:func:`~cel_lens.selection.plan_memory.search_memory`)
    in the precision the search computes in."""
    store_dtype = None if config.store_dtype is None else resolve_dtype(config.store_dtype)
    model = oracle.local_model()
    precision = resolve_precision(oracle.context.precision, model, search_precision_kind(oracle, task))
    return search_memory(model, task.dist, len(task.test), batch_size=settings.batch_size,
                         store_budget=settings.store_budget, store_dtype=store_dtype, precision=precision,
                         use_store=settings.use_store)


def search(
    model: Any,
    task: Union[Task, str],
    config: Optional[SearchConfig] = None,
    *,
    out: Optional[Union[str, Path]] = None,
    settings: Optional[ExecutionSettings] = None,
    **options: Any,
) -> Run:
    """Algorithm 1 of the paper on ``model`` and ``task``; returns a :class:`Run` with ``.result``.

    ``model`` is a HookedTransformer/TransformerBridge, or a name/path for :func:`cel_lens.load_model`
    (loaded by the backend, with ``settings.device``/``dtype``); ``task`` a :class:`~cel_lens.tasks.Task`
    or a task name (loaded with ``n_dist``, ``n_test``, ``data_dir``, any keyword its loader takes, such
    as BoolQ's ``dist_from``, and the config's ``split_seed``, which defaults to its ``seed``).
    ``config`` says what to compute (:class:`SearchConfig`), ``settings`` how
    (:class:`~cel_lens.backends.ExecutionSettings`); any of their fields may also be passed as a
    keyword (``search(model, task, k=2, batch_size=16)``).

    Stage 1 scores every head on D_dist, the top ``pool_size`` heads form the pool, every subset of
    1..``k`` pool heads is evaluated jointly on D_dist, the best is fixed and recorded, and only then
    is D_test read: gain, paired bootstrap CI, McNemar p-value and a random-subset null. Everything
    is recorded in ``out`` (default: ``runs/<model>__<task>__<config hash>``); calling again with
    the same arguments resumes without re-evaluating anything recorded. ``backend="ray"`` spreads
    the evaluations over Ray actors (see ``docs/distributed.md``); either backend resumes the other's run.
    """
    config, settings, task_options = _split_options(config, settings, options, task)
    backend = get_backend(settings.backend)
    task = resolve_task(task, config, task_options)
    RANK_RULES.resolve(config.rank_by).check_answer_type(task.answer_type)  # before anything is written
    store_dtype = None if config.store_dtype is None else resolve_dtype(config.store_dtype)
    context = EvalContext.from_environment(config.precision)  # the search's settings, passed down (no model state)
    oracle = backend.open(model, task, settings, store_dtype=store_dtype, context=context)
    if settings.progress:
        show_search_precision(oracle, task)
    run_dir: Optional[RunDir] = None
    try:
        local = oracle.local_model()
        report = _PlanReport(_plan_for(config, oracle.n_layers, oracle.n_heads, task, local is not None), settings.progress)
        manifest = build_manifest(oracle.model_manifest, task, config.manifest_options(settings.use_store), examples=True)
        path = Path(out) if out is not None else default_run_dir(manifest)
        run_dir = RunDir.open(path, manifest, ignore=("versions", "cel_lens", TEST_SEAL, EXAMPLES, PRECISION_RECORD))
        recording = RecordingOracle(oracle, run_dir)
        timer = BatchTimer(n_layers=oracle.n_layers)
        timer.on_first = lambda rate: report.timed(rate, timer.cpu_share)
        recording.timer = timer
        report.start(recording.answered(), run_dir.finished)
        key = default_run_dir(manifest, root="").name  # the configuration's identity, whatever the directory
        oracle.use_context(context.with_(reader=SealReader(f"search {path}", key=key)))
        with progress_session(settings.progress, desc=f"search {task.name}"):
            result = _search_with_controls(
                config, settings, oracle, recording, run_dir, task,
                test_reads=lambda: recorded_reads(local if local is not None else str(manifest["model"]["id"]),
                                                  task.test, exclude_key=key),  # weights too, not only the name
            )
        manifest = record_seal(run_dir, manifest, result)
        manifest = record_precision(run_dir, manifest, oracle, config, task)
    finally:
        if run_dir is not None:
            run_dir.close()
        oracle.close()
    return Run(path=path, result=result, manifest=manifest, oracle=recording, plan=report.plan)


TEST_SEAL = "test_seal"
"""The manifest's entry, added once the selection is fixed: whether D_test was read before it, and why."""


def record_seal(run_dir: RunDir, manifest: dict[str, Any], result: Result) -> dict[str, Any]:
    """``manifest`` with its :data:`TEST_SEAL` entry (``selected_before_test`` and the ledger's
    record, :mod:`cel_lens.evaluation.seal`), written into the run directory's manifest once (a
    reopened run ignores the entry when it compares manifests; a read-only directory keeps its own)."""
    seal = {"selected_before_test": result.test.selected_before_test, **(result.test.seal or {})}
    if run_dir.manifest.get(TEST_SEAL) is None:
        try:
            write_json_atomic(run_dir.manifest_path, {**run_dir.manifest, TEST_SEAL: seal})
        except OSError:
            pass  # a read-only run directory: the result still says it
    return {**manifest, TEST_SEAL: run_dir.manifest.get(TEST_SEAL, seal)}

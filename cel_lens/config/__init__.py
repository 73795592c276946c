"""What a search computes and how it runs: two small dataclasses, checked before any work starts.

:class:`SearchConfig` holds every option that can change a search's result (a run's manifest
records it, and a run directory refuses a different one); :class:`ExecutionSettings` holds how the
search runs (device, batch size, activation store, progress bars, backend), which never changes a
result. Both are plain data with the defaults the whole project uses; each field's ``metadata``
holds its help text (and choices), from which ``cel-lens`` generates its flags
(:mod:`cel_lens.cli.options`), and
:meth:`SearchConfig.validate` / :meth:`ExecutionSettings.validate` check every field up front, so a
bad option fails in one line before a model is loaded or a run directory is written. The closed
sets the choices come from (scorers, strategies, parsimony rules, ..., BOS rules) are the registries
of :mod:`cel_lens.config.options`, re-exported here. This package imports nothing heavy, so
``cel-lens --help`` answers at once.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

from cel_lens.config.options import (
    ABLATION_KINDS, BACKENDS, BOS_RULES, CI_METHODS, LOADERS, PARSIMONY_RULES, PRECISIONS, RANK_RULES, SCORERS,
    STRATEGIES,
)

__all__ = [
    "DEFAULT_K",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_N_NULL",
    "DEFAULT_N_STABILITY",
    "SCORERS",
    "STRATEGIES",
    "PARSIMONY_RULES",
    "CI_METHODS",
    "BACKENDS",
    "ABLATION_KINDS",
    "BOS_RULES",
    "LOADERS",
    "PRECISIONS",
    "RANK_RULES",
    "DTYPE_ALIASES",
    "QUICK",
    "canonical_dtype",
    "OptionError",
    "check_split_sizes",
    "check_max_new_tokens",
    "check_fields",
    "SearchConfig",
    "ExecutionSettings",
]

DEFAULT_K = 3
"""Largest subset size (the paper's k)."""
#: Default candidate pool size m. With the paper's k = 3, m = 12 gives 12 + 66 + 220 = 298 joint
#: ablations in stage 2: fewer than half of stage 1's single-head evaluations on the paper's models
#: (Llama-3.2-3B: 28 x 24 = 672 heads, Qwen2.5-3B: 36 x 16 = 576, SmolLM3-3B: 36 x 16 = 576), so
#: stage 2 never dominates the cost, while m = 16 would already need 696 (more than stage 1) and
#: m = 8 only 92 (a pool too narrow to hold heads that help only jointly with a weaker one).
DEFAULT_POOL_SIZE = 12
DEFAULT_N_NULL = 100
"""Random head sets in the null (one test-split evaluation each)."""
DEFAULT_N_STABILITY = 1000
"""Bootstrap resamples of D_dist for the selection stability."""

QUICK: dict[str, int] = {"n_dist": 200, "n_test": 200, "k": 2, "pool_size": 6, "n_null": 20, "n_boot": 1000}
"""The ``--quick`` preset, for a first look (``search(model, "arithmetic", **QUICK)``): 200
examples a split (confidence intervals about 2.2 times as wide as with 1,000), subsets of at most 2
of the 6 best heads (6 + 15 = 21 joint ablations instead of 298), a null of 20 sets (its smallest
p, 1/21, still below 0.05) and 1,000 bootstrap resamples. Any option given explicitly wins over the
preset.

The preset itself does not cut exact stage 1: every head alone on the 200 D_dist examples. The
CLI's ``--quick`` adds a time budget on top (:mod:`cel_lens.selection.plan_quick`): it calibrates
the plan and, where the search would run past about 12 minutes, takes the pre-screen and smaller
splits until it fits, and says what it gave up. The preset alone is
minutes on a small model (the organisms, a few layers), but not on a real one on a CPU:
SmolLM2-135M-Instruct's 270 heads take 19 CPU minutes on Arithmetic's 21-token prompts in
float32 and 12 in bf16 (the default on a CPU with native bf16) on an Intel Xeon with AMX (34 and
18 on an AMD EPYC without it), and over an hour on BoolQ's passages (measured:
``benchmarks/RESULTS.md``, SmolLM2 section; the whole ``--quick`` search took 10 minutes of wall
time on two idle cores). So in Python run ``plan`` first (it says its own cost before spending it and predicts CPU and
wall time), and for minutes on such a model add ``--scorer attribution`` (a ranking, not exact
gains) or ``--scorer prescreen`` (exact gains on the heads a first pass keeps; its recall of exact's
pool is measured, not guaranteed)."""

DTYPE_ALIASES: dict[str, str] = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
}
"""Accepted dtype names -> the canonical ``torch`` attribute name."""


class OptionError(ValueError):
    """An option that cannot work: ``option`` is its field name (the CLI names its flag instead)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def canonical_dtype(name: Any, option: str = "dtype") -> str:
    """The canonical name of a dtype given by name (``"bf16"``, ``"torch.float16"``) or as a
    ``torch.dtype``; :class:`OptionError` (a ``ValueError``) naming the accepted ones otherwise."""
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise OptionError(option, f"unknown dtype {name!r}: expected one of {', '.join(sorted(DTYPE_ALIASES))}")
    return DTYPE_ALIASES[key]


def _int(name: str, value: Any, low: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(name, f"{name} must be an integer, got {value!r}")
    if value < low:
        raise OptionError(name, f"{name} must be >= {low}, got {value}{why}")


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise OptionError(name, f"{name} must be True or False, got {value!r}")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise OptionError(name, f"unknown {name} {value!r}; choose one of {', '.join(choices)}")


def _number(name: str, value: Any, interval: str) -> None:
    """``value`` a real number in ``interval``, written ``"(0, 1]"`` (round: open; square: closed)."""
    low, high = (float(x) for x in interval[1:-1].split(","))
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and (low < value if interval[0] == "(" else low <= value) and (value < high if interval[-1] == ")" else value <= high)):
        bound = f"be a number >= {low:g}" if high == float("inf") else f"lie in {interval}"
        raise OptionError(name, f"{name} must {bound}, got {value!r}")


def check_fields(obj: Any) -> None:
    """Check each field of a config dataclass by the rule its ``metadata`` holds, beside its help:
    ``choices``; ``min`` (an integer at least that; ``why`` ends the message); ``interval`` (a number
    within ``"(0, 1]"``: round open, square closed; ``"[0, inf)"`` finite); ``dtype``; ``text`` (a string);
    a ``bool`` field is True or False; ``None`` where it is the default. :class:`OptionError` names
    the first field that fails, in field order."""
    for f in fields(obj):
        name, value, rule = f.name, getattr(obj, f.name), f.metadata
        if value is None and f.default is None:
            continue
        if f.type == "bool":
            _bool(name, value)
        if "choices" in rule:
            _choice(name, value, tuple(rule["choices"]))
        if "text" in rule and not isinstance(value, str):
            raise OptionError(name, f"{name} must be {rule['text']}, got {value!r}")
        if "min" in rule:
            _int(name, value, rule["min"], why=rule.get("why", ""))
        if "interval" in rule:
            _number(name, value, rule["interval"])
        if rule.get("dtype"):
            canonical_dtype(value, name)


def check_split_sizes(n_dist: Any = None, n_test: Any = None) -> None:
    """A search needs at least one discovery and one test example: ``n_dist``/``n_test`` are
    ``None`` (the task's default) or integers >= 1."""
    for name, value in (("n_dist", n_dist), ("n_test", n_test)):
        if value is not None:
            _int(name, value, 1, why=" (the split would be empty)")


def check_max_new_tokens(value: Any) -> None:
    """A generation budget is ``None`` (the task's default) or an integer >= 1."""
    if value is not None:
        _int("max_new_tokens", value, 1)


@dataclass(frozen=True)
class SearchConfig:
    """What a search computes: every option that can change its result (the manifest records them).

    ``k``: largest subset size; ``pool_size``: candidate heads kept from stage 1; ``scorer``:
    ``"exact"``, ``"attribution"`` or ``"compressed"``; ``strategy``: ``"exhaustive"`` (every subset
    of the pool up to ``k`` heads) or ``"beam"`` (``beam_width`` best sets grown per size);
    ``n_null``: random head sets in the null; ``n_boot``: bootstrap resamples; ``posthoc``: also
    evaluate every stage-2 subset on D_test (exploratory, off by default); ``parsimony``: stage 2's
    rule (``"backward"``: drop heads the leave-one-out tests on D_dist do not support; ``"one_se"``;
    ``"simultaneous"``; ``"best"``);
    ``rank_by``: :data:`RANK_RULES` (``"calibrated"``: choice tasks, the exact scorer only); ``ci_method``: the test gain's interval (``"tango"``, ``"newcombe"`` or ``"bootstrap"``); ``n_adjusted``:
    sign-flip permutations of the selection-adjusted test on D_dist (0: off); ``seed``: the statistics' randomness (null,
    bootstrap, selection stability, random pools) and, unless ``split_seed`` is given, the splits of
    a task loaded by name; ``split_seed``: the splits alone (``None``: follow ``seed``, so a run made
    before it existed keeps its identity), to check stability across splits without changing the
    statistics; ``n_specificity``: random pools whose stage-2 winners S-hat's test gain is compared
    with (0: off; each costs a stage 2 on D_dist); ``n_masks``/``sparsity``: the compressed-sensing
    scorer's knockouts; ``delta``/``margin``: the racing scorer's error probability and score margin
    (:mod:`cel_lens.scoring.racing`); ``store_dtype``: the activation store's dtype (``"float16"`` halves its
    memory; resumed passes then differ within half-precision rounding); ``ablation``: what replaces
    an ablated head's ``hook_z`` (:data:`ABLATION_KINDS`: ``"zero"``, the paper's, ``"mean"`` or
    ``"resample"``, learnt once from D_dist and recorded; the result also reports S-hat's test gain
    under the other kinds, as a control). Each default is written once, on its field (a function
    that takes an option alone defaults to ``SearchConfig.<name>``, the class attribute dataclasses
    set to it); so is each rule :meth:`validate` checks (:func:`check_fields`).

    ``precision``: the evaluations' compute precision (:data:`PRECISIONS`; the decisions are
    float32's either way). ``alpha``: every test's level; ``n_stability``: the stability check's
    re-selections (0: off); ``chunk``: head sets per evaluation call (never in the manifest).
    """

    k: int = field(default=DEFAULT_K, metadata={"manifest": "always", "help": "largest subset size", "min": 1})
    pool_size: int = field(default=DEFAULT_POOL_SIZE, metadata={"manifest": "always", 
        "help": "candidate pool size, top heads by stage-1 score", "min": 1})
    scorer: str = field(default="exact", metadata={"manifest": "always", "help": "stage-1 scorer", "choices": SCORERS})
    strategy: str = field(default="exhaustive", metadata={"manifest": "always", "help": "stage-2 search", "choices": STRATEGIES})
    beam_width: int = field(default=8, metadata={"manifest": {"when": {"strategy": "beam"}}, "help": "beam width for --strategy beam", "min": 1})
    n_null: int = field(default=DEFAULT_N_NULL, metadata={"manifest": "always", 
        "help": "random head sets in the null", "min": 1, "why": " (the random-subset null needs at least one head set)"})
    n_boot: int = field(default=10000, metadata={"manifest": "always", "help": "paired bootstrap resamples", "min": 1})
    posthoc: bool = field(default=False, metadata={"manifest": "always", 
        "help": "also measure every stage-2 subset on D_test (exploratory: never choose by it)"})
    seed: int = field(default=0, metadata={"manifest": "always", 
        "help": "seed of the statistics (null, bootstrap, stability) and the splits", "min": 0})
    n_masks: Optional[int] = field(default=None, metadata={"manifest": "scorer", "help": "random masks for --scorer compressed",
                                                                        "min": 1})
    sparsity: float = field(default=0.05, metadata={"manifest": "scorer", "help": "fraction of heads each --scorer compressed mask knocks out",
                                                               "interval": "(0, 1)"})
    store_dtype: Optional[str] = field(default=None, metadata={"manifest": "store", 
        "help": "store the residual stream in this dtype (e.g. float16)", "dtype": True})
    split_seed: Optional[int] = field(default=None, metadata={"manifest": "if_set", "help": "seed of the splits alone (default: --seed)",
                                                                           "min": 0})
    n_specificity: int = field(default=0, metadata={"manifest": "if_set", 
        "help": "random pools whose stage-2 winners S-hat's test gain is compared with (0: off)", "min": 0})
    ablation: str = field(default="zero", metadata={"manifest": "if_set", 
        "help": "what replaces an ablated head's output: zero (the paper's), its mean over D_dist, or a "
        "resampled D_dist example's (the result also reports S-hat's gain under the others)",
        "choices": ABLATION_KINDS})
    delta: float = field(default=0.05, metadata={
        "help": "--scorer racing: probability allowed for its pool to differ from exact scoring's", "interval": "(0, 1)"})
    margin: float = field(default=0.0, metadata={
        "help": "--scorer racing: score difference (accuracy units) near the pool's boundary it may get wrong (0: none)",
        "interval": "[0, 2)"})
    parsimony: str = field(default="backward", metadata={"manifest": "always", 
        "help": "stage 2's choice: drop heads of the best subset that their leave-one-out exact tests on D_dist do "
        "not support (backward), the smallest subset within one standard error of the best (one_se), within "
        "simultaneous standard errors (simultaneous), or the best", "choices": PARSIMONY_RULES})
    ci_method: str = field(default="tango", metadata={"manifest": "always", 
        "help": "interval of the test gain: Tango's score interval, Newcombe's paired interval, or the paired bootstrap",
        "choices": CI_METHODS})
    n_adjusted: int = field(default=999, metadata={"manifest": "always", 
        "help": "sign-flip permutations of the selection-adjusted test of 'any ablation helps' on D_dist (0: off)",
        "min": 0})
    precision: str = field(default="auto", metadata={"manifest": "if_set", 
        "help": "compute precision: bf16 (decisions within its error bound recomputed in float32: the same bits), "
        "float32, or auto (bf16 for a bfloat16 model; for a float32 one of 20M+ parameters on a CPU with native bf16, "
        "bf16 on exact-match tasks only where a short timed probe of its passes ran bf16 faster by enough to pay for the "
        "re-checks)",
        "choices": PRECISIONS})
    prescreen_pass: str = field(default="attribution", metadata={
        "help": "--scorer prescreen: the first pass that ranks every head (attribution, or every head on a subsample)",
        "choices": ("attribution", "subsample")})
    prescreen_keep: float = field(default=0.25, metadata={
        "help": "--scorer prescreen: fraction of heads (the first pass's best) the exact scan keeps", "interval": "(0, 1]"})
    prescreen_sample: int = field(default=32, metadata={
        "help": "--scorer prescreen --prescreen-pass subsample: D_dist examples of the first pass", "min": 1})
    rank_by: str = field(default="raw", metadata={"manifest": "if_set", "choices": RANK_RULES, "help": "the D_dist gain "
        "stage 1 ranks and stage 2 chooses by: raw (the paper's), or on choice tasks calibrated (best prior fitted on D_dist)"})
    alpha: float = field(default=0.05, metadata={"manifest": "if_set", "help": "level of every test and interval", "interval": "(0, 1)"})
    n_stability: int = field(default=DEFAULT_N_STABILITY, metadata={"manifest": "if_set", "min": 0,
        "help": "bootstrap re-selections of the selection-stability check on D_dist (0: off)"})
    chunk: int = field(default=64, metadata={"min": 1, "help": "head sets per evaluation call (never changes a result)"})

    @property
    def task_seed(self) -> int:
        """The seed a task loaded by name is split with: ``split_seed``, else ``seed``."""
        return self.seed if self.split_seed is None else self.split_seed

    def validate(self) -> "SearchConfig":
        """Raise ``ValueError`` naming the first option that cannot work (each field's rule is on the
        field, :func:`check_fields`; then ``k`` against the pool); return ``self``."""
        check_fields(self)
        if self.k > self.pool_size:
            raise OptionError(
                "k", f"k must be at most the pool size ({self.pool_size}): every subset is drawn from the pool, "
                f"so k={self.k} could never be reached"
            )
        needs = RANK_RULES.resolve(self.rank_by).needs_scorer
        if needs is not None and self.scorer != needs:  # only exact stage 1 has every head's choice scores
            raise OptionError("rank_by", f"rank_by {self.rank_by!r} needs the {needs} scorer, got {self.scorer!r}")
        return self

    def manifest_options(self, use_store: bool = True) -> dict[str, Any]:
        """The run manifest's ``options``, by each field's ``manifest`` metadata: ``"always"``;
        ``"if_set"`` (absent at its default, so run directories made before the option resume
        unchanged); ``{"when": {field: value}}`` (``None`` unless that holds); ``"scorer"`` (``None``
        here); ``"store"`` (the store's dtype; ``None`` without a store). Then the scorer's own entries
        (``Scorer.manifest_options``: fields without ``manifest``, or a ``"scorer"`` one it reads)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            how, value = f.metadata.get("manifest"), getattr(self, f.name)
            if how == "always" or (how == "if_set" and value != f.default):
                out[f.name] = value
            elif isinstance(how, dict):
                out[f.name] = value if all(getattr(self, k) == v for k, v in how["when"].items()) else None
            elif how in ("scorer", "store"):
                out[f.name] = f"torch.{canonical_dtype(value)}" if how == "store" and value is not None and use_store else None
        return {**out, **SCORERS.resolve(self.scorer).manifest_options(self)}

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return asdict(self)


@dataclass(frozen=True)
class ExecutionSettings:
    """How a search runs, as opposed to what it computes: none of these is part of a run's identity
    (a run started with one setting resumes under another and reaches the same result).

    ``device``/``dtype``/``loader``/``bos``: how a model given by name is loaded
    (:func:`cel_lens.load_model`; ``dtype`` and ``bos``, the BOS rule, ``None`` for the tokenizer's
    own, do change results and are recorded with the model's identity); ``batch_size``:
    examples per forward pass; ``use_store``/``store_budget``: the activation store (bytes, ``None``
    for every layer); ``progress``: progress bars; ``backend``: ``"local"`` or ``"ray"``, with
    ``ray_address``, ``workers`` and ``gpus_per_worker`` for the latter.
    """

    device: Optional[str] = field(default=None, metadata={
        "help": "torch device (default: cuda if available, else cpu)", "text": "a name such as 'cpu' or 'cuda:0'"})
    dtype: Optional[str] = field(default=None, metadata={"help": "model dtype, e.g. float32 or bfloat16",
                                                                       "dtype": True})
    loader: str = field(default="auto", metadata={
        "help": "HookedTransformer or TransformerBridge (auto: HookedTransformer where supported)", "choices": LOADERS})
    bos: Optional[str] = field(default=None, metadata={
        "help": "prompts start with BOS: where the tokenizer adds it (default, as lm-eval), always, or never "
        "(recorded with the model)", "choices": BOS_RULES})
    batch_size: int = field(default=8, metadata={"help": "examples per forward pass", "min": 1})
    use_store: bool = field(default=True, metadata={"help": "no activation store: full forward passes"})
    store_budget: Optional[int] = field(default=None, metadata={
        "help": "byte budget of the activation store, in megabytes", "unit": ("megabytes", 2**20), "min": 0})
    progress: bool = field(default=True, metadata={"help": "hide progress bars"})
    backend: str = field(default="local", metadata={
        "help": "where evaluations run: this process, or Ray actors (pip install \"cel_lens[ray]\")", "choices": BACKENDS})
    ray_address: Optional[str] = field(default=None, metadata={
        "help": "Ray cluster to join: 'auto' (one started with 'ray start') or HOST:PORT; default: a local Ray",
        "text": "'auto' or HOST:PORT"})
    workers: Optional[int] = field(default=None, metadata={
        "help": "Ray actors, one model replica each (default: cluster GPUs / --gpus-per-worker, else CPUs)", "min": 1})
    gpus_per_worker: float = field(default=0.0, metadata={"help": "GPUs per Ray actor (fractions share a GPU)",
                                                                            "interval": "[0, inf)"})

    def validate(self) -> "ExecutionSettings":
        """Raise ``ValueError`` naming the first setting that cannot work (each field's rule is on the
        field, :func:`check_fields`); return ``self``."""
        check_fields(self)
        return self

    def load_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`cel_lens.load_model` for a model given by name (one place for
        every loader: the local and Ray backends, the grid, the CLI); ``bos`` only when set."""
        options: dict[str, Any] = {"device": self.device, "dtype": self.dtype, "loader": self.loader}
        if self.bos is not None:
            options["bos"] = self.bos
        return options

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict."""
        return asdict(self)

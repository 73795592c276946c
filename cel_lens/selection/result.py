"""The result of a search, and the one way it is written down.

:class:`Result` is S-hat and the run's identity (options, sizes, layout, timings) composed with its
typed parts (:mod:`cel_lens.selection.result_parts`): :class:`Discovery` (D_dist),
:class:`TestOutcome` (D_test), :class:`NullTest`, :class:`Stability`, :class:`Controls` and the
calibration record. ``result.json`` holds its flat form (:meth:`Result.to_dict`, one key per
number, the same keys and order since before the parts existed, :data:`FLAT_KEYS`), and
:meth:`Result.from_dict` reads every record written before.

Each part renders its own rows; :meth:`Result.rows` (and :func:`result_rows`) lays them out in one
order, and :func:`format_result` makes the one text block: ``str(result)`` is that block, and
``cel-lens report``, the demo and ``str(run)`` print the same block followed by their own rows (run
directory, figures, the demo's side effect), aligned to the same column; the figures' captions use
the same numbers (:func:`pp`, :func:`format_p`).
"""

from __future__ import annotations

import html
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.config import DEFAULT_N_NULL, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.calibration_text import calibration_rows
from cel_lens.selection.records import CalibrationRecord
from cel_lens.selection.result_parts import (
    Controls,
    Discovery,
    NullTest,
    Row,
    Stability,
    TestOutcome,
    decision_text,
    format_p,
    nonpositive_gain_warning,
    pp,
)

__all__ = [
    "DEFAULT_N_NULL", "RESULT_TITLE", "LABEL_WIDTH", "FLAT_KEYS", "Result", "Discovery", "TestOutcome", "NullTest",
    "Stability", "Controls", "result_rows", "format_result", "pp", "format_p", "nonpositive_gain_warning",
    "decision_text",
]

RESULT_TITLE = "CEL search result"
"""The first line of a result's text block."""
LABEL_WIDTH = 24
"""Width of the label column of every result block (labels are padded to it, so a block with more
rows after it lines up with the bare result's)."""

_PLACES: dict[str, tuple[Optional[str], str]] = {
    "heads": (None, "heads"),
    "dist_acc_intact": ("discovery", "acc_intact"),
    "dist_acc_ablated": ("discovery", "acc_ablated"),
    "dist_gain": ("discovery", "gain"),
    "test_acc_intact": ("test", "acc_intact"),
    "test_acc_ablated": ("test", "acc_ablated"),
    "gain": ("test", "gain"),
    "ci_low": ("test", "ci_low"),
    "ci_high": ("test", "ci_high"),
    "p_value": ("test", "p_value"),
    "null_gains": ("null", "gains"),
    "null_p": ("null", "p"),
    "scores": ("discovery", "scores"),
    "scorer": (None, "scorer"),
    "pool": ("discovery", "pool"),
    "subsets": ("discovery", "subsets"),
    "k": (None, "k"),
    "pool_size": (None, "pool_size"),
    "n_dist": (None, "n_dist"),
    "n_test": (None, "n_test"),
    "seed": (None, "seed"),
    "n_layers": (None, "n_layers"),
    "n_heads": (None, "n_heads"),
    "strategy": (None, "strategy"),
    "beam_width": (None, "beam_width"),
    "n_null": ("null", "n_null"),
    "n_boot": (None, "n_boot"),
    "alpha": (None, "alpha"),
    "selected_before_test": ("test", "selected_before_test"),
    "null_min_p": ("null", "min_p"),
    "null_exhaustive": ("null", "exhaustive"),
    "scores_split": ("discovery", "scores_split"),
    "selection_stability": ("stability", "selection"),
    "specificity": ("stability", "specificity"),
    "seal": ("test", "seal"),
    "ci_method": ("test", "ci_method"),
    "p_enhance": ("test", "p_enhance"),
    "leave_one_out": ("controls", "leave_one_out"),
    "parsimony": ("discovery", "parsimony"),
    "adjusted": ("discovery", "adjusted"),
    "split_half": ("stability", "split_half"),
    "ablation": (None, "ablation"),
    "ablation_controls": ("controls", "kinds"),
    "calibration": (None, "calibration"),
    "decision": ("test", "decision"),
    "timings": (None, "timings"),
}
"""Where each key of ``result.json`` lives: ``(part, attribute)``, part ``None`` for the result itself."""

_IF_SET: dict[str, tuple[tuple[str, str], Any]] = {
    "rank_by": (("discovery", "rank_by"), SearchConfig.rank_by),
}
"""Keys of ``result.json`` written only when not at their default, after :data:`FLAT_KEYS` (so a result
made before the option, or with it at its default, keeps its record byte for byte): ``(place, default)``."""

FLAT_KEYS: tuple[str, ...] = tuple(_PLACES)
"""The keys of ``result.json`` in the order :meth:`Result.to_dict` writes them."""

_PARTS = {"discovery": Discovery, "test": TestOutcome, "null": NullTest, "stability": Stability, "controls": Controls}
_LEGACY = {"ci_method": "bootstrap"}
"""Values of keys a record written before they existed lacks, where that differs from today's
default: every interval was the paired bootstrap before ``ci_method``."""


@dataclass
class Result:
    """What a CEL search found, and how sure we can be.

    ``heads`` is S-hat in canonical text; ``discovery`` what D_dist says (where S-hat was selected:
    its gain is selection-biased), ``test`` what D_test says (read only after selection: ``gain``,
    its interval, the exact tests, the one decision, whether the selection came first), ``null``
    the random-subset null, ``stability`` the selection's stability and specificity, ``controls``
    each head's leave-one-out contribution and S-hat under the other ablation kinds, and
    ``calibration`` the answer-prior control (:mod:`~cel_lens.selection.calibration`; ``None`` for
    oracles without an answer key). The rest is the run's identity: the options (``scorer``, ``k``,
    ``pool_size``, ``strategy``, ``beam_width``, ``seed``, ``n_boot``, ``alpha``, ``ablation``), the
    split sizes, the model's head layout and the ``timings`` of each stage: the wall seconds of this
    process, so a resumed search adds ``resumed_sets``, the evaluations it read from its run
    directory instead (:data:`~cel_lens.selection.algorithm.RESUMED_SETS`).

    Every key of ``result.json`` also reads as a flat attribute (``result.gain`` is
    ``result.test.gain``, ``result.dist_gain`` is ``result.discovery.gain``; :data:`FLAT_KEYS`): a
    thin read-only layer so code written against the flat result keeps working. New code reads the
    parts."""

    heads: str
    discovery: Discovery
    test: TestOutcome
    null: NullTest
    scorer: str
    k: int
    pool_size: int
    n_dist: int
    n_test: int
    seed: int
    n_layers: int
    n_heads: int
    stability: Stability = field(default_factory=Stability)
    controls: Controls = field(default_factory=Controls)
    calibration: Optional[CalibrationRecord] = None
    strategy: str = SearchConfig.strategy
    beam_width: Optional[int] = None
    n_boot: int = SearchConfig.n_boot
    alpha: float = 0.05
    ablation: str = SearchConfig.ablation
    timings: dict[str, float] = field(default_factory=dict, compare=False)

    def __getattr__(self, name: str) -> Any:
        """A flat ``result.json`` key read through to its part (called only for names that are not
        attributes of the result itself)."""
        part, attr = _PLACES.get(name) or (_IF_SET[name][0] if name in _IF_SET else (None, ""))
        holder = self.__dict__.get(part) if part is not None else None
        if holder is None:
            raise AttributeError(f"'Result' object has no attribute {name!r}")
        return getattr(holder, attr)

    @property
    def head_set(self) -> HeadSet:
        """S-hat as a :class:`HeadSet`."""
        return HeadSet.parse(self.heads)

    @property
    def scores_tensor(self) -> Float[Tensor, "layer head"]:
        """The stage-1 scores as a tensor."""
        return torch.tensor(self.discovery.scores, dtype=torch.float64)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready flat dict (what ``result.json`` holds): :data:`FLAT_KEYS` in order, then
        ``rank_by`` only when it is not ``"raw"``."""
        out = {key: getattr(self if part is None else getattr(self, part), attr) for key, (part, attr) in _PLACES.items()}
        for key, ((part, attr), default) in _IF_SET.items():
            if (value := getattr(getattr(self, part), attr)) != default:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        """Inverse of :meth:`to_dict`; unknown keys are ignored, keys added after a record was written
        take their default (a record without ``ci_method`` was written when every interval was the
        paired bootstrap). ``TypeError`` names the keys a result cannot do without."""
        places = {**_PLACES, **{key: place for key, (place, _) in _IF_SET.items()}}
        known = {**_LEGACY, **{key: value for key, value in d.items() if key in places}}
        missing = [key for key in _REQUIRED if key not in known]
        if missing:
            raise TypeError(f"a result record needs {', '.join(missing)}")
        args: dict[Optional[str], dict[str, Any]] = {None: {}, **{part: {} for part in _PARTS}}
        for key, value in known.items():
            part, attr = places[key]
            args[part][attr] = value
        return cls(**args[None], **{part: kind(**args[part]) for part, kind in _PARTS.items()})

    def calibration_view(self) -> dict[str, Any]:
        """What the calibration's texts read (:mod:`~cel_lens.selection.calibration_text`): the
        calibration record beside the D_test gain, ``alpha`` and ``n_test`` it is judged against."""
        return {"calibration": self.calibration, "gain": self.test.gain, "alpha": self.alpha, "n_test": self.n_test}

    def rows(self) -> list[Row]:
        """The result as ``(label, value)`` rows, each part rendering its own: the selected heads
        (whether they were fixed before D_test was read, the parsimony rule's choice), a warning when
        the discovery gain is not positive, the search, discovery (selection-biased) and test
        accuracies, the gain's interval and p-value, whether any ablation helps (selection-adjusted
        test, the one decision, each head's leave-one-out), the calibration, the random-subset null,
        the selection stability, the optional specificity, the other ablation kinds and the best
        stage-2 subsets (their post-hoc test gains only when measured, labelled exploratory)."""
        dist, test = self.discovery, self.test
        selected = f"{self.head_set} ({test.selection_sentence()}){dist.parsimony_text()}"
        return [
            ("selected heads", selected),
            *dist.warning_rows(),
            ("search", self._search_text()),
            *dist.rows(self.n_dist),
            *test.rows(self.n_test, float(self.alpha)),
            *dist.adjusted_rows(),
            *test.decision_rows(),
            *self.controls.leave_one_out_rows(),
            *calibration_rows(self.calibration_view()),
            *self.null.rows(len(self.head_set), test.gain, float(self.alpha)),
            *self.stability.rows(str(self.head_set), len(dist.pool or []), float(self.alpha)),
            *self.controls.kind_rows(self.ablation, test.gain),
            *dist.subset_rows(),
        ]

    def _search_text(self) -> str:
        """The search's options: ``k``, the pool and its scorer, the strategy, how many subsets, the
        seed and, when not the default, the ablation kind and the rule that ranked (``rank_by``)."""
        kind = "" if self.ablation == SearchConfig.ablation else f", {self.ablation} ablation"
        ranked = "" if self.discovery.rank_by == SearchConfig.rank_by else (
            f", ranked and chosen by {self.discovery.rank_by} gain (each head set at its best constant prior fitted "
            "on D_dist)")
        return (f"k={self.k}, pool {self.discovery.pool_text(self.pool_size)} by {self.scorer}, {self.strategy}, "
                f"{len(self.discovery.subsets or [])} subsets, seed {self.seed}{kind}{ranked}")

    def __str__(self) -> str:
        return format_result(self)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self.rows()
        )
        return f"<table><caption>{RESULT_TITLE}</caption>{body}</table>"


def _required() -> list[str]:
    """The keys of ``result.json`` whose place has no default (a record without one is no result)."""
    def has_default(kind: type, attr: str) -> bool:
        f = next(f for f in fields(kind) if f.name == attr)
        return f.default is not MISSING or f.default_factory is not MISSING

    return [key for key, (part, attr) in _PLACES.items() if not has_default(_PARTS.get(part, Result), attr)]


_REQUIRED = _required()


def result_rows(result: Union[Result, Mapping[str, Any]]) -> list[Row]:
    """The rows of :meth:`Result.rows`, of a result or of its flat dict (``result.json``; keys a
    result does not have are ignored)."""
    return (result if isinstance(result, Result) else Result.from_dict(result)).rows()


def format_result(
    result: Union[Result, Mapping[str, Any]],
    indent: str = "  ",
    *,
    title: Optional[str] = RESULT_TITLE,
    extra: Sequence[Row] = (),
) -> str:
    """The result's text block: ``title``, then :func:`result_rows` and any ``extra`` rows, each
    label padded to :data:`LABEL_WIDTH` after ``indent``. Every summary of a run is this block
    (``str(result)`` with no extra rows), so they differ only in the rows they add at the end."""
    rows = [*result_rows(result), *extra]
    lines = [f"{indent}{k:<{LABEL_WIDTH}}  {v}" for k, v in rows]
    return "\n".join(([title] if title else []) + lines)

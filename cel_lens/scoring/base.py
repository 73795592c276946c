"""The stage-1 scorer contract (:class:`Scorer`) and the lookups of a scorer by name.

The table is :data:`cel_lens.config.SCORERS` (a :class:`~cel_lens.registry.Registry`, name ->
``"module:Class"``; it lives with the other option tables, :mod:`cel_lens.config.options`, so that ``SearchConfig.validate`` and
``cel-lens --help`` need no torch). A scorer module is imported only when its scorer is asked for
(:func:`get_scorer`).

**Adding a scorer is one file and one table line:**

1. ``cel_lens/scoring/<name>.py`` with a subclass of :class:`Scorer` that sets

   * ``name`` (the table key) and ``units`` (``"accuracy"`` when scores are D_dist accuracy
     gains, else the unit's name, e.g. ``"nats"``) with ``quantity`` (what a score measures, as
     figures title it): :meth:`Scorer.score_unit` turns them into how every figure, the explorer
     and the status lines write a score (``+1.25 pp``, ``+0.0312 nats``);
   * ``Options``: a frozen dataclass of the options it reads; each field is read from the
     :class:`~cel_lens.config.SearchConfig` field of the same name (add one there if it needs a new
     option), with its own default otherwise;
   * ``cost(n_layers, n_heads, n_dist)``: a :class:`Cost`, what ``plan`` prints and times;
   * ``score(oracle, *, batch_size, progress, model=None, split=None)``: the
     :class:`~cel_lens.oracle.Stage1Scores` (``[layer, head]``, positive = ablating helps);
   * optionally ``in_search = True`` when the search computes the scores itself from the
     single-head evaluations it records (the exact scorer: stage 2 then answers the pool's singles
     from memory), ``recorded = False`` when the scores need not be kept in the run directory
     (they are recomputed bit for bit from recorded evaluations), and :meth:`Scorer.manifest_options`
     when its options are part of a run's identity (the run manifest's ``options``);

2. one line ``"<name>": "cel_lens.scoring.<name>:<Class>"`` in :data:`cel_lens.config.SCORERS`.

``plan``, the pipeline, the manifest, :func:`cel_lens.scoring.score_heads`, the CLI's ``--scorer``,
the figures and the explorer read the class; nothing branches on a scorer's name
(``tests/test_registry_names.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

from cel_lens.config import SCORERS
from cel_lens.oracle import Oracle, Stage1Scores
from cel_lens.tasks.base import Split

__all__ = ["Cost", "Scorer", "NoOptions", "ScoreUnit", "get_scorer", "scorer_class", "scorer_from_config", "score_unit"]


@dataclass(frozen=True)
class Cost:
    """What a scorer evaluates on D_dist: ``head_sets`` head-set evaluations of every D_dist
    example (``bound``: at most), with a note for the plan; ``singles``: whether those include
    every single head alone (stage 2 then answers the pool's singles from memory); ``full``: how
    many of them the plan prices as whole-model passes (an attribution pass runs every layer; heads
    whose layers are known only after a first pass are priced as if at layer 0, an upper bound)."""

    head_sets: int
    note: str = ""
    bound: bool = False
    singles: bool = False
    full: int = 0


@dataclass(frozen=True)
class ScoreUnit:
    """How a scorer's stage-1 scores read: ``quantity`` (what a score measures, a figure's title),
    ``symbol`` written after a value (``"pp"``, ``"nats"``, or ``""``), ``scale`` from a score to
    it (100: a fraction in percentage points), ``noun`` (``"gain"`` for accuracy, else ``"score"``)
    and ``decimals`` written by default."""

    quantity: str
    symbol: str
    scale: float
    noun: str
    decimals: int

    def text(self, value: Optional[float], decimals: Optional[int] = None, missing: str = "not scored") -> str:
        """``value`` in display units with a sign (``+1.25 pp``, ``-0.0312 nats``); ``missing``
        for ``None`` or NaN."""
        if value is None or math.isnan(float(value)):
            return missing
        number = f"{float(value) * self.scale:+.{self.decimals if decimals is None else decimals}f}"
        return f"{number} {self.symbol}" if self.symbol else number


@dataclass(frozen=True)
class NoOptions:
    """A scorer without options."""


class Scorer:
    """A stage-1 scorer (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    units: ClassVar[str] = "accuracy"
    quantity: ClassVar[str] = "Δ accuracy"
    Options: ClassVar[type] = NoOptions
    in_search: ClassVar[bool] = False
    recorded: ClassVar[bool] = True

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        """What scoring a model of that layout costs on D_dist."""
        raise NotImplementedError

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        """The scores of every head, with the split they were computed on."""
        raise NotImplementedError

    @classmethod
    def score_unit(cls) -> ScoreUnit:
        """How this scorer's scores are written: accuracy gains in percentage points, any other
        unit (``units``) as the raw number with its name."""
        if cls.units == "accuracy":
            return ScoreUnit(cls.quantity, "pp", 100.0, "gain", 2)
        return ScoreUnit(cls.quantity, cls.units, 1.0, "score", 4)

    @classmethod
    def manifest_options(cls, config: Any) -> dict[str, Any]:
        """This scorer's entries of a run manifest's ``options``
        (:meth:`~cel_lens.config.SearchConfig.manifest_options`), read from ``config``: the options
        that change its scores (a run directory refuses others); none by default."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options!r})"


def scorer_class(name: str) -> type[Scorer]:
    """The class registered as ``name`` (its module imported now); one-line ``ValueError`` naming
    the scorers otherwise."""
    return SCORERS.resolve(name)


def score_unit(name: Any) -> ScoreUnit:
    """How scores of the scorer called ``name`` are written (:meth:`Scorer.score_unit`); a plain
    number for a name no longer registered (an old run's)."""
    cls = SCORERS.get_resolved(str(name))
    return cls.score_unit() if cls is not None else ScoreUnit("score", "", 1.0, "score", 4)


def get_scorer(name: str, **options: Any) -> Scorer:
    """Scorer ``name`` with ``options`` (those its ``Options`` does not have are ignored, so one set
    of search options serves every scorer)."""
    cls = scorer_class(name)
    known = {f.name for f in fields(cls.Options)}
    return cls(cls.Options(**{k: v for k, v in options.items() if k in known}))


def scorer_from_config(config: Any) -> Scorer:
    """The scorer a :class:`~cel_lens.config.SearchConfig` asks for, its options read from the
    config's fields of the same names."""
    return get_scorer(config.scorer, **{f.name: getattr(config, f.name) for f in fields(config)})

"""Stage-1 scorers by name: a table of lazy ``"module:Class"`` strings, and the class they name.

The table is :data:`cel_lens.config.SCORERS` (name -> ``"module:Class"``; it lives with the other
option tables so that ``SearchConfig.validate`` and ``cel-lens --help`` need no torch). A scorer
module is imported only when its scorer is asked for (:func:`get_scorer`).

**Adding a scorer is one file and one table line:**

1. ``cel_lens/scoring/<name>.py`` with a subclass of :class:`Scorer` that sets

   * ``name`` (the table key) and ``units`` (``"accuracy"`` when scores are D_dist accuracy
     gains, else the unit's name, e.g. ``"nats"``: figures show them as such);
   * ``Options``: a frozen dataclass of the options it reads; each field is read from the
     :class:`~cel_lens.config.SearchConfig` field of the same name (add one there if it needs a new
     option), with its own default otherwise;
   * ``cost(n_layers, n_heads, n_dist)``: a :class:`Cost`, what ``plan`` prints and times;
   * ``score(oracle, *, batch_size, progress, model=None, split=None)``: the
     :class:`~cel_lens.oracle.Stage1Scores` (``[layer, head]``, positive = ablating helps);
   * optionally ``in_search = True`` when the search computes the scores itself from the
     single-head evaluations it records (the exact scorer: stage 2 then answers the pool's singles
     from memory), and ``recorded = False`` when the scores need not be kept in the run directory
     (they are recomputed bit for bit from recorded evaluations);

2. one line ``"<name>": "cel_lens.scoring.<name>:<Class>"`` in :data:`cel_lens.config.SCORERS`.

``plan``, the pipeline, :func:`cel_lens.scoring.score_heads`, the CLI's ``--scorer`` and the
figures read the class; nothing branches on a scorer's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

from cel_lens.config import SCORERS
from cel_lens.oracle import Oracle, Stage1Scores
from cel_lens.tasks.base import Split

__all__ = ["Cost", "Scorer", "NoOptions", "get_scorer", "scorer_class", "scorer_from_config"]


@dataclass(frozen=True)
class Cost:
    """What a scorer evaluates on D_dist: ``head_sets`` head-set evaluations of every D_dist
    example (``bound``: at most), with a note for the plan; ``singles``: whether those include
    every single head alone (stage 2 then answers the pool's singles from memory)."""

    head_sets: int
    note: str = ""
    bound: bool = False
    singles: bool = False


@dataclass(frozen=True)
class NoOptions:
    """A scorer without options."""


class Scorer:
    """A stage-1 scorer (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    units: ClassVar[str] = "accuracy"
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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options!r})"


def scorer_class(name: str) -> type[Scorer]:
    """The class registered as ``name`` (its module imported now); one-line ``ValueError`` naming
    the scorers otherwise."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; choose one of {', '.join(SCORERS)}")
    module, _, cls = SCORERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


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

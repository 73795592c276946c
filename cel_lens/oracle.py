"""The evaluation oracle: the one boundary between the search and whatever runs the model.

An *oracle* answers one question: "which examples of split ``"dist"`` (D_dist) or ``"test"``
(D_test) does the model get right with each of these head sets zero-ablated?" Stage 1, stage 2 and
the test statistics (:mod:`cel_lens.scoring`, :mod:`cel_lens.selection`) see nothing else, so the
same search runs over a local model, Ray actors or a synthetic oracle with planted effects.

:class:`MemoOracle` wraps any oracle so that no head set is evaluated twice on one split, and it is
where the test-split guard lives, with or without a *journal* (a run directory, see
:mod:`cel_lens.runs`): D_test is not read before the search has fixed its selection
(:meth:`MemoOracle.fix_selection`), and the oracle knows from what happened whether the selection
was fixed before any test read. :class:`Stage1Scores` carries stage-1 scores with the split they
were computed on, so that a search can refuse scores that did not come from D_dist.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.progress import progress_bar

__all__ = [
    "SPLITS",
    "DIST_SPLIT",
    "TEST_SPLIT",
    "Oracle",
    "Journal",
    "MemoOracle",
    "Stage1Scores",
    "TestSplitError",
    "discovery_scores",
    "call_oracle",
    "evaluate_chunked",
    "AnswerKey",
    "call_choice_oracle",
]

SPLITS: tuple[str, ...] = ("dist", "test")
"""The two splits an oracle knows: D_dist (discovery) and D_test (held out)."""
DIST_SPLIT = "dist"
TEST_SPLIT = "test"

@runtime_checkable
class Oracle(Protocol):
    """Evaluates head sets: per-example correctness of the model with each set zero-ablated.

    ``evaluate(split, head_sets, stage=...)`` returns ``Bool[variant, example]`` with row ``v`` for
    ``head_sets[v]`` (the empty :class:`HeadSet` is the intact model); ``split`` is ``"dist"`` or
    ``"test"``; ``stage`` tags the request (``"stage1"``, ``"null"``, ...) for oracles that record
    it. Results must be deterministic: the same head set on the same split always gives the same
    vector (resuming a run relies on it).
    """

    n_layers: int
    n_heads: int

    def evaluate(
        self, split: str, head_sets: Sequence[HeadSet], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]``."""
        ...


@dataclass(frozen=True)
class AnswerKey:
    """What an answer prior can act on in a split: the task ``kind``, each example's gold answer as
    an index into ``names`` (``labels``, ``None`` when the answers form no small closed set, as in
    generation or free-form exact match) and the answers' display ``names``. Task data, not a model
    output: reading it runs nothing."""

    kind: str
    labels: Optional[Tensor] = None
    names: tuple[str, ...] = ()


def call_choice_oracle(
    oracle: Oracle, split: str, head_sets: Sequence[HeadSet], stage: str
) -> tuple[Bool[Tensor, "variant example"], Optional[Float[Tensor, "variant example choice"]]]:
    """:func:`call_oracle`, and the per-choice scores the same forward passes computed when
    the oracle reports them (an ``evaluate_choices`` method; ``None`` otherwise or for tasks without
    choices). A choice an example does not have is NaN."""
    if not hasattr(oracle, "evaluate_choices"):
        return call_oracle(oracle, split, head_sets, stage), None
    correct, choice_scores = oracle.evaluate_choices(split, list(head_sets), stage=stage)
    out = torch.as_tensor(correct).bool().cpu()
    if out.ndim != 2 or out.shape[0] != len(head_sets):
        raise ValueError(f"oracle returned shape {tuple(out.shape)} for {len(head_sets)} head sets")
    if choice_scores is not None:
        choice_scores = torch.as_tensor(choice_scores).float().cpu()
        if choice_scores.ndim != 3 or tuple(choice_scores.shape[:2]) != tuple(out.shape):
            raise ValueError(f"choice scores have shape {tuple(choice_scores.shape)}, correctness {tuple(out.shape)}")
    return out, choice_scores


class Journal(Protocol):
    """Where a search records what it did (a run directory, :class:`cel_lens.runs.RunDir`)."""

    def record_event(self, event: str, **data: Any) -> dict[str, Any]:
        """Append an event."""
        ...

    def events(self, event: Optional[str] = None) -> list[dict[str, Any]]:
        """Recorded events, all or those named ``event``."""
        ...

    def selection(self) -> Optional[dict[str, Any]]:
        """The recorded ``selected`` event, or ``None``."""
        ...

    def write_result(self, result: Any) -> None:
        """Write the final result."""
        ...


def _takes_stage(oracle: Oracle) -> bool:
    """Whether ``oracle.evaluate`` accepts ``stage=`` (oracles written before it existed do not)."""
    try:
        params = inspect.signature(oracle.evaluate).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return True
    return "stage" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def call_oracle(oracle: Oracle, split: str, head_sets: Sequence[HeadSet], stage: str) -> Bool[Tensor, "variant example"]:
    """One oracle call, its answer checked (``[len(head_sets), n]``) and moved to the CPU as bools.
    ``stage`` is passed to oracles that take it."""
    kwargs = {"stage": stage} if _takes_stage(oracle) else {}
    out = torch.as_tensor(oracle.evaluate(split, list(head_sets), **kwargs)).bool().cpu()
    if out.ndim != 2 or out.shape[0] != len(head_sets):
        raise ValueError(f"oracle returned shape {tuple(out.shape)} for {len(head_sets)} head sets")
    return out


def evaluate_chunked(
    oracle: Oracle,
    split: str,
    head_sets: Sequence[HeadSet],
    stage: str,
    chunk: int = 64,
    progress: bool = False,
) -> Bool[Tensor, "variant example"]:
    """Evaluate ``head_sets`` ``chunk`` at a time, with a progress bar (a recording oracle records
    each chunk as soon as it returns, so an interrupted stage loses at most one chunk)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    parts = []
    with progress_bar(len(head_sets), progress, f"{stage} ({split})", unit="set") as bar:
        for start in range(0, len(head_sets), chunk):
            part = head_sets[start : start + chunk]
            parts.append(call_oracle(oracle, split, part, stage))
            bar.update(len(part))
    if not parts:
        return torch.zeros(0, 0, dtype=torch.bool)
    return torch.cat(parts)


class TestSplitError(RuntimeError):
    """The test split would be read before the selection is fixed, or would inform it."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class Stage1Scores:
    """Stage-1 scores and where they came from: ``values`` ``[layer, head]`` (float64, CPU), the
    ``split`` they were computed on (``"dist"`` for every built-in scorer) and the ``scorer``'s name.

    A search takes scores in this form only and refuses any not computed on D_dist
    (:func:`discovery_scores`): a bare tensor does not say which split it saw."""

    values: Float[Tensor, "layer head"]
    split: str
    scorer: str
    seconds: float = field(default=0.0, compare=False)
    """Seconds spent getting them before the search (a scorer that runs first, or reading them back);
    a search counts them in its ``stage1_s``."""

    def __post_init__(self) -> None:
        values = torch.as_tensor(self.values).detach().to(torch.float64).cpu()
        if values.ndim != 2:
            raise ValueError(f"stage-1 scores must be [layer, head], got shape {tuple(values.shape)}")
        object.__setattr__(self, "values", values)

    def record(self) -> dict[str, Any]:
        """The JSON form a run directory records (``stage1_scores`` event)."""
        return {"scorer": self.scorer, "split": self.split, "scores": self.values.tolist()}


def discovery_scores(scores: Union[Stage1Scores, Tensor, Any], n_layers: int, n_heads: int) -> Stage1Scores:
    """``scores`` checked for use in a search: :class:`Stage1Scores` computed on D_dist, with the
    oracle's ``[n_layers, n_heads]`` shape. Scores from any other split, or a bare tensor (whose
    split is unknown), raise :class:`TestSplitError`: selection must not see D_test."""
    if not isinstance(scores, Stage1Scores):
        raise TestSplitError(
            f"stage-1 scores given as a bare {type(scores).__name__} do not say which split they were computed on; "
            "pass Stage1Scores(values, split='dist', scorer=...) (cel_lens.scoring.score_heads returns one)"
        )
    if scores.split != DIST_SPLIT:
        raise TestSplitError(
            f"stage-1 scores ({scores.scorer}) were computed on split {scores.split!r}; a search selects on "
            f"D_dist only ('{DIST_SPLIT}'), so scores from any other split are refused"
        )
    if tuple(scores.values.shape) != (n_layers, n_heads):
        raise ValueError(f"scores have shape {tuple(scores.values.shape)}, the oracle has [{n_layers}, {n_heads}] heads")
    return scores


class MemoOracle:
    """An oracle that evaluates each head set at most once per split, remembers the answer, and
    guards the test split.

    ``hits`` and ``misses`` count head sets answered from memory and evaluated. The guard holds
    with or without a ``journal`` (where a search records its events; ``None``: in memory only):
    with ``guard_test`` (default) evaluating the ``"test"`` split before a selection is fixed
    (:meth:`fix_selection`, or a ``selected`` event already in the journal) raises
    :class:`TestSplitError`. :attr:`selected_before_test` says, from what happened, whether the
    current selection was fixed before any test read (a test read before it, allowed only with
    ``guard_test=False`` or found in a journal, makes it ``False``). Subclasses persist evaluations
    by overriding :meth:`persist`. ``timer``, when set, is called as ``timer(head_sets, correct,
    seconds)`` after every call that evaluates (not after answers from memory): how a search times
    its first batch (:class:`cel_lens.selection.plan.BatchTimer`).
    """

    def __init__(self, oracle: Oracle, *, journal: Optional[Journal] = None, guard_test: bool = True) -> None:
        self.oracle = oracle
        self.journal = journal
        self.n_layers: int = oracle.n_layers
        self.n_heads: int = oracle.n_heads
        self.guard_test = guard_test
        self.hits = 0
        self.misses = 0
        self._cache: dict[tuple[str, HeadSet], Tensor] = {}
        self._choices: dict[tuple[str, HeadSet], Tensor] = {}
        self._n: dict[str, int] = {}
        self._selection: Optional[HeadSet] = None
        self._clean: Optional[bool] = None
        self._test_seen = False
        self.timer: Optional[Callable[[list[HeadSet], Tensor, float], Any]] = None
        self.prior_reads: list[dict[str, Any]] = []
        if journal is not None:
            self.note_selection()

    @property
    def selection(self) -> Optional[HeadSet]:
        """The fixed selection (S-hat), or ``None`` before one is fixed."""
        return self._selection

    @property
    def selected_before_test(self) -> Optional[bool]:
        """Whether the current selection was fixed before the test split was first read through
        this oracle (or its journal); ``None`` while nothing is selected."""
        return self._clean

    def remember(self, split: str, heads: HeadSet, correct: Tensor, choice_scores: Optional[Tensor] = None) -> None:
        """Keep ``correct`` (and the per-choice scores ``choice_scores`` ``[example, choice]``
        when known) as the answer for ``heads`` on ``split`` (all answers of a split must have the
        same number of examples). A test answer counts as a read of the test split."""
        n = self._n.setdefault(split, int(correct.shape[0]))
        if int(correct.shape[0]) != n:
            raise ValueError(
                f"split {split!r}: evaluation of {heads} has {correct.shape[0]} examples, "
                f"earlier ones {n} (the split changed under this run directory)"
            )
        self._test_seen |= split == TEST_SPLIT
        self._cache[(split, heads)] = correct
        if choice_scores is not None:
            self._choices[(split, heads)] = choice_scores

    def answered(self) -> int:
        """Head-set x example evaluations held in memory (a run directory's, when resumed)."""
        return sum(int(c.shape[0]) for c in self._cache.values())

    def recorded(self, split: str) -> tuple[list[HeadSet], Bool[Tensor, "variant example"]]:
        """Every head set answered on ``split`` so far and its correctness (the intact model
        included when it was evaluated), in the order they were first answered."""
        sets = [hs for (sp, hs) in self._cache if sp == split]
        if not sets:
            return [], torch.zeros(0, self._n.get(split, 0), dtype=torch.bool)
        return sets, torch.stack([self._cache[(split, hs)] for hs in sets])

    def is_recorded(self, split: str, head_set: HeadsLike) -> bool:
        """Whether ``head_set`` already has an answer on ``split``."""
        return (split, HeadSet.parse(head_set)) in self._cache

    def choice_scores(self, split: str, head_set: HeadsLike) -> Optional[Float[Tensor, "example choice"]]:
        """The per-choice scores recorded with ``head_set``'s evaluation on ``split`` (no
        forward pass), or ``None`` when the oracle reported none (no choices, or an older record)."""
        return self._choices.get((split, HeadSet.parse(head_set)))

    def answer_key(self, split: str) -> Optional[AnswerKey]:
        """The wrapped oracle's :class:`AnswerKey` for ``split`` (``None`` if it has none).
        Reading it runs nothing, so it is not a read of D_test's results."""
        key = getattr(self.oracle, "answer_key", None)
        return key(split) if callable(key) else None

    def persist(
        self, split: str, head_sets: list[HeadSet], correct: Tensor, stage: str, choice_scores: Optional[Tensor] = None
    ) -> None:
        """Persist freshly evaluated head sets, with their per-choice scores when known
        (nothing to do in memory; run directories append them)."""

    def _check_test_allowed(self, split: str) -> None:
        if split != TEST_SPLIT:
            return
        if self._selection is None and self.journal is not None:
            self.note_selection()  # recorded by another process meanwhile
        if self._selection is None and self.guard_test:
            where = f"in {getattr(self.journal, 'path', self.journal)}" if self.journal is not None else "by this search"
            raise TestSplitError(
                f"the test split was requested before a selection was fixed {where}; "
                "D_test is read only after S-hat is fixed (MemoOracle.fix_selection)"
            )
        self._test_seen = True

    def evaluate(
        self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]``; head sets without an answer are
        evaluated in one call to the wrapped oracle (and recorded, tagged ``stage``)."""
        sets = [HeadSet.parse(s) for s in head_sets]
        self._check_test_allowed(split)
        missing = list(dict.fromkeys(s for s in sets if (split, s) not in self._cache))
        if missing:
            start = time.perf_counter()
            correct, choice_scores = call_choice_oracle(self.oracle, split, missing, stage or split)
            if self.timer is not None:
                self.timer(missing, correct, time.perf_counter() - start)
            for i, (s, c) in enumerate(zip(missing, correct)):
                self.remember(split, s, c, None if choice_scores is None else choice_scores[i])
            if choice_scores is None:
                self.persist(split, missing, correct, stage or split)
            else:
                self.persist(split, missing, correct, stage or split, choice_scores=choice_scores)
        self.misses += len(missing)
        self.hits += len(sets) - len(missing)
        if not sets:
            return torch.zeros(0, self._n.get(split, 0), dtype=torch.bool)
        return torch.stack([self._cache[(split, s)] for s in sets])

    def attribution_scores(self, batch_size: int) -> Tensor:
        """The wrapped oracle's attribution scores on D_dist (gradients need the model; nothing to remember)."""
        if not hasattr(self.oracle, "attribution_scores"):
            raise ValueError(f"{type(self.oracle).__name__} cannot compute attribution scores (it has no model)")
        return self.oracle.attribution_scores(batch_size)

    def fix_selection(self, heads: HeadsLike, *, prior_reads: Sequence[dict[str, Any]] = (), **data: Any) -> bool:
        """Fix S-hat before the test split is read; returns :attr:`selected_before_test`.

        With a journal a ``selected`` event (with ``data`` and the flag) is appended, or, when one
        is recorded already, checked: a run's selection cannot change once D_test may have been read.
        In memory a new selection replaces the old one, and is marked as made after the test split
        was read if it was. ``prior_reads``: reads of D_test recorded elsewhere before this moment
        (the seal's ledger, :mod:`cel_lens.evaluation.seal`); any makes the flag false, and they
        are kept (:attr:`prior_reads`) and recorded as the reason."""
        hs = HeadSet.parse(heads)
        prev = self.journal.selection() if self.journal is not None else None
        if prev is None and self._selection != hs:
            self.prior_reads = list(prior_reads)
            self._test_seen |= bool(prior_reads)
        if prev is not None and HeadSet.parse(prev.get("heads")) != hs:
            raise RuntimeError(
                f"{getattr(self.journal, 'path', 'the run')} already selected {prev.get('heads')} before reading the "
                f"test split, but this search selects {hs}; a selection cannot change once D_test was read "
                "(did the scores or options change?)"
            )
        if prev is not None:
            self.note_selection()
        elif self._selection != hs:
            self._selection, self._clean = hs, not self._test_seen
            if self.journal is not None:
                seal = {"prior_test_reads": len(self.prior_reads), "reads": self.prior_reads[:5]}
                self.journal.record_event("selected", heads=str(hs), selected_before_test=self._clean, seal=seal, **data)
        return bool(self._clean)

    def note_selection(self) -> None:
        """Adopt the journal's ``selected`` event, if it has one (recorded by this or another process)."""
        sel = self.journal.selection() if self.journal is not None else None
        if sel is None:
            return
        hs = HeadSet.parse(sel.get("heads"))
        if self._selection != hs:
            # records written before the flag existed: the guard held for run directories
            self._selection, self._clean = hs, bool(sel.get("selected_before_test", True))
            self.prior_reads = list((sel.get("seal") or {}).get("reads") or [])

"""The evaluation oracle: the one boundary between the search and whatever runs the model.

An *oracle* answers one question: "which examples of split ``"dist"`` (D_dist) or ``"test"``
(D_test) does the model get right with each of these head sets zero-ablated?" Stage 1, stage 2 and
the test statistics (:mod:`cel_lens.scoring`, :mod:`cel_lens.selection`) see nothing else, so the
same search runs over a local model, Ray actors or a synthetic oracle with planted effects.

:class:`MemoOracle` wraps any oracle so that no head set is evaluated twice on one split; with a
*journal* (a run directory, see :mod:`cel_lens.runs`) it is also where the test-split guard lives:
D_test is not read before a selection has been recorded.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.progress import progress_bar

__all__ = [
    "SPLITS",
    "TEST_SPLIT",
    "Oracle",
    "Journal",
    "MemoOracle",
    "call_oracle",
    "evaluate_chunked",
]

SPLITS: tuple[str, ...] = ("dist", "test")
"""The two splits an oracle knows: D_dist (discovery) and D_test (held out)."""
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


class MemoOracle:
    """An oracle that evaluates each head set at most once per split and remembers the answer.

    ``hits`` and ``misses`` count head sets answered from memory and evaluated. ``journal`` is
    where a search records its events (``None``: in memory only); with a journal and ``guard_test``
    (default), evaluating the ``"test"`` split before the journal holds a ``selected`` event raises
    ``RuntimeError``: D_test is read only after S-hat is fixed. Subclasses persist evaluations by
    overriding :meth:`persist`.
    """

    def __init__(self, oracle: Oracle, *, journal: Optional[Journal] = None, guard_test: bool = True) -> None:
        self.oracle = oracle
        self.journal = journal
        self.n_layers: int = oracle.n_layers
        self.n_heads: int = oracle.n_heads
        self.guard_test = guard_test and journal is not None
        self.hits = 0
        self.misses = 0
        self._cache: dict[tuple[str, HeadSet], Tensor] = {}
        self._n: dict[str, int] = {}
        self._selected = journal is not None and journal.selection() is not None

    def remember(self, split: str, heads: HeadSet, correct: Tensor) -> None:
        """Keep ``correct`` as the answer for ``heads`` on ``split`` (all answers of a split must
        have the same number of examples)."""
        n = self._n.setdefault(split, int(correct.shape[0]))
        if int(correct.shape[0]) != n:
            raise ValueError(
                f"split {split!r}: evaluation of {heads} has {correct.shape[0]} examples, "
                f"earlier ones {n} (the split changed under this run directory)"
            )
        self._cache[(split, heads)] = correct

    def is_recorded(self, split: str, head_set: HeadsLike) -> bool:
        """Whether ``head_set`` already has an answer on ``split``."""
        return (split, HeadSet.parse(head_set)) in self._cache

    def persist(self, split: str, head_sets: list[HeadSet], correct: Tensor, stage: str) -> None:
        """Persist freshly evaluated head sets (nothing to do in memory; run directories append them)."""

    def _check_test_allowed(self, split: str) -> None:
        if split == TEST_SPLIT and self.guard_test and not self._selected:
            self.note_selection()
            if not self._selected:
                raise RuntimeError(
                    "the test split was requested before a selection was recorded in "
                    f"{getattr(self.journal, 'path', self.journal)}; record the 'selected' event first"
                )

    def evaluate(
        self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = ""
    ) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]``; head sets without an answer are
        evaluated in one call to the wrapped oracle (and recorded, tagged ``stage``)."""
        sets = [HeadSet.parse(s) for s in head_sets]
        self._check_test_allowed(split)
        missing = list(dict.fromkeys(s for s in sets if (split, s) not in self._cache))
        if missing:
            correct = call_oracle(self.oracle, split, missing, stage or split)
            for s, c in zip(missing, correct):
                self.remember(split, s, c)
            self.persist(split, missing, correct, stage or split)
        self.misses += len(missing)
        self.hits += len(sets) - len(missing)
        if not sets:
            return torch.zeros(0, self._n.get(split, 0), dtype=torch.bool)
        return torch.stack([self._cache[(split, s)] for s in sets])

    def attribution_scores(self, batch_size: int) -> Tensor:
        """The wrapped oracle's attribution scores (gradients need the model; nothing to remember)."""
        if not hasattr(self.oracle, "attribution_scores"):
            raise ValueError(f"{type(self.oracle).__name__} cannot compute attribution scores (it has no model)")
        return self.oracle.attribution_scores(batch_size)

    def note_selection(self) -> None:
        """Tell the oracle that a ``selected`` event has just been recorded."""
        self._selected = self.journal is None or self.journal.selection() is not None

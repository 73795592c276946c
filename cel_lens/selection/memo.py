"""The search's view of an oracle: each head set evaluated at most once per split, and the
test-split guard.

:class:`MemoOracle` wraps any :class:`~cel_lens.oracle.Oracle` so that no head set is evaluated
twice on one split, and it is where the test-split guard lives, with or without a *journal* (a run
directory, see :mod:`cel_lens.runs`): D_test is not read before the search has fixed its selection
(:meth:`MemoOracle.fix_selection`), and the oracle knows from what happened whether the selection
was fixed before any test read. It belongs to the selection (it holds S-hat), above the oracle
protocol it wraps (:mod:`cel_lens.oracle`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.oracle import (
    ANSWER_KEY, ATTRIBUTION, CHOICES, CONTROLS, JOURNAL, LOCAL_MODEL, TEST_READS, TEST_SPLIT, AnswerKey, Journal, Oracle,
    OracleBase, TestSplitError, call_oracle, capabilities,
)

__all__ = ["MemoOracle", "CALL_SECONDS", "FIRST_PIECE", "call_choice_oracle"]

CALL_SECONDS = 300.0
"""With a journal, the wall seconds one call to the wrapped oracle aims at: the most an interrupted
search loses. A request for many head sets (exact stage 1's 64 at a time) is cut into calls of as
many as the split's last measured seconds per layer pass allow; each is journaled when it returns.
(One BoolQ head over 500 real prompts takes minutes on a CPU: 64 of them, hours.) A head set costs
the layers from its first ablated one up (the ones below come from the cached residual stream), so
a rate measured on deep heads does not pack a call with shallow ones (measured per head set, the
null's first call, one head of layer 26 of 30, sized the next call of BoolQ null sets at many
times this, with no journal line for over 13 minutes)."""

FIRST_PIECE = 4
"""Head sets in a journaled split's first call, before its cost per head set is measured."""


def call_choice_oracle(
    oracle: Oracle, split: str, head_sets: Sequence[HeadSet], stage: str
) -> tuple[Bool[Tensor, "variant example"], Optional[Float[Tensor, "variant example choice"]]]:
    """:func:`~cel_lens.oracle.call_oracle`, and the per-choice scores the same forward passes computed when
    the oracle reports them (it declares :data:`~cel_lens.oracle.CHOICES`; ``None`` otherwise or for tasks without
    choices). A choice an example does not have is NaN. The wrapped oracle's call of
    :class:`MemoOracle` lives here, beside it, so a search's call path enters the oracle protocol's
    module once (``tests/test_config_path.py``)."""
    if CHOICES not in capabilities(oracle):
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


class MemoOracle(OracleBase):
    """An oracle that evaluates each head set at most once per split, remembers the answer, and
    guards the test split.

    ``hits`` and ``misses`` count head sets answered from memory and evaluated. The guard holds
    with or without a ``journal`` (where a search records its events; ``None``: in memory only):
    with ``guard_test`` (default) evaluating the ``"test"`` split before a selection is fixed
    (:meth:`fix_selection`, or a ``selected`` event already in the journal) raises
    :class:`TestSplitError`. :attr:`selected_before_test` says, from what happened, whether the
    current selection was fixed before any test read (a test read before it, allowed only with
    ``guard_test=False`` or found in a journal, makes it ``False``). Subclasses persist evaluations
    by overriding :meth:`persist`; with a journal a request is cut into calls of about
    :attr:`call_seconds` (:data:`CALL_SECONDS`; ``None``: one call), each persisted as it returns,
    so an interrupted search loses at most one such call. ``timer``, when set, is called as ``timer(head_sets, correct,
    seconds)`` after every call that evaluates (not after answers from memory): how a search times
    its first batch (:class:`cel_lens.selection.plan.BatchTimer`).
    """

    @property
    def capabilities(self) -> frozenset[str]:  # type: ignore[override]
        """What it declares: its journal, and what it passes on from the wrapped oracle (the answer
        key, attribution scores, the seal ledger's reads, the local model)."""
        passed = capabilities(self.oracle) & {ANSWER_KEY, ATTRIBUTION, TEST_READS, LOCAL_MODEL, CONTROLS}
        return passed | {JOURNAL, ANSWER_KEY, ATTRIBUTION}

    def test_reads(self) -> list[dict[str, Any]]:
        """The wrapped oracle's seal-ledger reads of its D_test (none when it declares no :data:`TEST_READS`)."""
        return self.oracle.test_reads() if TEST_READS in capabilities(self.oracle) else []

    def ablation_controls(self, heads: HeadSet, *, seed: int, n_boot: int, alpha: float) -> Optional[dict[str, Any]]:
        """The wrapped oracle's :data:`CONTROLS` for ``heads``, recorded in (and read back from) this
        oracle's journal. Only once S-hat is fixed: they read D_test."""
        self._check_test_allowed(TEST_SPLIT)
        return self.oracle.ablation_controls(heads, seed=seed, n_boot=n_boot, alpha=alpha, journal=self.journal)

    def local_model(self) -> Any:
        """The wrapped oracle's local model (``None`` when it declares no :data:`LOCAL_MODEL`)."""
        return self.oracle.local_model() if LOCAL_MODEL in capabilities(self.oracle) else None

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
        self.call_seconds: Optional[float] = CALL_SECONDS
        self._seconds_per_pass: dict[str, float] = {}
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

    def held_sets(self) -> int:
        """Head sets answered so far, over all splits (a run directory's, when resumed)."""
        return len(self._cache)

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
        return self.oracle.answer_key(split) if ANSWER_KEY in capabilities(self.oracle) else None

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
        done = 0
        while done < len(missing):
            piece = missing[done : done + self._piece_size(split, missing[done:])]
            self._evaluate_piece(split, piece, stage or split)
            done += len(piece)
        self.misses += len(missing)
        self.hits += len(sets) - len(missing)
        if not sets:
            return torch.zeros(0, self._n.get(split, 0), dtype=torch.bool)
        return torch.stack([self._cache[(split, s)] for s in sets])

    def _piece_size(self, split: str, remaining: Sequence[HeadSet]) -> int:
        """How many of the ``remaining`` head sets (in order) the next oracle call evaluates: all of
        them in memory; with a journal, as many as fit :attr:`call_seconds` at the split's last
        measured wall seconds per layer run (:meth:`~cel_lens.heads.HeadSet.layers_run`;
        :data:`FIRST_PIECE` before any was measured); at least one."""
        if self.journal is None or self.call_seconds is None:
            return len(remaining)
        rate = self._seconds_per_pass.get(split)
        if rate is None:
            return max(1, min(len(remaining), FIRST_PIECE))
        budget, n = self.call_seconds / max(rate, 1e-12), 0
        for heads in remaining:
            budget -= heads.layers_run(self.n_layers)
            if budget < 0:
                break
            n += 1
        return max(1, n)

    def _evaluate_piece(self, split: str, piece: list[HeadSet], stage: str) -> None:
        """Evaluate ``piece`` in one call to the wrapped oracle; remember, time and persist it."""
        start = time.perf_counter()
        correct, choice_scores = call_choice_oracle(self.oracle, split, piece, stage)
        seconds = time.perf_counter() - start
        self._seconds_per_pass[split] = seconds / sum(s.layers_run(self.n_layers) for s in piece)
        if self.timer is not None:
            self.timer(piece, correct, seconds)
        for i, (s, c) in enumerate(zip(piece, correct)):
            self.remember(split, s, c, None if choice_scores is None else choice_scores[i])
        if choice_scores is None:
            self.persist(split, piece, correct, stage)
        else:
            self.persist(split, piece, correct, stage, choice_scores=choice_scores)

    def attribution_scores(self, batch_size: int) -> Tensor:
        """The wrapped oracle's attribution scores on D_dist (gradients need the model; nothing to remember)."""
        if ATTRIBUTION not in capabilities(self.oracle):
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

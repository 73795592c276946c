"""The search's MemoOracle (cel_lens.selection.memo): memoisation, the test-split guard with and
without a journal, and the ``selected_before_test`` flag computed from what happened."""

from __future__ import annotations

from typing import Any, Optional

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.oracle import TestSplitError
from cel_lens.selection.memo import MemoOracle
from cel_lens.testing import SyntheticOracle


class ListJournal:
    """An in-memory journal (the protocol a run directory implements)."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []

    def record_event(self, event: str, **data: Any) -> dict[str, Any]:
        self.log.append({"event": event, **data})
        return self.log[-1]

    def events(self, event: Optional[str] = None) -> list[dict[str, Any]]:
        return [e for e in self.log if event is None or e["event"] == event]

    def selection(self) -> Optional[dict[str, Any]]:
        sel = self.events("selected")
        return sel[0] if sel else None

    def write_result(self, result: Any) -> None:
        self.log.append({"event": "result", "result": result})


def _oracle() -> SyntheticOracle:
    return SyntheticOracle(2, 3, n_dist=50, n_test=40, effects={"L1H2": 0.2}, noise=0.05)


def test_memo_answers_each_head_set_once():
    inner = _oracle()
    memo = MemoOracle(inner)
    sets = [HeadSet(), HeadSet.parse("L1H2"), HeadSet()]
    first = memo.evaluate("dist", sets)
    assert torch.equal(first, inner.evaluate("dist", sets))
    assert memo.misses == 2 and memo.hits == 1
    assert torch.equal(memo.evaluate("dist", sets), first) and memo.misses == 2


@pytest.mark.parametrize("journal", [None, "list"])
def test_test_split_is_refused_before_a_selection_with_or_without_journal(journal):
    memo = MemoOracle(_oracle(), journal=ListJournal() if journal else None)
    memo.evaluate("dist", [HeadSet()])
    with pytest.raises(TestSplitError, match="before a selection"):
        memo.evaluate("test", [HeadSet()])
    assert memo.selection is None and memo.selected_before_test is None
    assert memo.fix_selection("L1H2") is True
    assert memo.selection == HeadSet.parse("L1H2") and memo.selected_before_test is True
    assert memo.evaluate("test", [HeadSet(), HeadSet.parse("L1H2")]).shape == (2, 40)
    if journal:
        (event,) = memo.journal.events("selected")
        assert event["heads"] == "L1H2" and event["selected_before_test"] is True


def test_flag_is_false_when_the_test_split_was_read_first():
    memo = MemoOracle(_oracle(), guard_test=False)
    memo.evaluate("test", [HeadSet()])  # allowed without the guard, and remembered
    assert memo.fix_selection("L1H2") is False and memo.selected_before_test is False


def test_a_new_selection_after_test_reads_is_marked_in_memory_and_refused_in_a_journal():
    memo = MemoOracle(_oracle())
    memo.fix_selection("L1H2")
    memo.evaluate("test", [HeadSet()])
    assert memo.fix_selection("L1H2") is True  # the same selection again: unchanged
    assert memo.fix_selection("L0H0") is False  # chosen after D_test was read through this oracle
    recorded = MemoOracle(_oracle(), journal=ListJournal())
    recorded.fix_selection("L1H2")
    with pytest.raises(RuntimeError, match="already selected"):
        recorded.fix_selection("L0H0")


def test_a_journal_selection_is_adopted_with_its_flag():
    journal = ListJournal()
    journal.record_event("selected", heads="L0H1", selected_before_test=False)
    memo = MemoOracle(_oracle(), journal=journal)
    assert memo.selection == HeadSet.parse("L0H1") and memo.selected_before_test is False
    memo.evaluate("test", [HeadSet()])  # allowed: the journal holds a selection
    legacy = ListJournal()
    legacy.record_event("selected", heads="L0H1")  # written before the flag existed
    assert MemoOracle(_oracle(), journal=legacy).selected_before_test is True


def test_a_selection_recorded_by_another_process_opens_the_test_split():
    journal = ListJournal()
    memo = MemoOracle(_oracle(), journal=journal)
    journal.record_event("selected", heads="L1H2", selected_before_test=True)
    assert memo.evaluate("test", [HeadSet()]).shape == (1, 40)


class TimedOracle:
    """A synthetic oracle on a fake clock: each head set costs ``seconds`` per layer from its first
    ablated one up (as an evaluation from the cached residual stream does); records each call's size
    and seconds, and raises on call number ``fail_at`` (an interrupted search)."""

    def __init__(self, seconds: float, fail_at: Optional[int] = None) -> None:
        self.inner, self.seconds, self.fail_at = _oracle(), seconds, fail_at
        self.n_layers, self.n_heads = self.inner.n_layers, self.inner.n_heads
        self.now, self.calls, self.call_seconds = 0.0, [], []

    def clock(self) -> float:
        return self.now

    def evaluate(self, split, head_sets, *, stage=""):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append(len(head_sets))
        passes = sum(self.n_layers - (HeadSet.parse(h).first_layer or 0) for h in head_sets)
        self.call_seconds.append(self.seconds * passes)
        self.now += self.seconds * passes
        return self.inner.evaluate(split, head_sets, stage=stage)


class PersistingMemo(MemoOracle):
    def __init__(self, oracle, journal) -> None:
        super().__init__(oracle, journal=journal)
        self.persisted: list[list[HeadSet]] = []

    def persist(self, split, head_sets, correct, stage, choice_scores=None) -> None:
        self.persisted.append(list(head_sets))


def _sets() -> list[HeadSet]:
    """6 single heads, then 9 pairs."""
    singles = [HeadSet.parse(f"L{l}H{h}") for l in range(2) for h in range(3)]
    return singles + [HeadSet.parse(f"L0H{h}+L1H{g}") for h in range(3) for g in range(3)]


def test_a_journaled_request_is_cut_into_calls_of_about_call_seconds(monkeypatch):
    """With a journal, a long request is evaluated in calls that each take about CALL_SECONDS (the
    first FIRST_PIECE sets, then as many as the measured rate allows) and each is persisted as it
    returns; the answers are those of one call."""
    from cel_lens.selection import memo as memo_module

    timed = TimedOracle(seconds=40.0)
    monkeypatch.setattr(memo_module.time, "perf_counter", timed.clock)
    memo = PersistingMemo(timed, ListJournal())
    memo.call_seconds = 100.0
    sets = _sets()
    out = memo.evaluate("dist", sets, stage="stage1")
    assert torch.equal(out, _oracle().evaluate("dist", sets))
    # 4 sets first (7 layer passes, 280 s), then what 100 s allow at 40 s a pass: two last-layer
    # heads (1 pass each), then one pair (2 passes) per call
    assert timed.calls == [memo_module.FIRST_PIECE, 2] + [1] * 9
    assert sum(timed.calls) == len(sets) and [len(p) for p in memo.persisted] == timed.calls
    assert memo.misses == len(sets)


def test_a_rate_measured_on_deep_heads_does_not_pack_a_call_with_shallow_ones(monkeypatch):
    """The first call holds only last-layer heads (1 layer pass each, cheap); the calls after it,
    of first-layer heads and pairs (2 passes each), still stay within call_seconds. Sized per head
    set instead, each would have held ten sets at twice the time."""
    from cel_lens.selection import memo as memo_module

    timed = TimedOracle(seconds=10.0)
    monkeypatch.setattr(memo_module.time, "perf_counter", timed.clock)
    monkeypatch.setattr(memo_module, "FIRST_PIECE", 3)
    memo = PersistingMemo(timed, ListJournal())
    memo.call_seconds = 100.0
    deep_first = sorted(_sets(), key=lambda s: -(s.first_layer or 0))
    memo.evaluate("dist", deep_first, stage="stage1")
    assert timed.calls[0] == 3 and timed.call_seconds[0] == 30.0
    assert max(timed.call_seconds[1:]) <= memo.call_seconds and timed.calls[1:] == [5, 5, 2]
    assert sum(timed.calls) == len(deep_first)


def test_an_interrupted_request_keeps_the_calls_that_returned(monkeypatch):
    from cel_lens.selection import memo as memo_module

    timed = TimedOracle(seconds=60.0, fail_at=2)
    monkeypatch.setattr(memo_module.time, "perf_counter", timed.clock)
    memo = PersistingMemo(timed, ListJournal())
    memo.call_seconds = 120.0
    sets = _sets()
    with pytest.raises(KeyboardInterrupt):
        memo.evaluate("dist", sets)
    assert timed.calls == [4, 2] and [len(p) for p in memo.persisted] == [4, 2]
    assert [memo.is_recorded("dist", s) for s in sets] == [True] * 6 + [False] * 9


@pytest.mark.parametrize("journal, call_seconds", [(None, 1.0), ("list", None)])
def test_in_memory_or_unbounded_a_request_is_one_call(monkeypatch, journal, call_seconds):
    from cel_lens.selection import memo as memo_module

    timed = TimedOracle(seconds=50.0)
    monkeypatch.setattr(memo_module.time, "perf_counter", timed.clock)
    memo = MemoOracle(timed, journal=ListJournal() if journal else None)
    memo.call_seconds = call_seconds
    sets = [HeadSet.parse(f"L{l}H{h}") for l in range(2) for h in range(3)]
    memo.evaluate("dist", sets)
    assert timed.calls == [6]

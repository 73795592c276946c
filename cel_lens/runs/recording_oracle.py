"""An oracle that records every evaluation in a run directory and answers from the record.

:class:`RecordingOracle` answers from the recorded evaluations and evaluates (and appends) only
what is missing, so running the same search again resumes where it stopped and reaches the same
result. It is the run directory's journal for :func:`cel_lens.selection.run_search`, so the search
records its events (stage-1 scores, pool, selection, result) in the same directory.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.oracle import Oracle
from cel_lens.selection.memo import MemoOracle
from cel_lens.runs.run_dir import RunDir

__all__ = ["RecordingOracle", "CachedOracle"]


class RecordingOracle(MemoOracle):
    """A :class:`~cel_lens.selection.memo.MemoOracle` whose memory is a run directory: recorded evaluations
    are loaded on construction, new ones are appended (fsync'd) as soon as they are computed, and
    the test-split guard holds (D_test only after a ``selected`` event). ``run=None``: memory only."""

    def __init__(self, oracle: Oracle, run: Optional[RunDir] = None, *, guard_test: bool = True) -> None:
        super().__init__(oracle, journal=run, guard_test=guard_test)
        self.run = run
        if run is not None:
            for ev in run.evaluations():
                self.remember(ev.split, ev.heads, ev.correct, ev.choice_scores)

    def persist(
        self, split: str, head_sets: list[HeadSet], correct: Tensor, stage: str, choice_scores: Optional[Tensor] = None
    ) -> None:
        """Append the new evaluations (with their per-choice scores, when known) to the run directory."""
        if self.run is not None:
            self.run.append_evaluations(split, head_sets, correct, stage, choice_scores=choice_scores)


CachedOracle = RecordingOracle
"""Former name of :class:`RecordingOracle`."""

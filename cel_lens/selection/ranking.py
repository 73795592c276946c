"""Which gain ranks stage 1 and chooses the subset: raw, or calibrated on D_dist (``SearchConfig.rank_by``).

The paper's Algorithm 1 ranks heads and chooses S-hat by the raw D_dist accuracy gain. On a
multiple-choice task a head that only moves the answer prior wins that ranking (removing it tips
answers towards the majority label), and calibration takes its gain back only afterwards, on D_test
(:mod:`cel_lens.selection.calibration`). With ``rank_by="calibrated"`` the search sees, instead of
each head set's raw D_dist correctness, its correctness at *its own best constant answer prior on
D_dist*: the per-choice bias of :func:`~cel_lens.selection.calibration.fit_choice_bias` (the same
rule and tie rule the calibration block uses), fitted on that head set's D_dist choice scores and
applied to them. A head set's calibrated gain is then its best-prior D_dist accuracy minus the
intact model's, both fitted on D_dist; D_test is never read. Stage 1, stage 2, the parsimony rule,
the stability checks and the selection-adjusted test all read these calibrated bits (each bias is
fitted once, on the whole D_dist: a resample reuses it, so they are in-sample fits).

:class:`CalibratedDist` is that view of the search's :class:`~cel_lens.selection.memo.MemoOracle`:
it asks the memo for the raw evaluations (the same forward passes; the journal records them and
their choice scores as always) and turns them into calibrated correctness. It knows nothing of the
model behind the oracle, only its recorded choice scores and the split's answer key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.oracle import CHOICES, DIST_SPLIT, TestSplitError, capabilities
from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias
from cel_lens.selection.memo import MemoOracle
from cel_lens.tasks.answer_types import answer_type_entry

__all__ = ["RankRule", "RAW", "CALIBRATED", "CalibratedDist", "ranking_view", "check_calibrated_ranking"]


@dataclass(frozen=True)
class RankRule:
    """A ``rank_by`` entry (:data:`cel_lens.config.RANK_RULES`): whether it ranks by calibrated gains,
    the scorer it needs (``None``: any), and the words the result and the warnings put before
    "discovery gain" and "accuracy" under it."""

    name: str
    calibrated: bool
    needs_scorer: Optional[str] = None

    @property
    def gain_words(self) -> str:
        """``"calibrated "`` or ``""``: what a discovery gain is called under this rule."""
        return "calibrated " if self.calibrated else ""

    @property
    def accuracy_words(self) -> str:
        """``"best-prior "`` or ``""``: what D_dist accuracy is called under this rule."""
        return "best-prior " if self.calibrated else ""

    def check_answer_type(self, answer_type: Optional[str]) -> None:
        """``ValueError`` when this rule cannot rank a task of ``answer_type`` (``None``: not known
        yet, left to :func:`check_calibrated_ranking`): a search checks it before it writes anything."""
        if self.calibrated and answer_type is not None and not answer_type_entry(answer_type).calibrates:
            raise ValueError(_no_prior(f"answer type {answer_type!r}"))

    def view(self, memo: MemoOracle) -> "MemoOracle | CalibratedDist":
        """What stage 1 and stage 2 read: ``memo`` itself, or its :class:`CalibratedDist` (checked
        first by :func:`check_calibrated_ranking`)."""
        return CalibratedDist(memo, check_calibrated_ranking(memo)) if self.calibrated else memo


RAW = RankRule("raw", calibrated=False)
"""``rank_by`` of the paper's Algorithm 1: raw D_dist accuracy gains (the default)."""
CALIBRATED = RankRule("calibrated", calibrated=True, needs_scorer="exact")
"""``rank_by`` that ranks and chooses by the gain at each head set's best constant prior on D_dist
(exact stage 1 only: it alone gives every head's choice scores)."""


def check_calibrated_ranking(memo: MemoOracle) -> Tensor:
    """The D_dist labels a calibrated ranking fits to; ``ValueError`` (before any evaluation) when
    the oracle does not report choice scores (:data:`~cel_lens.oracle.CHOICES`) or the task's answers
    are not fixed choices with labels (its answer type does not calibrate)."""
    inner = memo.oracle
    if CHOICES not in capabilities(inner):
        raise ValueError(
            f"rank_by 'calibrated' needs an oracle that reports each choice's score (the CHOICES capability); "
            f"{type(inner).__name__} does not: use rank_by 'raw'"
        )
    key = memo.answer_key(DIST_SPLIT)
    if key is None or key.labels is None or not answer_type_entry(key.answer_type).calibrates:
        raise ValueError(_no_prior("no answer key" if key is None else f"answer type {key.answer_type!r}"))
    return key.labels.long().cpu()


def _no_prior(kind: str) -> str:
    """The refusal of a calibrated ranking on a task without an answer prior (``kind``: what it has)."""
    return (f"rank_by 'calibrated' needs a task whose answers are fixed choices with labels on D_dist ({kind}: "
            "there is no answer prior to fit); use rank_by 'raw'")


class CalibratedDist:
    """The search's oracle as stage 1 and stage 2 see it under ``rank_by="calibrated"``: per-example
    D_dist correctness of each head set at its own best constant answer prior fitted on D_dist.

    ``evaluate`` and ``recorded`` mirror :class:`~cel_lens.selection.memo.MemoOracle`'s for D_dist
    (the memo evaluates, remembers and journals the raw answers); D_test is refused: the selection
    sees D_dist only. Each head set's bias is fitted once and remembered."""

    def __init__(self, memo: MemoOracle, labels: Tensor) -> None:
        self.memo = memo
        self.labels = labels
        self.n_layers: int = memo.n_layers
        self.n_heads: int = memo.n_heads
        self._bits: dict[HeadSet, Tensor] = {}

    def _calibrated(self, heads: HeadSet) -> Bool[Tensor, " example"]:
        """``heads``' D_dist correctness at its best constant prior on D_dist (remembered)."""
        if heads not in self._bits:
            scores = self.memo.choice_scores(DIST_SPLIT, heads)
            if scores is None:
                raise ValueError(
                    f"rank_by 'calibrated': no choice scores recorded for {heads} on D_dist (a run directory written "
                    "without them, or an oracle that reported none for this task); use rank_by 'raw'"
                )
            self._bits[heads] = calibrated_predictions(scores, fit_choice_bias(scores, self.labels)) == self.labels
        return self._bits[heads]

    def _check_split(self, split: str) -> None:
        if split != DIST_SPLIT:
            raise TestSplitError(f"the calibrated ranking reads D_dist only, not split {split!r}")

    def evaluate(self, split: str, head_sets: Sequence[HeadsLike], *, stage: str = "") -> Bool[Tensor, "variant example"]:
        """Calibrated correctness ``[variant, example]`` on D_dist (the memo evaluates what it lacks)."""
        self._check_split(split)
        sets = [HeadSet.parse(s) for s in head_sets]
        self.memo.evaluate(split, sets, stage=stage)
        if not sets:
            return torch.zeros(0, self.labels.numel(), dtype=torch.bool)
        return torch.stack([self._calibrated(s) for s in sets])

    def recorded(self, split: str) -> tuple[list[HeadSet], Bool[Tensor, "variant example"]]:
        """Every head set the memo answered on D_dist and its calibrated correctness."""
        self._check_split(split)
        sets, bits = self.memo.recorded(split)
        if not sets:
            return sets, bits
        return sets, torch.stack([self._calibrated(s) for s in sets])


def ranking_view(memo: MemoOracle, rank_by: str) -> MemoOracle | CalibratedDist:
    """What stage 1 and stage 2 read under rule ``rank_by`` (:meth:`RankRule.view`; an unknown
    name fails with the registry's message)."""
    from cel_lens.config import RANK_RULES

    return RANK_RULES.resolve(rank_by).view(memo)

"""The evaluation oracle: the one boundary between the search and whatever runs the model.

An *oracle* answers one question: "which examples of split ``"dist"`` (D_dist) or ``"test"``
(D_test) does the model get right with each of these head sets zero-ablated?" Stage 1, stage 2 and
the test statistics (:mod:`cel_lens.scoring`, :mod:`cel_lens.selection`) see nothing else, so the
same search runs over a local model, Ray actors or a synthetic oracle with planted effects.

:class:`Journal` is what a search records into (a run directory, see :mod:`cel_lens.runs`);
the wrapper that remembers answers and guards the test split is the search's own
(:class:`cel_lens.selection.memo.MemoOracle`). :class:`Stage1Scores` carries stage-1 scores with
the split they were computed on, so that a search can refuse scores that did not come from D_dist.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence, Union, runtime_checkable

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
    "OracleBase",
    "CHOICES",
    "ANSWER_KEY",
    "ATTRIBUTION",
    "TEST_READS",
    "LOCAL_MODEL",
    "JOURNAL",
    "CONTROLS",
    "CAPABILITIES",
    "capabilities",
    "Journal",
    "Stage1Scores",
    "TestSplitError",
    "discovery_scores",
    "call_oracle",
    "evaluate_chunked",
    "AnswerKey",
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


CHOICES = "choices"
"""``evaluate_choices(split, head_sets, *, stage)``: correctness and each choice's score from the same passes."""
ANSWER_KEY = "answer_key"
"""``answer_key(split)``: the split's :class:`AnswerKey` (task data; runs nothing)."""
ATTRIBUTION = "attribution"
"""``attribution_scores(batch_size)``: attribution scores of every head on D_dist (needs the model)."""
TEST_READS = "test_reads"
"""``test_reads()``: the seal ledger's reads of this task's D_test by this model."""
LOCAL_MODEL = "local_model"
"""``local_model()``: the model object the oracle evaluates in this process."""
JOURNAL = "journal"
"""``journal``: the :class:`Journal` the oracle records into (``None`` in memory)."""
CONTROLS = "ablation_controls"
"""``ablation_controls(heads, *, seed, n_boot, alpha, journal)``: S-hat's D_test gain under every
ablation kind the search did not use (``None`` for an empty S-hat); read back from ``journal`` when recorded."""
CAPABILITIES: frozenset[str] = frozenset({CHOICES, ANSWER_KEY, ATTRIBUTION, TEST_READS, LOCAL_MODEL, JOURNAL, CONTROLS})
"""Every optional part an oracle may declare."""


class OracleBase:
    """What an oracle declares beyond :class:`Oracle`'s ``evaluate``: its :attr:`capabilities`,
    each the name of a method (or attribute) it then has (:data:`CHOICES`, :data:`ANSWER_KEY`,
    :data:`ATTRIBUTION`, :data:`TEST_READS`, :data:`LOCAL_MODEL`, :data:`JOURNAL`, :data:`CONTROLS`). The search asks
    :func:`capabilities`, never the object whether it has a method."""

    capabilities: frozenset[str] = frozenset()


def capabilities(oracle: Any) -> frozenset[str]:
    """What ``oracle`` declared it can do beyond ``evaluate``: an :class:`OracleBase`'s
    :attr:`~OracleBase.capabilities`; nothing for any other oracle."""
    return oracle.capabilities if isinstance(oracle, OracleBase) else frozenset()


@dataclass(frozen=True)
class AnswerKey:
    """What an answer prior can act on in a split: the split's ``answer_type``, each example's gold answer as
    an index into ``names`` (``labels``, ``None`` when the answers form no small closed set, as in
    generation or free-form exact match) and the answers' display ``names``. Task data, not a model
    output: reading it runs nothing."""

    answer_type: str
    labels: Optional[Tensor] = None
    names: tuple[str, ...] = ()


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

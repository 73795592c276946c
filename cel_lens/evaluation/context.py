"""What an evaluation does besides its inputs, in one argument: :class:`EvalContext`.

An evaluation's settings (compute precision, ablation kind, prefix sharing, who reads D_test) are
decided by its arguments alone: one frozen :class:`EvalContext` is built at the edge (``cl.search``
from its :class:`~cel_lens.config.SearchConfig`, ``cl.evaluate`` from its keywords, the CLI) and
handed down to the oracle, the evaluator and every backend. No setting is read from the model or a
module global, so two searches with different settings on one model, in two threads, each get
what they would get alone. Within a bf16 evaluation the evaluator passes ``bf16=True`` to every
pass that is to run on the bfloat16 weight copy (:mod:`~cel_lens.model.stack_bf16`); only a model
without that copy (no fused stack) computes bf16 under ``torch.autocast``, torch's own per-thread
mode, entered and left by the evaluation itself. The environment (:data:`PRECISION_ENV`,
:data:`PREFIX_ENV`) is read here only, by :meth:`EvalContext.from_environment`, which the edges call.

A context also carries the run's :class:`RecomputeTally`: what its bf16 evaluations recomputed in
float32 and the one-token-choice check's evidence, owned by whoever built the context (one search),
never by the model.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from jaxtyping import Bool
from torch import Tensor

from cel_lens.evaluation.precision import check_precision, precision_entry
from cel_lens.evaluation.seal import SealReader
from cel_lens.model.ablation import ZERO, Ablation

__all__ = ["EvalContext", "RecomputeTally", "PRECISION_ENV", "PREFIX_ENV", "env_flag"]

PRECISION_ENV = "CEL_LENS_PRECISION"
"""Environment variable that replaces ``precision="auto"`` at the edge (e.g. ``float32`` in the
test suite, whose tests compare floats across paths)."""

PREFIX_ENV = "CEL_LENS_SHARE_PREFIX"
"""Environment variable that sets prefix sharing at the edge (``1``/``0``) for every process that
inherits it (a Ray worker too), unless the caller says otherwise."""


def env_flag(name: str) -> Optional[bool]:
    """``True``/``False`` for an environment variable set to a yes/no word, ``None`` when unset or empty."""
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return None
    return text in ("1", "true", "yes", "on")


class RecomputeTally:
    """Per split name: decisions made in bf16 and those recomputed in float32; per (task, split):
    the one-token-choice pair check's evidence (:func:`~cel_lens.evaluation.precision.pair_check`).
    Safe to share between the threads of one search (a lock guards it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, list[int]] = {}
        self.pairs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, split_name: str, redo: Bool[Tensor, "variant example"]) -> None:
        """Count ``redo``'s decisions, and those marked (recomputed), under ``split_name``."""
        with self._lock:
            counts = self.counts.setdefault(split_name, [0, 0])
            counts[0] += int(redo.sum())
            counts[1] += int(redo.numel())

    def pair_record(self, key: tuple[str, str]) -> dict[str, Any]:
        """The pair check's evidence so far for ``key`` (``{}`` before any)."""
        with self._lock:
            return dict(self.pairs.get(key, {}))

    def set_pair_record(self, key: tuple[str, str], record: dict[str, Any]) -> None:
        """Replace ``key``'s pair-check evidence with ``record`` (the earlier evidence merged in)."""
        with self._lock:
            self.pairs[key] = dict(record)

    def snapshot(self) -> tuple[dict[str, list[int]], dict[tuple[str, str], dict[str, Any]]]:
        """Copies of the counts and the pair records, taken under the lock."""
        with self._lock:
            return {k: list(v) for k, v in self.counts.items()}, {k: dict(v) for k, v in self.pairs.items()}


@dataclass(frozen=True)
class EvalContext:
    """The settings of an evaluation (see the module docstring).

    ``precision``: ``"auto"``, ``"float32"`` or ``"bf16"`` (:mod:`~cel_lens.evaluation.precision`);
    ``ablation``: what replaces an ablated head's ``z`` (:class:`~cel_lens.model.ablation.Ablation`,
    zero by default); ``share_prefix``: encode batches with their shared prompt start computed once
    (:mod:`~cel_lens.evaluation.prefix`); ``reader``: who reads D_test, for the seal's ledger
    (``None``: an unclaimed read, which warns); ``tally``: the recompute tally this context's
    evaluations add to."""

    precision: str = "auto"
    ablation: Ablation = ZERO
    share_prefix: bool = True
    reader: Optional[SealReader] = None
    tally: RecomputeTally = field(default_factory=RecomputeTally, compare=False, repr=False)

    @classmethod
    def from_environment(
        cls, precision: Optional[str] = None, *, share_prefix: Optional[bool] = None, **fields: Any
    ) -> "EvalContext":
        """A context from explicit choices, the environment filling what they leave open:
        ``precision`` ``None``/``"auto"`` takes :data:`PRECISION_ENV` when set, ``share_prefix``
        ``None`` takes :data:`PREFIX_ENV` (else on: its decisions are the unshared path's,
        :mod:`~cel_lens.evaluation.prefix`). The one place evaluation settings are read
        from the environment; edges (``cl.search``, ``cl.evaluate``, the CLI, a Ray worker) call it."""
        from_env = os.environ.get(PRECISION_ENV) or "auto"
        chosen = from_env if precision_entry(precision).automatic else precision
        said = env_flag(PREFIX_ENV)
        prefix = share_prefix if share_prefix is not None else (True if said is None else said)
        return cls(precision=check_precision(chosen), share_prefix=prefix, **fields)

    def with_(self, **changes: Any) -> "EvalContext":
        """This context with ``changes`` (the same tally)."""
        return replace(self, **changes)

"""What a run records of its ablation kind: the learnt ablation (mean, resample), fitted once on
D_dist and read back on resume, and S-hat's D_test gain under the other kinds, as a control.

The control says whether removing the selected heads' information is what helps, or only moving
their output to another value: a zero-ablation gain that mean ablation keeps points to the heads'
information, one that vanishes under mean ablation to a shift of their mean. It is computed after
the selection is fixed (it reads D_test), once per run, and recorded as the ``ablation_controls``
event, so a resumed run reports the same numbers without another forward pass.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from jaxtyping import Int
from torch import Tensor

from cel_lens.config import ABLATION_KINDS
from cel_lens.evaluation.batch import right_pad
from cel_lens.evaluation.encode import encode_prompt
from cel_lens.heads import HeadSet
from cel_lens.model.ablation import (
    Ablation, ablation_from_state, ablation_kind, fit_ablation,
)
from cel_lens.oracle import TEST_SPLIT, Journal, Oracle
from cel_lens.runs.run_dir import RunDir
from cel_lens.selection.records import ControlGain
from cel_lens.stats import paired_bootstrap_ci
from cel_lens.tasks.base import Split

__all__ = ["learn_ablation", "recorded_ablation", "ablation_controls"]


def _prompt_rows(model: Any, dist: Split) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """The D_dist prompts as the model reads them (its BOS rule, no chat template; a token task's
    own ids), right padded (:func:`~cel_lens.evaluation.batch.right_pad`, pad id 0, mask 0 there)."""
    rows = [[int(i) for i in ex.meta["prompt_ids"]] if "prompt_ids" in ex.meta else encode_prompt(model, ex.prompt)
            for ex in dist]
    return right_pad(rows, 0)


def _fit(model: Any, dist: Split, kind: str, seed: int) -> Ablation:
    """``kind`` learnt from the D_dist prompts (:func:`_prompt_rows`)."""
    if not ablation_kind(kind).learns:
        return ablation_kind(kind)()
    tokens, mask = _prompt_rows(model, dist)
    return fit_ablation(kind, model, tokens, mask, seed)


def recorded_ablation(events: Iterable[Mapping[str, Any]], kind: str) -> Optional[Ablation]:
    """The ablation of kind ``kind`` as a run recorded it (the ``ablation`` event
    :func:`learn_ablation` writes), rebuilt; ``None`` when ``events`` hold none. The one reader of
    that event: resuming a run and exporting its model both ask it."""
    for event in events:
        if event.get("event") == "ablation" and event.get("kind") == kind:
            return ablation_from_state({k: v for k, v in event.items() if k not in ("type", "event", "time")})
    return None


def learn_ablation(model: Any, dist: Split, kind: str, seed: int, journal: Optional[Journal] = None) -> Ablation:
    """The run's ablation of kind ``kind``: read back from the ``ablation`` event of ``journal``
    when recorded, else fitted on ``dist`` (with ``seed``) and recorded there."""
    recorded = None if journal is None else recorded_ablation(journal.events("ablation"), kind)
    if recorded is not None:
        return recorded
    ablation = _fit(model, dist, kind, seed)
    if journal is not None and ablation.learns:
        journal.record_event("ablation", **ablation.state())
    return ablation


def ablation_controls(
    model: Any, oracle: Oracle, heads: HeadSet, used: str, dist: Split, *, seed: int, n_boot: int,
    alpha: float = 0.05, journal: Optional[Journal] = None,
) -> Optional[dict[str, ControlGain]]:
    """S-hat's D_test accuracy and gain (paired bootstrap CI) under every ablation kind but
    ``used``: ``{kind: {"acc_ablated", "gain", "ci_low", "ci_high", "record"}}``; ``None`` when S-hat
    is empty. Read back from ``journal`` when recorded (its ``ablation_controls`` event, or the
    finished result of a run directory written before the event existed: D_test is never read for
    them again); the oracle must evaluate on ``model`` in this process (each kind runs through its
    ``with_context``, the oracle itself unchanged)."""
    if not len(heads):
        return None
    if journal is not None:
        recorded = journal.events("ablation_controls")
        if recorded:
            return recorded[-1]["controls"]
        stored = journal.read_result() if isinstance(journal, RunDir) else None
        if stored and stored.get("heads") == str(heads) and stored.get("ablation_controls") is not None:
            return stored["ablation_controls"]
    controls: dict[str, ControlGain] = {}
    for kind in ABLATION_KINDS:
        if kind == used:
            continue
        ablation = _fit(model, dist, kind, seed)
        kind_oracle = oracle.with_context(oracle.context.with_(ablation=ablation))  # type: ignore[attr-defined]
        bits = kind_oracle.evaluate(TEST_SPLIT, [HeadSet(), heads], stage="control").double()
        intact, ablated = bits[0].numpy(), bits[1].numpy()
        low, high = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, alpha=alpha, seed=seed)
        controls[kind] = {
            "acc_ablated": float(ablated.mean()), "gain": float(ablated.mean() - intact.mean()),
            "ci_low": float(low), "ci_high": float(high), "record": ablation.record(),
        }
    if journal is not None:
        journal.record_event("ablation_controls", heads=str(heads), controls=controls)
    return controls

"""A Ray oracle's compute precision: every replica evaluates in the search's ``precision`` and
reports its tally of decisions recomputed in float32 (:mod:`cel_lens.evaluation.precision`)."""

from __future__ import annotations

from typing import Any, Optional

from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.precision import merge_pair_checks, tally_summary

__all__ = ["RayPrecision"]


class RayPrecision:
    """What :class:`~cel_lens.backends.ray.ray_oracle.RayOracle` adds so that a search sets its precision
    on the replicas (as it does on a local model) and records their tally in the manifest."""

    context: EvalContext
    """The settings the replicas evaluate with (its precision and prefix sharing; a learnt ablation never travels); each
    oracle's own, set by :meth:`use_context` (its replicas' environment until then)."""

    def use_context(self, context: EvalContext) -> None:
        """Evaluate with ``context``'s precision and prefix sharing on every replica (and on any
        replica started later), with fresh tallies."""
        self.context = context
        self._worker_kwargs.update(precision=context.precision, share_prefix=context.share_prefix)
        self._run([(i, i, "set_precision", (context.precision, context.share_prefix)) for i in range(self.workers)])

    def local_model(self) -> None:
        """``None``: the replicas hold their own model copies, none of this process."""
        return None

    def precision_record(self, answer_type: Optional[str]) -> dict[str, Any]:
        """The precision the replicas compute a split of ``answer_type`` in and their summed tally (per
        split: decisions made in bf16, recomputed in float32, share). A replica Ray restarted
        counts only what it did since its restart."""
        records = self._run([(i, i, "precision_record", (answer_type,)) for i in range(self.workers)])
        computes = sorted({r["compute"] for r in records.values()})
        counts: dict[str, list[int]] = {}
        checks: dict[str, list[dict[str, Any]]] = {}
        for r in records.values():
            for split, t in r["recomputed"].items():
                acc = counts.setdefault(split, [0, 0])
                acc[0] += int(t["recomputed"])
                acc[1] += int(t["decisions"])
                if "pair_check" in t:  # one-token choices: the replicas' checks, merged below
                    checks.setdefault(split, []).append(t["pair_check"])
        summary = tally_summary(counts)
        for split, c in checks.items():
            summary[split]["pair_check"] = merge_pair_checks(c)
        return {"compute": computes[0] if len(computes) == 1 else computes, "recomputed": summary,
                "replicas": len(records)}

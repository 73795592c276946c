"""Pre-screened exact stage 1: a cheap first pass ranks every head, exact scoring runs on the top.

Exact stage 1 evaluates all ``L * H`` heads on all of D_dist; only the ``pool_size`` best matter to
the rest of the search. The pre-screen spends a small part of that on a first pass that ranks every
head, keeps the top ``prescreen_keep`` fraction (never fewer than ``pool_size`` heads), and runs the
exact scan (the paper's scorer, bit for bit: the same single-head evaluations of the whole D_dist)
on those alone. Two first passes:

* ``"attribution"`` (default): attribution patching
  (:func:`~cel_lens.scoring.attribution.attribution_scores`), one forward and backward pass over
  D_dist, about 3 head-set evaluations; needs a model in this process (the local backend's oracle).
* ``"subsample"``: the exact scan of every head on ``prescreen_sample`` D_dist examples (a seeded
  :func:`~cel_lens.splits.subsplit`, so it runs through any oracle and a run directory records it).

**What it keeps and what it cannot know.** The kept heads' scores are exact stage 1's; a screened
out head gets ``NaN`` (not scanned: :func:`~cel_lens.selection.pool.candidate_pool` ranks NaN last,
figures leave it blank). The pool is exact's pool whenever every head of exact's pool was kept;
whether that happened cannot be known without the exact scan the pre-screen avoids, so its *recall*
(the share of exact's pool it keeps) is measured by ``python -m benchmarks.smollm2_speed`` on
SmolLM2-135M-Instruct and the planted models, and stated in ``benchmarks/RESULTS.md``. It is an
option, not the default: that recall was below 0.95 in at least one measured case. A run directory
records a ``prescreen`` event with the first pass's scores and the heads screened out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet
from cel_lens.oracle import ATTRIBUTION, DIST_SPLIT, JOURNAL, Oracle, Stage1Scores, call_oracle, capabilities, evaluate_chunked
from cel_lens.scoring.attribution import ATTRIBUTION_UNITS, attribution_scores
from cel_lens.scoring.base import Cost, Scorer
from cel_lens.splits import subsplit, subsplit_indices
from cel_lens.tasks.base import Split

__all__ = ["PRESCREEN_PASSES", "PrescreenOptions", "PrescreenOutcome", "PrescreenScorer", "prescreen_scores", "kept_count"]

PRESCREEN_PASSES: tuple[str, ...] = ("attribution", "subsample")
"""The first passes a pre-screen can rank heads by (module docstring)."""


@dataclass(frozen=True)
class PrescreenOptions:
    """What a search's :class:`~cel_lens.config.SearchConfig` gives the pre-screen: the first pass,
    the fraction of heads kept for the exact scan, the subsample's size and seed, and the pool it
    must cover (never fewer heads kept than ``pool_size``)."""

    prescreen_pass: str = "attribution"
    prescreen_keep: float = 0.25
    prescreen_sample: int = 32
    seed: int = 0
    pool_size: Optional[int] = None


@dataclass(frozen=True)
class PrescreenOutcome:
    """A pre-screen's scores (exact for ``kept``, NaN for the heads screened out), the first pass's
    own ranking scores ``first`` and the evaluations it cost (head set x example)."""

    scores: Float[Tensor, "layer head"]
    first: Float[Tensor, "layer head"]
    kept: list[Head]
    screened_out: list[Head]
    first_units: float
    exact_units: int

    def record(self, options: PrescreenOptions) -> dict[str, Any]:
        """The run directory's ``prescreen`` event."""
        return {
            "pass": options.prescreen_pass, "keep": options.prescreen_keep, "first_scores": self.first.tolist(),
            "kept": [str(h) for h in self.kept], "screened_out": [str(h) for h in self.screened_out],
            "recall": "unknown in this run (it needs the exact scan the pre-screen avoids); "
                      "benchmarks/RESULTS.md states the recall measured on SmolLM2 and the planted models",
        }


def kept_count(n_heads_total: int, keep: float, pool_size: Optional[int]) -> int:
    """Heads the exact scan keeps: ``ceil(keep * heads)``, at least ``pool_size``, at most all."""
    return min(n_heads_total, max(math.ceil(keep * n_heads_total), int(pool_size or 1)))


def _first_pass(
    oracle: Oracle, options: PrescreenOptions, intact: Tensor, *, model: Any, split: Optional[Split],
    batch_size: int, progress: bool,
) -> tuple[Tensor, float]:
    """The first pass's ``[layer, head]`` ranking scores (higher: ablating helps more) and its cost
    in head-set x example evaluations."""
    L, H, n = oracle.n_layers, oracle.n_heads, int(intact.shape[0])
    if options.prescreen_pass == "attribution":
        if model is None and ATTRIBUTION in capabilities(oracle):
            values = oracle.attribution_scores(batch_size)  # type: ignore[attr-defined]
        elif model is not None and split is not None:
            values = attribution_scores(model, split, batch_size=batch_size, progress=progress)
        else:
            raise ValueError("the attribution pre-screen needs a model in this process (or model= and split=); "
                             "use prescreen_pass='subsample' with a model-free oracle")
        return torch.as_tensor(values, dtype=torch.float64).reshape(L, H), float(ATTRIBUTION_UNITS * n)
    m = min(int(options.prescreen_sample), n)
    name = subsplit(options.seed, 0, m)
    singles = [HeadSet([Head(i // H, i % H)]) for i in range(L * H)]
    correct = evaluate_chunked(oracle, name, singles, "prescreen", 64, progress).to(torch.float64)
    base = intact[subsplit_indices(name, n)].to(torch.float64)
    return (correct.mean(1) - base.mean()).reshape(L, H), float(L * H * m)


def prescreen_scores(
    oracle: Oracle, options: PrescreenOptions = PrescreenOptions(), *, model: Any = None,
    split: Optional[Split] = None, batch_size: int = 8, progress: bool = False,
) -> PrescreenOutcome:
    """The first pass over every head, then exact stage 1 (``acc_dist(ablate h) - acc_dist(intact)``,
    as :func:`~cel_lens.scoring.exact.exact_scores`) on the kept heads (module docstring)."""
    if options.prescreen_pass not in PRESCREEN_PASSES:
        raise ValueError(f"unknown prescreen_pass {options.prescreen_pass!r}; choose one of {', '.join(PRESCREEN_PASSES)}")
    L, H = oracle.n_layers, oracle.n_heads
    intact = call_oracle(oracle, DIST_SPLIT, [HeadSet()], "intact")[0]
    first, first_units = _first_pass(oracle, options, intact, model=model, split=split, batch_size=batch_size,
                                     progress=progress)
    flat = first.reshape(-1).tolist()
    order = sorted(range(L * H), key=lambda i: (-(flat[i] if not math.isnan(flat[i]) else -math.inf), i))
    n_keep = kept_count(L * H, options.prescreen_keep, options.pool_size)
    kept_idx = sorted(order[:n_keep])  # layer order: a scan shares each layer's resumed passes
    kept = [Head(i // H, i % H) for i in kept_idx]
    correct = evaluate_chunked(oracle, DIST_SPLIT, [HeadSet([h]) for h in kept], "stage1", 64, progress)
    scores = torch.full((L * H,), math.nan, dtype=torch.float64)
    scores[torch.tensor(kept_idx, dtype=torch.long)] = correct.to(torch.float64).mean(1) - intact.to(torch.float64).mean()
    out = [Head(i // H, i % H) for i in sorted(order[n_keep:])]
    return PrescreenOutcome(scores.reshape(L, H), first, kept, out, first_units, len(kept) * int(intact.shape[0]))


class PrescreenScorer(Scorer):
    """A first pass ranks every head; exact stage 1 runs on the top ``prescreen_keep`` fraction
    (:func:`prescreen_scores`). The pool is exact's whenever exact's pool was kept: the recall
    measured in ``benchmarks/RESULTS.md``, not a guarantee."""

    name = "prescreen"
    Options = PrescreenOptions

    @classmethod
    def manifest_options(cls, config: Any) -> dict[str, Any]:
        sample = {"sample": config.prescreen_sample} if config.prescreen_pass == "subsample" else {}
        return {"prescreen": {"pass": config.prescreen_pass, "keep": config.prescreen_keep, **sample}}

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        total = n_layers * n_heads
        kept = kept_count(total, self.options.prescreen_keep, self.options.pool_size)
        whole = kept  # the kept heads' layers are known after the first pass only: priced at layer 0
        if self.options.prescreen_pass == "attribution":
            first, what = float(ATTRIBUTION_UNITS), f"attribution ({ATTRIBUTION_UNITS} head sets)"
            whole += ATTRIBUTION_UNITS
        else:
            m = min(int(self.options.prescreen_sample), max(n_dist, 1))
            first, what = total * m / max(n_dist, 1), f"every head on {m} examples"
        return Cost(math.ceil(first) + kept, f"{what}, then {kept} of {total} heads alone, priced as whole passes",
                    bound=True, singles=True, full=whole)

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        if oracle is None:
            raise ValueError("the 'prescreen' scorer needs oracle=...")
        outcome = prescreen_scores(oracle, self.options, model=model, split=split, batch_size=batch_size, progress=progress)
        journal = oracle.journal if JOURNAL in capabilities(oracle) else None
        if journal is not None and not journal.events("prescreen"):
            journal.record_event("prescreen", **outcome.record(self.options))
        return Stage1Scores(outcome.scores, DIST_SPLIT, self.name)

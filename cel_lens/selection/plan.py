"""What a search will cost, before it spends it: evaluations per stage, and a time estimate.

:func:`plan_search` counts, from the options and the model's head layout alone, how many head sets
each step of Algorithm 1 evaluates on how many examples (a *unit* is one head set on one example:
what a forward pass costs per row). :class:`BatchTimer` times the first batch of ablations that is
actually computed (not answered from a run directory) and turns the plan into a time estimate.
Counts marked "at most" are bounds: the null and the post-hoc gains depend on S-hat's size, a beam
on what it keeps, and the selection stability costs no forward pass at all.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, Union

from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.scoring.attribution import ATTRIBUTION_UNITS
from cel_lens.config import ABLATION_KINDS, DEFAULT_K, DEFAULT_POOL_SIZE, SearchConfig
from cel_lens.scoring.registry import Scorer, get_scorer, scorer_from_config

__all__ = ["StagePlan", "SearchPlan", "plan_search", "stage2_sets", "BatchTimer", "ATTRIBUTION_UNITS"]



@dataclass(frozen=True)
class StagePlan:
    """One step: ``head_sets`` evaluated on ``examples`` examples of ``split`` (``bound``: at most)."""

    name: str
    split: str
    head_sets: int
    examples: int
    bound: bool = False
    note: str = ""

    @property
    def units(self) -> int:
        """Head-set x example evaluations: what the step costs."""
        return self.head_sets * self.examples


@dataclass(frozen=True)
class SearchPlan:
    """The evaluations a search will run, stage by stage, and (once a batch was timed)
    ``seconds_per_unit``, from which :meth:`seconds` estimates each stage. ``recorded`` counts
    units a run directory already holds (a resumed search does not compute them again)."""

    stages: tuple[StagePlan, ...]
    n_layers: int
    n_heads: int
    notes: tuple[str, ...] = ()
    recorded: int = 0
    seconds_per_unit: Optional[float] = None

    @property
    def units(self) -> int:
        """Every step's units together (an upper bound where a step's count is)."""
        return sum(s.units for s in self.stages)

    def timed(self, seconds_per_unit: float) -> "SearchPlan":
        """This plan with a measured cost per unit."""
        return replace(self, seconds_per_unit=float(seconds_per_unit))

    def seconds(self, stage: Optional[StagePlan] = None) -> Optional[float]:
        """Estimated seconds of ``stage`` (all of what is left to compute when ``None``)."""
        if self.seconds_per_unit is None:
            return None
        units = stage.units if stage is not None else max(self.units - self.recorded, 0)
        return units * self.seconds_per_unit

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: every step with its units and estimated seconds, and the totals."""
        return {
            "n_layers": self.n_layers, "n_heads": self.n_heads, "units": self.units, "recorded": self.recorded,
            "seconds_per_unit": self.seconds_per_unit, "seconds": self.seconds(), "notes": list(self.notes),
            "stages": [dict(name=s.name, split=s.split, head_sets=s.head_sets, examples=s.examples, bound=s.bound,
                            units=s.units, seconds=self.seconds(s), note=s.note) for s in self.stages],
        }

    def estimate_line(self) -> str:
        """One line: the estimate of each step and of what is left, from the timed batch."""
        if self.seconds_per_unit is None:
            return "no batch timed yet: no estimate"
        parts = ", ".join(f"{s.name} {_duration(self.seconds(s))}" for s in self.stages if s.units)
        rate = f"{1e6 * self.seconds_per_unit:.3g} µs per head set per example"
        return f"estimate from the first timed batch ({rate}): {parts}; {_duration(self.seconds())} left in all"

    def rows(self) -> list[tuple[str, str, str]]:
        """``(step, evaluations, estimate)`` rows: what :meth:`__str__` and the HTML table show."""
        out = []
        for s in self.stages:
            sets = f"{s.head_sets:,} head set{'s' * (s.head_sets != 1)}"
            what = f"{'at most ' if s.bound else ''}{sets} x {s.examples:,} {s.split}"
            what += f" ({s.note})" if s.note else ""
            out.append((s.name, what, _duration(self.seconds(s))))
        left = f"; {self.recorded:,} already recorded" if self.recorded else ""
        out.append(("total", f"{self.units:,} head-set x example evaluations{left}", _duration(self.seconds())))
        return out

    def __repr__(self) -> str:
        estimate = f", about {_duration(self.seconds())[1:]}" if self.seconds_per_unit is not None else ""
        return f"<SearchPlan {_layout(self.n_layers, self.n_heads)}: {len(self.stages)} steps, {self.units:,} units{estimate}>"

    def __str__(self) -> str:
        rows = self.rows()
        w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        head = f"search plan: {_layout(self.n_layers, self.n_heads)}"
        lines = [head] + [f"  {a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td style='text-align:left'>{html.escape(a)}</td><td style='text-align:left'>{html.escape(b)}</td>"
            f"<td>{html.escape(c)}</td></tr>" for a, b, c in self.rows()
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (
            f"<table><caption>search plan: {_layout(self.n_layers, self.n_heads)}</caption>"
            f"<tr><th>step</th><th>evaluations</th><th>estimate</th></tr>{body}</table>"
            + (f"<ul>{notes}</ul>" if notes else "")
        )


def _layout(n_layers: int, n_heads: int) -> str:
    return f"{n_layers} layer{'s' * (n_layers != 1)} x {n_heads} head{'s' * (n_heads != 1)}"


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    return f"~{seconds / 60:.0f} min" if seconds < 5400 else f"~{seconds / 3600:.1f} h"


def stage2_sets(m: int, k: int, strategy: str = "exhaustive", beam_width: int = 8) -> tuple[int, bool]:
    """Subsets stage 2 evaluates for a pool of ``m`` heads: ``(count, is_bound)``. Exhaustive:
    every subset of 1..k heads; beam: all singles, then at most ``beam_width`` sets grown by one head
    per size."""
    sizes = range(1, min(k, m) + 1)
    if strategy != "beam":
        return sum(math.comb(m, j) for j in sizes), False
    return sum(m if j == 1 else min(math.comb(m, j), beam_width * (m - j + 1)) for j in sizes), True




def plan_search(
    n_layers: int, n_heads: int, n_dist: int, n_test: int, *, k: int = DEFAULT_K, pool_size: int = DEFAULT_POOL_SIZE,
    scorer: Union[str, Scorer] = "exact",
    strategy: str = "exhaustive", beam_width: int = 8, n_null: int = 100, posthoc: bool = False,
    n_specificity: int = 0, n_masks: Optional[int] = None, sparsity: float = 0.05,
    config: Optional[SearchConfig] = None, controls: bool = True,
) -> SearchPlan:
    """The evaluations a search with these options runs on a model of ``n_layers`` x ``n_heads``
    heads (see the module docstring). ``scorer`` is a name (with ``n_masks``/``sparsity``, the
    options a scorer may read) or a :class:`~cel_lens.scoring.registry.Scorer`, whose ``cost`` is
    stage 1's; ``config`` (a :class:`~cel_lens.config.SearchConfig`, passed whole) supplies every
    option at once. ``controls``: S-hat is also evaluated on D_test under the other ablation kinds
    (each learnt kind first fitted with one intact pass over D_dist), as a search on the local
    backend does. ``ValueError`` when ``k`` cannot be searched: more than the pool or the model holds."""
    if config is not None:  # the config whole: its options, its scorer with the options it reads
        k, pool_size, strategy, beam_width = config.k, config.pool_size, config.strategy, config.beam_width
        n_null, posthoc, n_specificity, scorer = config.n_null, config.posthoc, config.n_specificity, scorer_from_config(config)
    if isinstance(scorer, str):
        scorer = get_scorer(scorer, n_masks=n_masks, sparsity=sparsity)
    cost = scorer.cost(n_layers, n_heads, n_dist)
    n_total = n_layers * n_heads
    if k > pool_size:
        raise ValueError(f"k={k} is larger than the pool ({pool_size} heads): every subset is drawn from the pool")
    if k > n_total:
        raise ValueError(f"k={k} is larger than the model's {n_total} heads")
    m = min(pool_size, n_total)
    notes = [f"the pool of {pool_size} is every one of the model's {n_total} heads"] if pool_size > n_total else []
    sets, bound = stage2_sets(m, k, strategy, beam_width)
    new = sets - (m if cost.singles else 0)  # the pool's singles are stage 1's (exact), answered from memory
    null = min(n_null, max(math.comb(n_total, j) - 1 for j in range(1, k + 1)))
    most = min(k, m)
    stages = [
        StagePlan("intact", "dist", 1, n_dist),
        StagePlan(f"stage 1 ({scorer.name})", "dist", cost.head_sets, n_dist, cost.bound, cost.note),
        StagePlan("stage 2", "dist", new, n_dist, bound, f"{sets:,} subsets of a pool of {m}, up to {most} head{'s' * (most != 1)}"),
    ]
    if n_specificity:
        stages.append(StagePlan("specificity", "dist", n_specificity * sets, n_dist, True, f"{n_specificity} random pools"))
    loo = k if k > 1 else 0  # S-hat without each of its heads (a one-head S-hat's is the intact model)
    stages.append(StagePlan("test", "test", 2 + null + loo, n_test, True,
                            f"intact, S-hat, S-hat without each head and a null of up to {null} sets"))
    if posthoc:
        stages.append(StagePlan("post-hoc", "test", max(sets - 1, 0), n_test, False, "every subset (exploratory)"))
    if n_specificity:
        stages.append(StagePlan("specificity (test)", "test", n_specificity, n_test, True))
    if controls:
        others = len(ABLATION_KINDS) - 1
        stages.append(StagePlan("controls (fit)", "dist", others, n_dist, True, "one intact pass per learnt kind"))
        stages.append(StagePlan("controls", "test", 2 * others, n_test, True,
                                "intact and S-hat under each other ablation kind"))
    notes.append("selection stability resamples recorded D_dist answers: no forward pass")
    return SearchPlan(tuple(stages), n_layers, n_heads, tuple(notes))


class BatchTimer:
    """Times a search's evaluations (a :class:`~cel_lens.oracle.MemoOracle`'s ``timer``): the first
    batch that holds an ablated head set sets :attr:`seconds_per_unit` (seconds per head set per
    example) and calls ``on_first(rate)`` once. Batches of the intact model alone are skipped: a
    full forward pass, where ablated passes may resume from a stored residual stream.

    With ``n_layers``, the batch's time is taken per layer a pass runs (a head set resumes at its
    first ablated layer: ``n_layers - layer`` layers; the intact model all of them) and scaled to a
    single head at an average layer (``(n_layers + 1) / 2`` layers). Exact stage 1 evaluates heads
    layer by layer, so its first batch holds the deepest, dearest passes: timed plainly, it
    overestimated a 30-layer scan about 1.6x."""

    def __init__(self, on_first: Optional[Callable[[float], Any]] = None, n_layers: Optional[int] = None) -> None:
        self.on_first = on_first
        self.n_layers = n_layers
        self.seconds_per_unit: Optional[float] = None

    def __call__(self, head_sets: Sequence[HeadSet], correct: Tensor, seconds: float) -> None:
        if self.seconds_per_unit is not None or not any(head_sets) or not correct.numel():
            return
        if self.n_layers is None:
            self.seconds_per_unit = seconds / correct.numel()
        else:
            L = int(self.n_layers)
            layers = sum(L - (hs.first_layer or 0) for hs in head_sets)  # the intact model (None) runs them all
            self.seconds_per_unit = seconds / (layers * (correct.numel() // len(head_sets))) * (L + 1) / 2
        if self.on_first is not None:
            self.on_first(self.seconds_per_unit)

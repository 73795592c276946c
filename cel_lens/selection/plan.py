"""What a search will cost, before it spends it: evaluations per stage, and a time estimate.

:func:`plan_search` counts, from the options and the model's head layout alone, how many head sets
each step of Algorithm 1 evaluates on how many examples (a *unit* is one head set on one example:
what a forward pass costs per row). :class:`BatchTimer` times the first batch of ablations that is
actually computed (not answered from a run directory) and turns the plan into a time estimate.

**CPU time, and wall time at the measured CPU share.** The rate is CPU seconds per unit (this
process's CPU time, every thread: what the work costs, whatever else the machine runs), and the
share is the CPU seconds the process got per wall second while it was measured (below 1 on a loaded
machine, up to the thread count on an idle one). The plan predicts both: CPU seconds, and wall
seconds at that share. Timed by the wall clock alone, a plan made under load predicted 2.9x the
CPU time a search needed, and a search's own estimate after a batch taken while the machine was
idle was 2.7x below the time it then took under load.
Counts marked "at most" are bounds: the null and the post-hoc gains depend on S-hat's size, a beam
on what it keeps, and the selection stability costs no forward pass at all.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, Union

from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.scoring.attribution import ATTRIBUTION_UNITS
from cel_lens.config import ABLATION_KINDS, STRATEGIES, SearchConfig
from cel_lens.scoring.base import Scorer, get_scorer, scorer_from_config

__all__ = ["StagePlan", "SearchPlan", "plan_search", "stage2_sets", "BatchTimer", "cpu_and_wall", "ATTRIBUTION_UNITS"]



@dataclass(frozen=True)
class StagePlan:
    """One step: ``head_sets`` evaluated on ``examples`` examples of ``split`` (``bound``: at most);
    ``full`` of them run the whole model (the intact model, which also stores the split's residual
    stream, or a pass that fits an ablation kind) where an ablated pass resumes at its first layer;
    ``layered``: its head sets are single heads evaluated a layer at a time (exact stage 1's scan),
    where other steps evaluate sets at scattered layers apart."""

    name: str
    split: str
    head_sets: int
    examples: int
    bound: bool = False
    note: str = ""
    full: int = 0
    layered: bool = False

    @property
    def units(self) -> int:
        """Head-set x example evaluations: what the step costs."""
        return self.head_sets * self.examples

    @property
    def full_units(self) -> int:
        """The units that run the whole model (``full`` head sets x the examples)."""
        return self.full * self.examples

    @property
    def ablated_units(self) -> int:
        """The units whose ablated passes resume at their first ablated layer."""
        return self.units - self.full_units


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
    cpu_share: Optional[float] = None
    calibration_cpu_s: Optional[float] = None
    full_seconds_per_example: Optional[float] = None
    apart_seconds_per_unit: Optional[float] = None
    memory: Optional[Any] = None  # a MemoryPlan (cel_lens.selection.plan_memory), where the model was at hand

    @property
    def units(self) -> int:
        """Every step's units together (an upper bound where a step's count is)."""
        return sum(s.units for s in self.stages)

    def timed(self, seconds_per_unit: float, cpu_share: Optional[float] = None,
              full_seconds_per_example: Optional[float] = None, apart_seconds_per_unit: Optional[float] = None,
              ) -> "SearchPlan":
        """This plan with a measured cost per unit (CPU seconds) and the CPU share it was measured
        at (CPU seconds per wall second; ``None``: unknown, wall time taken equal to CPU time), and
        where they were timed (``None``: a unit's cost): what a whole-model pass costs per example,
        and a unit of head sets evaluated apart (:mod:`~cel_lens.selection.plan_calibration`)."""
        share = None if cpu_share is None or not cpu_share > 0 else float(cpu_share)
        full = None if full_seconds_per_example is None else float(full_seconds_per_example)
        apart = None if apart_seconds_per_unit is None else float(apart_seconds_per_unit)
        return replace(self, seconds_per_unit=float(seconds_per_unit), cpu_share=share, full_seconds_per_example=full,
                       apart_seconds_per_unit=apart)

    def seconds(self, stage: Optional[StagePlan] = None) -> Optional[float]:
        """Estimated CPU seconds of ``stage`` (all of what is left to compute when ``None``): its
        ablated passes at the unit's rate, its whole-model passes at theirs."""
        if self.seconds_per_unit is None:
            return None
        if stage is None:
            return max(sum(self.seconds(s) for s in self.stages) - self.recorded * self.seconds_per_unit, 0.0)
        rate = self.seconds_per_unit
        full = self.full_seconds_per_example if self.full_seconds_per_example is not None else rate
        ablated = rate if stage.layered or self.apart_seconds_per_unit is None else self.apart_seconds_per_unit
        return stage.ablated_units * ablated + stage.full_units * full

    def wall_seconds(self, stage: Optional[StagePlan] = None) -> Optional[float]:
        """Estimated wall seconds of ``stage`` (or of all that is left): the CPU estimate at the
        CPU share measured with the rate."""
        cpu = self.seconds(stage)
        return None if cpu is None else cpu / (self.cpu_share or 1.0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: every step with its units and estimated seconds, and the totals."""
        return {
            "n_layers": self.n_layers, "n_heads": self.n_heads, "units": self.units, "recorded": self.recorded,
            "seconds_per_unit": self.seconds_per_unit, "apart_seconds_per_unit": self.apart_seconds_per_unit,
            "full_seconds_per_example": self.full_seconds_per_example, "seconds": self.seconds(), "cpu_share": self.cpu_share,
            "wall_seconds": self.wall_seconds(), "calibration_cpu_s": self.calibration_cpu_s, "notes": list(self.notes),
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "stages": [dict(name=s.name, split=s.split, head_sets=s.head_sets, examples=s.examples, bound=s.bound,
                            units=s.units, seconds=self.seconds(s), wall_seconds=self.wall_seconds(s), note=s.note)
                       for s in self.stages],
        }

    def estimate_line(self) -> str:
        """One line: the estimate of each step and of what is left, from the timed batch."""
        if self.seconds_per_unit is None:
            return "no batch timed yet: no estimate"
        parts = ", ".join(f"{s.name} {_duration(self.seconds(s))}" for s in self.stages if s.units)
        rate = f"{1e6 * self.seconds_per_unit:.3g} CPU µs per head set per example"
        share = f"{self.cpu_share:.2f}" if self.cpu_share is not None else "unmeasured (taken as 1)"
        return (f"estimate from the first timed batch ({rate}), CPU time: {parts}; {_duration(self.seconds())} CPU left in all, "
                f"{_duration(self.wall_seconds())} wall at the CPU share measured with it ({share} CPU s per wall s)"
                f"{self._untimed_caveat()}")

    def _untimed_caveat(self) -> str:
        """What the estimate counts at the batch's rate without having timed it: head sets evaluated
        apart and whole-model passes, which cost more per unit than a layered scan's heads (on
        SmolLM2, :mod:`~cel_lens.selection.plan_calibration`); empty when every rate was measured."""
        apart = sum(s.ablated_units for s in self.stages if not s.layered)
        full = sum(s.full_units for s in self.stages)
        untimed = [f"{apart:,} units of head sets evaluated apart" if apart and self.apart_seconds_per_unit is None else "",
                   f"{full:,} whole-model passes" if full and self.full_seconds_per_example is None else ""]
        untimed = [u for u in untimed if u]
        if not untimed:
            return ""
        return (f"; {' and '.join(untimed)} are counted at this rate, untimed: the estimate is low where they "
                "cost more (cel-lens search --plan / cl.plan time them)")

    def rows(self) -> list[tuple[str, str, str]]:
        """``(step, evaluations, estimate)`` rows: what :meth:`__str__` and the HTML table show."""
        out = []
        for s in self.stages:
            sets = f"{s.head_sets:,} head set{'s' * (s.head_sets != 1)}"
            what = f"{'at most ' if s.bound else ''}{sets} x {s.examples:,} {s.split}"
            what += f" ({s.note})" if s.note else ""
            out.append((s.name, what, _duration(self.seconds(s))))
        left = f"; {self.recorded:,} already recorded" if self.recorded else ""
        out.append(("total, CPU", f"{self.units:,} head-set x example evaluations{left}", _duration(self.seconds())))
        if self.seconds_per_unit is not None:
            share = f"{self.cpu_share:.2f}" if self.cpu_share is not None else "1 (unmeasured)"
            out.append(("wall", f"at the measured CPU share ({share} CPU s per wall s)", _duration(self.wall_seconds())))
        if self.calibration_cpu_s is not None:
            out.append(("(plan)", "its own calibration took", f"{self.calibration_cpu_s:.1f} CPU s"))
        return out

    def __repr__(self) -> str:
        estimate = f", about {_duration(self.seconds())[1:]} CPU" if self.seconds_per_unit is not None else ""
        return f"<SearchPlan {_layout(self.n_layers, self.n_heads)}: {len(self.stages)} steps, {self.units:,} units{estimate}>"

    def __str__(self) -> str:
        rows = self.rows()
        w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        head = f"search plan: {_layout(self.n_layers, self.n_heads)}"
        lines = [head] + [f"  {a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
        memory = self.memory.lines() if self.memory is not None else []
        return "\n".join(lines + [f"  note: {n}" for n in self.notes] + memory)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td style='text-align:left'>{html.escape(a)}</td><td style='text-align:left'>{html.escape(b)}</td>"
            f"<td>{html.escape(c)}</td></tr>" for a, b, c in self.rows()
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (
            f"<table><caption>search plan: {_layout(self.n_layers, self.n_heads)}</caption>"
            f"<tr><th>step</th><th>evaluations</th><th>estimate (CPU)</th></tr>{body}</table>"
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


def stage2_sets(
    m: int, k: int, strategy: str = SearchConfig.strategy, beam_width: int = SearchConfig.beam_width
) -> tuple[int, bool]:
    """Subsets stage 2 evaluates for a pool of ``m`` heads: ``(count, is_bound)``. Exhaustive:
    every subset of 1..k heads; beam: all singles, then at most ``beam_width`` sets grown by one head
    per size."""
    return STRATEGIES.resolve(strategy).count(m, k, beam_width)




def plan_search(
    n_layers: int, n_heads: int, n_dist: int, n_test: int, *, k: int = SearchConfig.k,
    pool_size: int = SearchConfig.pool_size, scorer: Union[str, Scorer] = SearchConfig.scorer,
    strategy: str = SearchConfig.strategy, beam_width: int = SearchConfig.beam_width, n_null: int = SearchConfig.n_null,
    posthoc: bool = SearchConfig.posthoc, n_specificity: int = SearchConfig.n_specificity,
    n_masks: Optional[int] = SearchConfig.n_masks, sparsity: float = SearchConfig.sparsity,
    config: Optional[SearchConfig] = None, controls: bool = True,
) -> SearchPlan:
    """The evaluations a search with these options runs on a model of ``n_layers`` x ``n_heads``
    heads (see the module docstring). ``scorer`` is a name (with ``n_masks``/``sparsity``, the
    options a scorer may read) or a :class:`~cel_lens.scoring.base.Scorer`, whose ``cost`` is
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
        StagePlan("intact", "dist", 1, n_dist, full=1),
        StagePlan(f"stage 1 ({scorer.name})", "dist", cost.head_sets, n_dist, cost.bound, cost.note, cost.full, layered=True),
        StagePlan("stage 2", "dist", new, n_dist, bound, f"{sets:,} subsets of a pool of {m}, up to {most} head{'s' * (most != 1)}"),
    ]
    if n_specificity:
        stages.append(StagePlan("specificity", "dist", n_specificity * sets, n_dist, True, f"{n_specificity} random pools"))
    loo = k if k > 1 else 0  # S-hat without each of its heads (a one-head S-hat's is the intact model)
    stages.append(StagePlan("test", "test", 2 + null + loo, n_test, True,
                            f"intact, S-hat, S-hat without each head and a null of up to {null} sets", full=1))
    if posthoc:
        stages.append(StagePlan("post-hoc", "test", max(sets - 1, 0), n_test, False, "every subset (exploratory)"))
    if n_specificity:
        stages.append(StagePlan("specificity (test)", "test", n_specificity, n_test, True))
    if controls:
        others = len(ABLATION_KINDS) - 1
        stages.append(StagePlan("controls (fit)", "dist", others, n_dist, True, "one intact pass per learnt kind",
                                full=others))
        stages.append(StagePlan("controls", "test", 2 * others, n_test, True,
                                "intact and S-hat under each other ablation kind", full=others))
    notes.append("selection stability resamples recorded D_dist answers: no forward pass")
    return SearchPlan(tuple(stages), n_layers, n_heads, tuple(notes))


def cpu_and_wall() -> tuple[float, float]:
    """This process's CPU seconds (every thread) and the wall clock, read together."""
    return time.process_time(), time.perf_counter()


class BatchTimer:
    """Times a search's evaluations (a :class:`~cel_lens.selection.memo.MemoOracle`'s ``timer``): the first
    batch that holds an ablated head set sets :attr:`seconds_per_unit` (CPU seconds per head set per
    example) and :attr:`cpu_share`, and calls ``on_first(rate)`` once. Batches of the intact model
    alone are skipped: a full forward pass, where ablated passes may resume from a stored residual
    stream.

    **CPU, not wall.** The oracle reports a batch's wall seconds; the timer reads this process's CPU
    clock (``time.process_time``, every thread) at each call, and takes the batch's CPU time as its
    wall time times the CPU share of the window since the previous call (the previous evaluation's
    end: in a scan, nothing but the batch runs in between). The rate is then what the work costs,
    not what a loaded machine let it have; :attr:`cpu_share` turns it into wall time.

    With ``n_layers``, the batch's time is taken per layer a pass runs (a head set resumes at its
    first ablated layer: ``n_layers - layer`` layers; the intact model all of them), plus
    ``fixed_layers`` layers' worth per pass that every pass pays whatever its layer (the final norm
    and the scored columns of the unembedding), and scaled to a single head at an average layer.
    Exact stage 1 evaluates heads layer by layer, so its first batch holds the deepest, dearest
    passes: timed plainly, it overestimated a 30-layer scan about 1.6x."""

    def __init__(
        self, on_first: Optional[Callable[[float], Any]] = None, n_layers: Optional[int] = None,
        fixed_layers: float = 0.0, clock: Optional[Callable[[], tuple[float, float]]] = None,
    ) -> None:
        self.on_first = on_first
        self.n_layers = n_layers
        self.fixed_layers = float(fixed_layers)
        self.seconds_per_unit: Optional[float] = None
        self.cpu_share: Optional[float] = None
        self.clock = clock if clock is not None else cpu_and_wall
        self._marks = self.clock()

    def _window_share(self) -> Optional[float]:
        """CPU seconds per wall second since the previous call (and restart the window)."""
        cpu, wall = self.clock()
        d_cpu, d_wall = cpu - self._marks[0], wall - self._marks[1]
        self._marks = (cpu, wall)
        return d_cpu / d_wall if d_wall > 0 else None

    def __call__(self, head_sets: Sequence[HeadSet], correct: Tensor, seconds: float) -> None:
        share = self._window_share()
        if self.seconds_per_unit is not None or not any(head_sets) or not correct.numel():
            return
        self.cpu_share = share
        cpu = seconds * (share if share is not None else 1.0)
        self.seconds_per_unit = self.rate(head_sets, int(correct.numel() // len(head_sets)), cpu)
        if self.on_first is not None:
            self.on_first(self.seconds_per_unit)

    def rate(self, head_sets: Sequence[HeadSet], n_examples: int, seconds: float) -> float:
        """Seconds per head set per example of an average single head, from ``seconds`` spent on
        ``head_sets`` over ``n_examples`` examples (the layer scaling of the class docstring)."""
        if self.n_layers is None:
            return seconds / (len(head_sets) * n_examples)
        L, c = int(self.n_layers), self.fixed_layers
        layers = sum(hs.layers_run(L) + c for hs in head_sets)
        return seconds / (layers * n_examples) * ((L + 1) / 2 + c)

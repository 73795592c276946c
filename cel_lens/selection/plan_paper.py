"""The paper's runs sized before any model is downloaded: memory and GPU time of a whole search.

:func:`paper_plan` puts together, for one of the paper's models (its published ``config.json``,
:func:`~cel_lens.model.registry.paper_config`) and task at the paper's split sizes, the evaluations
a search runs (:func:`~cel_lens.selection.plan.plan_search`), their FLOP count, the time that count
takes on a GPU at :data:`GPU_EFFICIENCY` of its dense bf16 peak, and the memory plan
(:func:`~cel_lens.selection.plan_memory.fit_memory`) with the store budget and batch size that fit.

**What is measured and what is assumed.** The token counts per example are measured (the padded
positions of SmolLM2-135M-Instruct's encoding of the real D_dist, :data:`PAPER_TASKS`; Llama-3's
and Qwen2.5's larger vocabularies give somewhat fewer tokens, so these err high). The efficiency is
an assumption: no GPU was lent to this project, and ``python -m benchmarks.gpu_scan`` measures it
where one is. The FLOP count takes an ablated pass to run ``(L + 1) / 2`` layers (a single head at
an average layer, resumed from the store; a set of several heads starts at its first layer, so
stage 2's and the null's passes run somewhat more; a store that keeps fewer layers adds half its
spacing, :func:`extra_layers`) and every pass to unembed its scored positions.
The longest sequence of a batch is taken as twice the mean (it sizes the attention scores only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from cel_lens.config import LOADERS, SearchConfig
from cel_lens.model.registry import PAPER_MODELS, paper_config
from cel_lens.selection.plan import SearchPlan, plan_search
from cel_lens.selection.plan_memory import DEVICES, DeviceSpec, MemoryPlan, MemoryShape, fit_memory

__all__ = ["PaperTask", "PAPER_TASKS", "GPU_EFFICIENCY", "extra_layers", "search_flops", "PaperPlan", "paper_plan", "paper_table"]

GPU_EFFICIENCY = 0.3
"""Share of a GPU's dense bf16 peak a search's passes are taken to reach: an assumption (short
sequences, a few thousand positions per pass, many small launches), to be replaced by the
efficiency ``benchmarks/gpu_scan.py`` measures."""


@dataclass(frozen=True)
class PaperTask:
    """A task at the paper's sizes: ``n_dist``/``n_test`` examples, ``tokens`` padded positions per
    example (measured), ``scored`` positions unembedded per example (the answer's tokens)."""

    n_dist: int
    n_test: int
    tokens: float
    scored: float


PAPER_TASKS: dict[str, PaperTask] = {
    "arithmetic": PaperTask(2000, 1000, 20.9, 3.0),
    "boolq": PaperTask(2000, 3270, 150.7, 1.0),
}
"""The paper's D_dist/D_test sizes (its Table 3) for the tasks whose prompts are here to count:
Arithmetic 20.9 and BoolQ 150.7 padded positions per example (SmolLM2-135M-Instruct's tokenizer,
``encode_split`` of the real 2,000-example D_dist at batch size 8); the scored positions are the
answer's tokens (Arithmetic: up to three; BoolQ: one position scores both choices)."""


def extra_layers(n_layers: int, kept: int) -> float:
    """Layers an ablated pass runs beyond its own, on average, when a store keeps ``kept`` of the
    ``n_layers - 1`` layers evenly spaced (it resumes at the nearest kept layer below): half the
    spacing less one; 0 when every layer is kept."""
    if kept >= n_layers - 1:
        return 0.0
    return max(0.0, (n_layers / (kept + 1) - 1) / 2)


def search_flops(plan: SearchPlan, shape: MemoryShape, task: PaperTask, extra: Optional[dict[str, float]] = None) -> float:
    """Floating-point operations of ``plan``'s forward passes (module docstring): a block costs
    ``2 x`` its matrix weights per position plus attention over half the sequence on average; a
    scored position ``2 d_model d_vocab``; whole-model passes run every layer. ``extra``: layers an
    ablated pass of each split runs below its first ablated one (a store that keeps fewer layers,
    :func:`extra_layers`)."""
    L, d = shape.n_layers, shape.d_model
    per_layer = 2 * shape.layer_matrix_params + 4 * (task.tokens / 2) * shape.n_heads * shape.d_head
    unembed = task.scored * 2 * d * shape.d_vocab
    full = L * task.tokens * per_layer + unembed
    total = 0.0
    for s in plan.stages:
        layers = min(L, (L + 1) / 2 + (extra or {}).get(s.split, 0.0))
        total += s.ablated_units * (layers * task.tokens * per_layer + unembed) + s.full_units * full
    return float(total)


@dataclass(frozen=True)
class PaperPlan:
    """One model, task and GPU: the search's evaluations, FLOPs, GPU seconds, memory."""

    model: str
    task: str
    gpus: int
    search: SearchPlan
    flops: float
    seconds: Optional[float]
    memory: MemoryPlan
    efficiency: float

    def row(self) -> dict[str, Any]:
        """A flat record (JSON, tables)."""
        m = self.memory
        return {"model": self.model, "task": self.task, "device": m.device.name, "gpus": self.gpus, "units": self.search.units,
                "tflop": round(self.flops / 1e12, 1), "hours": None if self.seconds is None else round(self.seconds / 3600, 2),
                "efficiency": self.efficiency, "peak_gib": round(m.peak / 2**30, 1), "usable_gib": round(m.usable / 2**30, 1),
                "fits": m.fits, "batch_size": m.batch_size, "store_budget_mib": None if m.store_budget is None else m.store_budget // 2**20,
                "store_layers": dict(m.store_layers), "notes": list(m.notes)}

    def __str__(self) -> str:
        hours = "" if self.seconds is None else f", ~{self.seconds / 3600:.1f} h at {self.efficiency:.0%} of peak"
        return (f"{self.model} on {self.task}, {self.gpus} GPU(s): {self.search.units:,} units, "
                f"{self.flops / 1e15:.1f} PFLOP{hours}\n"
                + str(self.memory))


def paper_plan(
    hub_id: str, task: str = "boolq", device: str = "h100", *, config: Optional[SearchConfig] = None,
    efficiency: float = GPU_EFFICIENCY, batch_size: int = 8, n_layers: Optional[int] = None, gpus: int = 1,
) -> PaperPlan:
    """The plan of a search of ``hub_id`` (one of :data:`~cel_lens.model.registry.PAPER_MODELS`) on
    ``task`` (:data:`PAPER_TASKS`) at the paper's sizes on ``device`` (:data:`DEVICES`, or a
    :class:`DeviceSpec`): bf16 weights and store, bf16 compute with float32 re-checks (a float32
    copy of the model), the default loader, ``config``'s options (default: the paper's). ``gpus``
    above 1: the Ray backend with one actor per GPU (each a replica and a share of the store; the
    memory plan is one GPU's, :attr:`PaperPlan.seconds` the wall time, the GPU time divided among them)."""
    spec = PAPER_MODELS[hub_id]
    sizes = PAPER_TASKS[task]
    target = DEVICES[device] if isinstance(device, str) else device
    shape = MemoryShape.from_config(paper_config(hub_id), spec.loader, n_layers=n_layers)
    search = plan_search(shape.n_layers, shape.n_heads, sizes.n_dist, sizes.n_test, config=config or SearchConfig())
    memory = fit_memory(shape, dist_tokens=round(sizes.tokens * sizes.n_dist), test_tokens=round(sizes.tokens * sizes.n_test),
                        device=target, batch_size=batch_size, weight_bytes=2, precision="bf16",
                        hooked=not LOADERS.resolve(spec.loader).bridge, width=round(2 * sizes.tokens), shards=gpus)
    extra = {split: extra_layers(shape.n_layers, n) for split, n in memory.store_layers.items()}
    flops = search_flops(search, shape, sizes, extra)
    seconds = flops / (target.bf16_flops * efficiency * gpus) if target.bf16_flops else None
    return PaperPlan(hub_id, task, gpus, search, flops, seconds, memory, efficiency)


def paper_table(devices: tuple[str, ...] = ("h100", "h200"), tasks: tuple[str, ...] = tuple(PAPER_TASKS),
                gpus: tuple[int, ...] = (1,)) -> list[PaperPlan]:
    """:func:`paper_plan` of every paper model, task, device and GPU count."""
    return [paper_plan(m, t, d, gpus=g) for m in PAPER_MODELS for t in tasks for d in devices for g in gpus]

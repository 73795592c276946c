"""What a search will hold in memory, stage by stage, and whether it fits a device.

:func:`memory_plan` adds up, for a model shape (:class:`MemoryShape`, from a loaded model or a
published ``config.json``) and a task's token counts, the bytes each phase of a search holds:

* ``runtime``: the interpreter and its libraries on a CPU (measured here: :data:`CPU_RUNTIME_BYTES`);
  the CUDA context and library workspaces on a GPU (:data:`GPU_RUNTIME_BYTES`, a nominal figure);
* ``weights``: the model as held (a ``HookedTransformer`` keeps a separate unembedding even where
  the checkpoint ties it; biases TransformerLens adds are counted);
* ``load copy``: while a ``HookedTransformer`` is built, the Hugging Face model it is converted from
  (on a GPU that copy stays in host memory);
* ``float32 copy``: a bf16 model's float32 twin, made for the precision re-checks
  (:func:`~cel_lens.evaluation.precision.float32_model`);
* ``store``: the activation stores, D_dist's from the intact pass on and D_test's from the test on
  (both stay until the search ends), at the layers the store budget keeps;
* ``logits``: one chunk of unembedded positions (at most 2^25 logits, in float32, with its masked
  copy and the log-sum-exp's temporary), plus the bf16 cast of the unembedding a float32 model's autocast makes;
* ``activations``: one forward pass of ``max_tokens`` positions (512 per example of the batch size):
  the residual-stream tensors, queries/keys/values, the MLP's three hidden tensors, the attention
  scores of one layer.

The estimate of each term is arithmetic on the shape; the runtime term and the activation
coefficients are the assumptions, stated where defined. :func:`fit_memory` shrinks the store budget,
then the batch size, until the peak fits, and says what it chose.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Optional

from cel_lens.config import LOADERS, PRECISIONS

__all__ = ["MemoryShape", "DeviceSpec", "DEVICES", "MemoryStage", "MemoryPlan", "memory_plan", "fit_memory", "cpu_device",
           "model_memory_shape", "search_memory",
           "CPU_RUNTIME_BYTES", "GPU_RUNTIME_BYTES", "HEADROOM", "LOGIT_CHUNK", "ACT_RESID", "ACT_MLP"]

GiB = 1 << 30
CPU_RUNTIME_BYTES = int(0.5 * GiB)
"""Resident memory of a Python process with torch, transformers, TransformerLens and cel_lens
imported and a task loaded, before any model: 0.49 GiB measured on this project's CPU machine
(torch 2.13, transformers 5.25)."""
GPU_RUNTIME_BYTES = int(1.5 * GiB)
"""Device memory outside tensors on a GPU (CUDA context, cuBLAS/cuDNN workspaces, allocator
slack): a nominal figure, not measured here (no GPU was lent to this project)."""
HEADROOM = 0.92
"""Share of a GPU's memory a plan lets itself fill (the caching allocator fragments the rest)."""
LOGIT_CHUNK = 1 << 25
"""Logits unembedded at once (``cel_lens.evaluation.teacher_forced``'s chunk)."""
ACT_RESID = 8
"""``d_model``-wide tensors one forward pass holds at its peak per position (residual streams in and
out, the norm's output, queries, keys and values repeated per query head, the head outputs, their
masked copy, the resumed pass's source): read off the forward, not fitted."""
ACT_MLP = 3
"""``d_mlp``-wide tensors at the MLP's peak per position (gate, up and their product)."""


@dataclass(frozen=True)
class MemoryShape:
    """What memory depends on in a model: its layout, the parameters as held (``params``) and, for
    a ``HookedTransformer``, those of the Hugging Face model it is built from (``load_params``)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    params: int
    load_params: int = 0

    @property
    def layer_matrix_params(self) -> int:
        """Weights of one block's matrices (what a token's pass through it multiplies by)."""
        q = self.d_model * self.n_heads * self.d_head
        kv = 2 * self.d_model * self.n_kv_heads * self.d_head
        return 2 * q + kv + 3 * self.d_model * self.d_mlp

    @classmethod
    def from_config(cls, config: Mapping[str, Any], loader: str = "hooked", n_layers: Optional[int] = None) -> "MemoryShape":
        """The shape of a Hugging Face ``config.json`` (Llama, Qwen2, SmolLM3 fields) loaded by
        ``loader`` (``"hooked"`` or ``"bridge"``), with ``n_layers`` layers (default: the config's)."""
        L = int(n_layers if n_layers is not None else config["num_hidden_layers"])
        d, H = int(config["hidden_size"]), int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or H)
        dh = int(config.get("head_dim") or d // H)
        d_mlp, V = int(config["intermediate_size"]), int(config["vocab_size"])
        tied = bool(config.get("tie_word_embeddings", False))
        qkv_bias = (config.get("model_type") == "qwen2") or bool(config.get("attention_bias", False))
        layer = 2 * d * H * dh + 2 * d * kv * dh + 3 * d * d_mlp + 2 * d + ((H + 2 * kv) * dh if qkv_bias else 0)
        hf = V * d * (1 if tied else 2) + L * layer + d
        if LOADERS.resolve(loader).bridge:  # the Hugging Face modules, and an output bias the bridge adds (zeros)
            return cls(L, d, H, kv, dh, d_mlp, V, hf + V)
        tl_bias = L * ((H + 2 * kv) * dh * (0 if qkv_bias else 1) + 2 * d + d_mlp)  # b_Q b_K b_V, b_O b_out, b_in
        held = hf + (V * d if tied else 0) + V + tl_bias  # W_U apart from W_E, b_U
        return cls(L, d, H, kv, dh, d_mlp, V, held, load_params=hf)

    @classmethod
    def from_model(cls, model: Any) -> "MemoryShape":
        """The shape of a loaded ``HookedTransformer``/``TransformerBridge``: its config for the
        layout, its own parameters counted (the Hugging Face form's, for the load, from its config
        when it has one)."""
        cfg = model.cfg
        params = sum(p.numel() for p in model.parameters())
        H = int(cfg.n_heads)
        kv = int(getattr(cfg, "n_key_value_heads", None) or H)
        shape = cls(int(cfg.n_layers), int(cfg.d_model), H, kv, int(cfg.d_head), int(cfg.d_mlp or 0),
                    int(cfg.d_vocab), params)
        hf_config = getattr(cfg, "hf_config", None) or getattr(getattr(model, "original_model", None), "config", None)
        if type(model).__name__ == "HookedTransformer" and hf_config is not None:
            hf = cls.from_config(hf_config.to_dict(), "bridge").params
            shape = replace(shape, load_params=hf)
        return shape


@dataclass(frozen=True)
class DeviceSpec:
    """A device a plan is sized for: ``memory`` bytes it has, ``runtime`` bytes outside tensors,
    and its dense bf16 matrix-multiply peak (FLOP/s; ``None`` for a CPU)."""

    name: str
    memory: int
    runtime: int
    bf16_flops: Optional[float] = None
    gpu: bool = True


DEVICES: dict[str, DeviceSpec] = {
    "h100": DeviceSpec("NVIDIA H100 80GB (SXM)", int(79.2 * GiB), GPU_RUNTIME_BYTES, 989e12),
    "h200": DeviceSpec("NVIDIA H200 141GB", int(139.7 * GiB), GPU_RUNTIME_BYTES, 989e12),
}
"""The paper-scale targets: memory as CUDA reports it for the 80 GB and 141 GB parts, dense bf16
peak from NVIDIA's data sheets (989 TFLOP/s for both: the H200 is an H100 with more memory)."""


def cpu_device(memory: Optional[int] = None) -> DeviceSpec:
    """This machine's CPU (``memory``: what the plan may use; default: the physical memory)."""
    if memory is None:
        import os

        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DeviceSpec("cpu", int(memory), CPU_RUNTIME_BYTES, None, gpu=False)


@dataclass(frozen=True)
class MemoryStage:
    """The bytes one phase of a search holds, by what holds them."""

    name: str
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Everything the phase holds at once."""
        return sum(self.parts.values())


@dataclass(frozen=True)
class MemoryPlan:
    """A search's memory, phase by phase, on ``device``; what it was sized with (``batch_size``,
    ``store_budget`` per store, the layers each store keeps of ``store_candidates``) and ``notes``."""

    stages: tuple[MemoryStage, ...]
    device: DeviceSpec
    batch_size: int
    store_budget: Optional[int]
    store_layers: dict[str, int]
    store_candidates: int
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> int:
        """The largest phase."""
        return max(s.total for s in self.stages)

    @property
    def usable(self) -> int:
        """What the plan may fill: all of a CPU's memory, :data:`HEADROOM` of a GPU's."""
        return int(self.device.memory * (HEADROOM if self.device.gpu else 1.0))

    @property
    def fits(self) -> bool:
        """Whether the peak fits :attr:`usable`."""
        return self.peak <= self.usable

    def stage(self, name: str) -> MemoryStage:
        """The phase called ``name``."""
        return next(s for s in self.stages if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: each phase's parts and total, the peak, the sizing, the notes."""
        return {"device": asdict(self.device), "batch_size": self.batch_size, "store_budget": self.store_budget,
                "store_layers": dict(self.store_layers), "store_candidates": self.store_candidates,
                "peak": self.peak, "usable": self.usable, "fits": self.fits, "notes": list(self.notes),
                "stages": [{"name": s.name, "total": s.total, **s.parts} for s in self.stages]}

    def lines(self) -> list[str]:
        """The phases, one line each, then the verdict and the notes."""
        out = [f"memory on {self.device.name} ({_gib(self.usable)} usable), batch size {self.batch_size}, store "
               + ", ".join(f"{k} {v} of {self.store_candidates} layers" for k, v in self.store_layers.items())]
        for s in self.stages:
            parts = ", ".join(f"{k} {_gib(v)}" for k, v in s.parts.items() if v)
            out.append(f"  {s.name}: {_gib(s.total)} ({parts})")
        out.append(f"  peak {_gib(self.peak)}: {'fits' if self.fits else 'does NOT fit'}")
        return out + [f"  note: {n}" for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def memory_plan(
    shape: MemoryShape, *, dist_tokens: int, test_tokens: int, device: DeviceSpec, batch_size: int = 8,
    max_tokens: Optional[int] = None, weight_bytes: int = 4, store_bytes: Optional[int] = None,
    precision: str = "float32", store_budget: Optional[int] = None, hooked: bool = True, width: Optional[int] = None,
    shards: int = 1,
) -> MemoryPlan:
    """The memory of a search (module docstring) with ``dist_tokens``/``test_tokens`` padded
    positions in D_dist's and D_test's encodings (one store layer holds that many ``d_model``
    vectors), weights of ``weight_bytes`` each (2: bf16), the store in ``store_bytes`` (default: the
    weights'), compute ``precision`` (``"bf16"``: autocast on a float32 model, or a bf16 model whose
    re-checks need a float32 copy), ``store_budget`` bytes per store (``None``: every layer),
    ``width`` the longest padded sequence (the attention scores' side; default 512). ``shards``: Ray
    actors, one per device, each holding a model replica and the store of its share of the examples
    (:mod:`cel_lens.backends.ray`; the plan is one device's, the shares taken as equal; the budget
    is the whole split's, the layers it keeps are every actor's)."""
    L, d = shape.n_layers, shape.d_model
    item = store_bytes or weight_bytes
    candidates = max(L - 1, 0)
    kept = {}
    for split, tokens in (("dist", dist_tokens), ("test", test_tokens)):
        per_layer = tokens * d * item  # the budget is the whole split's, as the Ray backend reads it
        n = candidates if store_budget is None or per_layer == 0 else min(candidates, int(store_budget) // per_layer)
        kept[split] = n
    store = {s: kept[s] * t * d * item // max(1, shards) for s, t in (("dist", dist_tokens), ("test", test_tokens))}
    T = int(max_tokens or 512 * batch_size)
    act_item = 2 if weight_bytes == 2 else 4
    width = max(1, min(T, int(width or 512)))
    acts = T * (ACT_RESID * d + ACT_MLP * shape.d_mlp) * act_item + 2 * (T // width) * shape.n_heads * width * width * 4
    reduced = PRECISIONS.resolve(precision).reduced
    autocast_unembed = shape.d_vocab * d * 2 if reduced and weight_bytes == 4 else 0
    logits = 3 * min(LOGIT_CHUNK, T * shape.d_vocab) * 4 + autocast_unembed
    weights = shape.params * weight_bytes
    f32 = shape.params * 4 if reduced and weight_bytes == 2 else 0
    load_copy = shape.load_params * weight_bytes if hooked and not device.gpu else 0
    rt = device.runtime
    stages = (
        MemoryStage("load", {"runtime": rt, "weights": weights, "load copy": load_copy}),
        MemoryStage("D_dist (intact, stages 1-2)", {"runtime": rt, "weights": weights, "float32 copy": f32,
                                                    "store": store["dist"], "logits": logits, "activations": acts}),
        MemoryStage("D_test (test, controls)", {"runtime": rt, "weights": weights, "float32 copy": f32,
                                               "store": store["dist"] + store["test"], "logits": logits,
                                               "activations": acts}),
    )
    notes = []
    if device.gpu and hooked and shape.load_params:
        notes.append(f"loading also holds the Hugging Face model in host memory ({_gib(shape.load_params * weight_bytes)})")
    return MemoryPlan(stages, device, batch_size, store_budget, kept, candidates, tuple(notes))


def fit_memory(shape: MemoryShape, **kwargs: Any) -> MemoryPlan:
    """:func:`memory_plan` as asked when it fits; else the largest store budget (layers evenly
    spaced, the same budget for D_dist's and D_test's stores) that fits, then halved batch sizes
    with no store, until it fits; the plan's notes say what was chosen and why. When even the
    weights do not fit, the last plan tried is returned with a note saying so."""
    plan = memory_plan(shape, **kwargs)
    if plan.fits:
        return plan
    d, item = shape.d_model, kwargs.get("store_bytes") or kwargs.get("weight_bytes", 4)
    for n in range(plan.store_candidates - 1, -1, -1):
        budget = n * max(kwargs["dist_tokens"], kwargs["test_tokens"]) * d * item
        tried = memory_plan(shape, **{**kwargs, "store_budget": budget})
        if tried.fits:
            return replace(tried, notes=tried.notes + (
                f"every layer's store does not fit ({_gib(plan.peak)} > {_gib(plan.usable)}): store budget "
                f"{budget / 2**20:,.0f} MiB per split (--store-budget-mb {math.floor(budget / 2**20)}), "
                f"{n} of {plan.store_candidates} layers, ablated passes resume from the nearest stored layer below",))
    batch = int(kwargs.get("batch_size", 8))
    while batch > 1:
        batch //= 2
        tried = memory_plan(shape, **{**kwargs, "store_budget": 0, "batch_size": batch, "max_tokens": None})
        if tried.fits:
            return replace(tried, notes=tried.notes + (
                f"no store fits beside the weights: no store (--store-budget-mb 0) and batch size {batch}",))
    return replace(tried, notes=tried.notes + (
        f"does not fit even without a store at batch size 1 (weights {_gib(shape.params * kwargs.get('weight_bytes', 4))}): "
        "a device with more memory is needed",))


def _held_as_hf(model: Any, params: int) -> int:
    """Parameters of the Hugging Face model a ``HookedTransformer`` was converted from: its own,
    less the biases TransformerLens adds as zeros and the unembedding it unties from the embedding."""
    import torch

    extra = sum(p.numel() for name, p in model.named_parameters()
                if name.rsplit(".", 1)[-1] in ("b_Q", "b_K", "b_V", "_b_K", "_b_V", "b_O", "b_in", "b_out", "b_U")
                and not bool(p.detach().abs().amax() > 0))
    W_U, W_E = getattr(model, "W_U", None), getattr(model, "W_E", None)
    tied = W_U is not None and W_E is not None and bool(torch.equal(W_U[:, :8].T, W_E[:8]))
    return params - extra - (W_U.numel() if tied else 0)


def model_memory_shape(model: Any) -> MemoryShape:
    """:meth:`MemoryShape.from_model`, with the Hugging Face form's parameter count of a
    ``HookedTransformer`` (what loading it holds besides) read off its own weights."""
    shape = MemoryShape.from_model(model)
    if type(model).__name__ == "HookedTransformer":
        shape = replace(shape, load_params=_held_as_hf(model, shape.params))
    return shape


def search_memory(
    model: Any, dist: Any, n_test: int, *, batch_size: int = 8, store_budget: Optional[int] = None,
    store_dtype: Any = None, precision: str = "float32", device: Optional[DeviceSpec] = None, use_store: bool = True,
) -> MemoryPlan:
    """The memory plan of a search on a loaded ``model`` (:func:`fit_memory`): D_dist's padded
    positions from its own encoding (the batches the store is built on), D_test's at D_dist's
    mean per example (D_test is not read before the selection), on the model's device (a GPU's
    memory as CUDA reports it; this machine's physical memory for the CPU). Without a store
    (``use_store=False``, or a generation task, which has none) the store terms are 0; a
    generation's key/value cache is not counted (a note says so)."""
    import torch

    from cel_lens.evaluation.encode import encode_split, split_answer_entry

    generation = split_answer_entry(dist).generates
    batches = [] if generation else encode_split(model, dist, batch_size)
    dist_tokens = sum(math.prod(s) for b in batches for s in b.part_shapes(1)) if use_store else 0
    width = max((sum(s[1] for s in b.part_shapes(1)) for b in batches), default=512)
    test_tokens = round(dist_tokens / max(len(dist), 1) * n_test)
    p = next(model.parameters())
    if device is None and p.device.type == "cuda":
        props = torch.cuda.get_device_properties(p.device)
        known = [d for d in DEVICES.values() if d.name.split()[1] in props.name]
        device = DeviceSpec(props.name, int(props.total_memory), GPU_RUNTIME_BYTES, known[0].bf16_flops if known else None)
    device = device or cpu_device()
    store_item = torch.empty((), dtype=store_dtype).element_size() if store_dtype is not None else p.element_size()
    plan = fit_memory(
        model_memory_shape(model), dist_tokens=dist_tokens, test_tokens=test_tokens, device=device,
        batch_size=batch_size, weight_bytes=p.element_size(), store_bytes=store_item, precision=precision,
        store_budget=store_budget, hooked=type(model).__name__ == "HookedTransformer", width=width,
    )
    if generation:
        plan = replace(plan, notes=plan.notes + ("a generation task: no store; its key/value cache is not counted",))
    return plan

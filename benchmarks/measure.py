"""Measuring: wall and CPU time, peak resident memory, and the compute floor of a stage-1 scan."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import einops
import torch

__all__ = [
    "Measurement",
    "measure",
    "cpu_seconds",
    "own_pass_seconds",
    "rss_bytes",
    "reset_peak_rss",
    "release_free_memory",
    "median",
    "intact_pass_seconds",
    "layer_flops",
    "unembed_flops",
    "scan_flops",
    "machine_info",
]


def rss_bytes() -> tuple[Optional[int], Optional[int]]:
    """``(current, peak)`` resident set size of this process in bytes (``/proc/self/status``;
    peak from ``getrusage`` where /proc is missing)."""
    try:
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    fields[key] = int(value.split()[0]) * 1024
        return fields.get("VmRSS"), fields.get("VmHWM")
    except OSError:
        return None, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark to its current RSS (Linux ``clear_refs`` 5); False where
    the kernel does not allow it (peaks are then process-lifetime maxima)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> None:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim``), so that RSS is live memory
    and a later peak counts what a run allocates rather than what earlier runs freed."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Measurement:
    """One timed run: wall and CPU seconds, and the peak RSS above the RSS at its start."""

    wall_s: float
    cpu_s: float
    peak_rss_delta: Optional[int]
    value: Any = None


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished child processes (the sandbox
    that judges generated code)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def own_cpu_seconds() -> float:
    """CPU time of this process alone (``getrusage(RUSAGE_SELF)``, user + system): without the
    child processes a harness spawns (lm-eval runs ``git describe`` and torch's environment report
    on every ``simple_evaluate``), whose time :func:`cpu_seconds` adds once they finish."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(fn: Callable[[], Any]) -> Measurement:
    """Run ``fn`` once; wall time (``perf_counter``), CPU time (this process's threads and its
    finished children, :func:`cpu_seconds`), and the peak resident memory it added (reset before,
    read after)."""
    import gc

    gc.collect()
    release_free_memory()
    exact_peak = reset_peak_rss()
    base, _ = rss_bytes()
    c0, t0 = cpu_seconds(), time.perf_counter()
    value = fn()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    _, peak = rss_bytes()
    delta = peak - base if (exact_peak and peak is not None and base is not None) else None
    return Measurement(wall, cpu, delta, value)


def median(values: Sequence[float]) -> float:
    """Median (NaN for an empty sequence)."""
    return statistics.median(values) if values else float("nan")


def intact_pass_seconds(model, batches: Sequence, repeat: int = 1, clock: str = "wall") -> float:
    """Seconds of one intact forward pass over the encoded split ``batches`` (cel_lens's
    teacher-forced encoding, :func:`cel_lens.evaluation.encode_split`), unembedding only the scored
    positions, run with each batch repeated ``repeat`` times (the rows one scan forward holds) and
    divided by ``repeat``: the per-pass cost at the batch shape the scan itself uses. ``clock``:
    ``"wall"`` (``perf_counter``) or ``"cpu"`` (this process's CPU time, steadier on a busy machine)."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    timer = time.perf_counter if clock == "wall" else time.process_time
    from cel_lens.model import forward_resid, unembed

    device = next(model.parameters()).device

    def rep(t: torch.Tensor) -> torch.Tensor:
        return einops.repeat(t.to(device), "r ... -> (v r) ...", v=repeat)

    t0 = timer()
    with torch.inference_mode():
        for batch in batches:
            if batch.layout == "rows":
                tokens, mask = batch.rows.tokens, batch.rows.attention_mask
                positions, sel = batch.rows.positions, batch.rows.target_mask
            else:
                if batch.cont_tokens is not None and batch.cont_tokens.shape[1] > 0:
                    raise NotImplementedError("the floor pass handles one-token choices only (BoolQ)")
                tokens, mask = batch.context_tokens, batch.context_mask
                last = tokens.shape[1] - 1
                positions = torch.full((tokens.shape[0], 1), last, dtype=torch.long)
                sel = torch.ones_like(positions, dtype=torch.bool)
            resid = forward_resid(model, rep(tokens), attention_mask=rep(mask))
            idx = einops.repeat(rep(positions), "r k -> r k d", d=resid.shape[-1])
            vectors = resid.gather(1, idx)[rep(sel)]
            unembed(model, vectors).float().logsumexp(-1)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (timer() - t0) / repeat


def own_pass_seconds(model, batches: Sequence, repeat: int = 1) -> float:
    """CPU seconds of one intact cel_lens pass over encoded ``batches`` (any layout), each batch run
    as ``repeat`` intact variants in one forward (the scan's forward shape), divided by ``repeat``."""
    from cel_lens.evaluation.teacher_forced import batch_pass
    from cel_lens.model.ablation import ZERO
    from cel_lens.model import model_shape

    n_layers, n_heads = model_shape(model)
    masks = torch.zeros(repeat, n_layers, n_heads, dtype=torch.bool)
    t0 = cpu_seconds()
    with torch.inference_mode():
        for batch in batches:
            batch_pass(model, batch, masks, 0, None, ablation=ZERO)
    return (cpu_seconds() - t0) / repeat


def layer_flops(cfg, rows: int, width: int, keys: Optional[int] = None) -> float:
    """Forward FLOPs of one transformer layer on ``rows x width`` new positions attending over
    ``keys`` positions (default ``width``; TransformerLens computes the full score matrix): q/k/v/o
    projections (grouped-query k/v), scores and weighted values, and the (gated) MLP."""
    d, h, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    kv = getattr(cfg, "n_key_value_heads", None) or h
    keys = width if keys is None else keys
    per_token = 2 * d * h * dh * 2 + 2 * d * kv * dh * 2 + 2 * 2 * h * dh * keys
    if not getattr(cfg, "attn_only", False) and cfg.d_mlp:
        per_token += (3 if getattr(cfg, "gated_mlp", False) else 2) * 2 * d * cfg.d_mlp
    return float(rows * width * per_token)


def unembed_flops(cfg, n_positions: int) -> float:
    """FLOPs of unembedding ``n_positions`` residual vectors."""
    return float(2 * cfg.d_model * cfg.d_vocab * n_positions)


def scan_flops(cfg, batches: Sequence, start_layers: Sequence[int]) -> float:
    """FLOPs of passes over cel_lens's encoded ``batches`` (teacher-forced rows, or shared contexts
    with one-token choices) starting at each of ``start_layers`` (0 = from the tokens), each
    unembedding only the scored positions. Padding counts: it is computed."""
    total = 0.0
    for batch in batches:
        if batch.layout == "rows":
            rows, width = batch.rows.tokens.shape
            scored = int(batch.rows.target_mask.sum())
        else:
            rows, width = batch.context_tokens.shape
            scored = int(batch.n_rows)
        per_layer = layer_flops(cfg, int(rows), int(width))
        total += sum(per_layer * (cfg.n_layers - s) + unembed_flops(cfg, scored) for s in start_layers)
    return total


def _version(dist: str, module: Any) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return str(getattr(module, "__version__", "?"))


def machine_info() -> dict[str, Any]:
    """CPU model, cores, torch threads, memory, load average and library versions."""
    import transformer_lens
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_bytes": mem,
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformer_lens": _version("transformer-lens", transformer_lens),
        "transformers": transformers.__version__,
        "platform": platform.platform(),
    }

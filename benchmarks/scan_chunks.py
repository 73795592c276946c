"""Exact stage 1 in chunks that survive an interrupted benchmark.

A BoolQ scan at issue 35's size (100 D_dist prompts, 270 heads, in float32 and in bf16) costs about
three CPU hours on this machine: more than a session, on a machine that may not be there the next
day. :func:`scan` evaluates the heads a chunk at a time and, given a folder, saves each chunk as it
returns: its per-example decisions, the CPU and wall seconds it took, and its bf16 re-check tally.
A rerun with the same folder loads the chunks saved and evaluates only the rest; the scan's seconds
are the sum over chunks, each as measured when it ran (so a resumed scan reports what the work
cost, not what the last process did). A chunk file names the split's content hash, the precision
and its heads, so a folder cannot lend one scan's decisions to another, and the machine's CPU
(:func:`machine_id`), so a scan resumed on another kind of CPU re-runs the chunks measured elsewhere:
their seconds are not comparable (a float32 scan on one CPU against a bf16 one on another, with
AMX, would report a ratio of CPUs, not of precisions).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

__all__ = ["scan", "tally_delta", "sum_tallies", "cpu_description", "machine_id"]

SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags a scan's speed depends on (float32 and bf16 matmul kernels)."""


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name and the :data:`SPEED_FLAGS` it has (``"unknown"`` without ``cpuinfo``)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return f"{name} ({', '.join(f for f in SPEED_FLAGS if f in flags) or 'none of ' + '/'.join(SPEED_FLAGS)})"


def machine_id(description: Optional[str] = None) -> str:
    """A short name of :func:`cpu_description` for chunk files: chunks measured on one kind of CPU
    are resumed only on that kind."""
    return hashlib.sha256((description or cpu_description()).encode()).hexdigest()[:8]


def tally_delta(before: dict, after: dict) -> dict:
    """What one chunk added to a re-check tally (:func:`cel_lens.evaluation.precision.recompute_summary`):
    decisions, recomputed and the pair check's counts subtract; its largest change is the larger one."""
    out = {}
    for name, rec in after.items():
        old = before.get(name, {})
        row = {k: int(rec.get(k, 0)) - int(old.get(k, 0)) for k in ("decisions", "recomputed")}
        if "pair_check" in rec:
            pc, opc = rec["pair_check"], old.get("pair_check", {})
            row["pair_check"] = {"observed": int(pc.get("observed", 0)) - int(opc.get("observed", 0)),
                                 "widened": int(pc.get("widened", 0)) - int(opc.get("widened", 0)),
                                 "largest_change": float(pc.get("largest_change", 0.0)), "bound": pc.get("bound")}
        out[name] = row
    return out


def sum_tallies(parts: Sequence[dict]) -> dict:
    """One tally of the chunks' (:func:`tally_delta`), in the form a run records: per split name
    decisions, recomputed, their share, and the pair check merged."""
    from cel_lens.evaluation.precision import merge_pair_checks

    out: dict[str, Any] = {}
    for part in parts:
        for name, rec in part.items():
            row = out.setdefault(name, {"decisions": 0, "recomputed": 0, "checks": []})
            row["decisions"] += rec["decisions"]
            row["recomputed"] += rec["recomputed"]
            if "pair_check" in rec:
                row["checks"].append(rec["pair_check"])
    for row in out.values():
        row["share"] = row["recomputed"] / row["decisions"] if row["decisions"] else 0.0
        checks = row.pop("checks")
        if checks:
            row["pair_check"] = merge_pair_checks(checks)
    return out


def scan(
    evaluate: Callable[[list], torch.Tensor], head_sets: Sequence[Any], chunk: int, *,
    folder: Optional[Path] = None, key: str = "", tally: Optional[Callable[[], dict]] = None,
    machine: Optional[str] = None,
) -> dict[str, Any]:
    """``evaluate`` (head sets -> decisions ``[sets, examples]``) over ``head_sets``, ``chunk`` at a
    time: ``{"bits", "cpu_s", "wall_s", "recompute", "chunks_resumed"}``. With ``folder``, each chunk
    is saved as ``<key>-<machine>-<first head>-<n>.pt`` when it returns and loaded instead of
    evaluated when present (``key``: what the decisions depend on: the split's content hash, the
    precision; ``machine``: where its seconds were measured, :func:`machine_id` by default).
    ``tally``: the re-check tally reader (cumulative in this process), recorded per chunk."""
    from cel_lens.selection.plan import cpu_and_wall

    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    machine = machine or machine_id()
    parts, cpu, wall, tallies, resumed = [], 0.0, 0.0, [], 0
    for start in range(0, len(head_sets), chunk):
        sets = list(head_sets[start : start + chunk])
        path = None if folder is None else folder / f"{key}-{machine}-{sets[0]}-{len(sets)}.pt"
        if path is not None and path.exists():
            saved = torch.load(path)
            if saved["heads"] != [str(h) for h in sets]:
                raise ValueError(f"{path} holds other heads ({saved['heads'][:3]}...): not this scan's chunk")
            resumed += 1
        else:
            before = tally() if tally is not None else {}
            t = cpu_and_wall()
            bits = evaluate(sets)
            c, w = cpu_and_wall()
            saved = {"heads": [str(h) for h in sets], "bits": bits.cpu(), "cpu_s": c - t[0], "wall_s": w - t[1],
                     "tally": tally_delta(before, tally()) if tally is not None else {}}
            if path is not None:
                tmp = path.with_suffix(".tmp")
                torch.save(saved, tmp)
                tmp.replace(path)  # whole chunks only: a kill mid-save leaves no chunk file
        parts.append(saved["bits"])
        cpu, wall = cpu + saved["cpu_s"], wall + saved["wall_s"]
        tallies.append(saved["tally"])
    bits = torch.cat(parts) if parts else torch.zeros(0, 0, dtype=torch.bool)
    return {"bits": bits, "cpu_s": cpu, "wall_s": wall, "recompute": sum_tallies(tallies) if tally else None,
            "chunks_resumed": resumed, "machine": machine}

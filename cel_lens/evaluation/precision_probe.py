"""How ``precision="auto"`` chooses for a float32 model: a short timed probe of its own passes.

:func:`bf16_probe` times one forward pass of the model (a batch of 8 random prompts of 48 tokens,
unembedding their last position) in float32 and on its bfloat16 weight copy
(``bf16=True``, :func:`~cel_lens.model.bf16_usable`), in the calling thread's CPU seconds, best of three after one
warm-up each, once per model. ``"auto"`` computes an exact-match split in bf16 only where the
probe ran bf16 at least :data:`AUTO_MIN_SPEEDUP` times faster: what the passes gain must pay for
the float32 re-checks (about 5-10 % of exact-match decisions on SmolLM2, each costing a float32
pass of its variant from its layer). The probe's numbers are part of the run's ``precision`` record.

The probe times passes, not re-checks, and on some models nearly every decision lies within the
bound (a random-weight Llama-shaped model: 97 % of Arithmetic decisions re-checked, bf16 1.6 x
slower than float32 under ``auto``). So every evaluation that ``auto`` put in bf16 reports its
re-checked share (:func:`note_rechecks`), and ``auto`` keeps bf16 for that model and split kind only
while :func:`projected_speedup` (the pass's speed-up with the re-checks priced as float32 work,
``1 / (1 / speedup + share)``) stays at least :data:`AUTO_MIN_SPEEDUP`, once
:data:`MIN_DECISIONS` decisions were seen. The first evaluation pays; the later ones do not.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Callable, Optional

import torch

from cel_lens.model import bf16_usable, forward_resid, unembed

__all__ = ["AUTO_MIN_SPEEDUP", "MIN_DECISIONS", "bf16_probe", "probe_record", "note_rechecks", "projected_speedup"]

AUTO_MIN_SPEEDUP = 1.3
"""The probe's bf16 speed-up below which ``"auto"`` keeps a float32 model in float32."""

MIN_DECISIONS = 64
"""Decisions ``auto`` must have seen re-checked or not before their share counts."""

_PROBES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SHARES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> {kind: [re-checked, decisions]}
_LOCK = threading.Lock()  # two searches in two threads may report on one model at once


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def bf16_probe(model) -> dict:
    """``{"float32_s", "bf16_s", "speedup", "shape"}`` of one timed pass each way (see the module
    docstring; ``speedup`` 0 where the model has no bfloat16 weight copy). Measured once per model."""
    held = _PROBES.get(model)
    if held is not None:
        return dict(held)
    vocab = int(model.cfg.d_vocab)
    tokens = torch.randint(0, vocab, (8, 48), generator=torch.Generator().manual_seed(0))
    last = torch.full((8, 1), 47, dtype=torch.long)

    def one(bf16: bool) -> None:
        with torch.inference_mode():
            unembed(model, forward_resid(model, tokens, keep=last, bf16=bf16), bf16=bf16)

    record = {"float32_s": round(_best(lambda: one(False)), 4), "bf16_s": 0.0, "speedup": 0.0, "shape": [8, 48]}
    if bf16_usable(model):
        record["bf16_s"] = round(_best(lambda: one(True)), 4)
        record["speedup"] = round(record["float32_s"] / max(record["bf16_s"], 1e-9), 2)
    _PROBES[model] = record
    return dict(record)


def probe_record(model) -> Optional[dict]:
    """The probe's numbers for ``model`` where ``"auto"`` measured them (else ``None``), with the
    re-checked shares seen since per split kind: what a run's ``precision`` record says its choice
    was made by."""
    held = _PROBES.get(model)
    if held is None:
        return None
    with _LOCK:
        shares = {k: {"rechecked": r, "decisions": n} for k, (r, n) in _SHARES.get(model, {}).items()}
    return {**held, **({"rechecks": shares} if shares else {})}


def note_rechecks(model, kind: Optional[str], rechecked: int, decisions: int) -> None:
    """Count an ``auto`` bf16 evaluation's re-checked decisions for ``model`` on ``kind`` splits."""
    with _LOCK:
        counts = _SHARES.setdefault(model, {}).setdefault(str(kind), [0, 0])
        counts[0] += int(rechecked)
        counts[1] += int(decisions)


def projected_speedup(model, kind: Optional[str], speedup: float) -> float:
    """bf16's expected speed-up over float32 for ``model`` on ``kind`` splits, from the probe's pass
    ``speedup``: that alone until :data:`MIN_DECISIONS` decisions were seen, then with the re-checks
    priced as float32 work, ``1 / (1 / speedup + share)`` (an estimate that favours bf16: a re-check
    runs from its layer, on the union of its group's examples)."""
    speedup = float(speedup)
    with _LOCK:
        rechecked, decisions = _SHARES.get(model, {}).get(str(kind), (0, 0))
    if decisions < MIN_DECISIONS or speedup <= 0:
        return speedup
    return 1.0 / (1.0 / speedup + rechecked / decisions)

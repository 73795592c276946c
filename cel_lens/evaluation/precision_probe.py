"""How ``precision="auto"`` chooses for a float32 model: a short timed probe of its own passes.

:func:`bf16_probe` times one forward pass of the model (a batch of 8 random prompts of 48 tokens,
unembedding their last position) in float32 and on its bfloat16 weight copy
(``bf16=True``, :func:`~cel_lens.model.bf16_usable`), in the calling thread's CPU seconds, best of three after one
warm-up each, once per model. ``"auto"`` computes an exact-match split in bf16 only where the
probe ran bf16 at least :data:`AUTO_MIN_SPEEDUP` times faster: what the passes gain must pay for
the float32 re-checks (about 5-10 % of exact-match decisions on SmolLM2, each costing a float32
pass of its variant from its layer). The probe's numbers are part of the run's ``precision`` record.
"""

from __future__ import annotations

import time
import weakref
from typing import Callable, Optional

import torch

from cel_lens.model import bf16_usable, forward_resid, unembed

__all__ = ["AUTO_MIN_SPEEDUP", "bf16_probe", "probe_record"]

AUTO_MIN_SPEEDUP = 1.3
"""The probe's bf16 speed-up below which ``"auto"`` keeps a float32 model in float32."""

_PROBES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


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
    """The probe's numbers for ``model`` where ``"auto"`` measured them (else ``None``): what a
    run's ``precision`` record says its choice was made by."""
    held = _PROBES.get(model)
    return None if held is None else dict(held)

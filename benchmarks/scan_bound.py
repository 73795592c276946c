"""A lower bound on an exact stage-1 scan: today's method's FLOP count less three savings it skips.

:func:`benchmarks.limit.scan_count_flops` counts what cel_lens's method computes today (the intact
pass once; per head, a rank-``d_head`` correction at the ablated layer, that layer's MLP, the layers
above, the last one at scored positions only). It is a count of today's method, not a limit on the
work: an exact scan may also skip

* **the shared prefix** (:func:`shared_prefix`): every example's prompt starts with the same tokens
  (few-shot shots, an instruction); per variant they are computed once, not once per example (a
  variant ablated at layer ``l`` still differs from the intact run on them from ``l`` up, so the
  prefix is charged once per head, then each example's own tokens after it);
* **the rank-``d_head`` MLP input correction**: the ablated layer's MLP input is the intact one
  minus ``z_h W_O[h]``, so its input projections are the intact pass's (stored) plus
  ``z_h (W_O[h] W_in)``: ``2 d_head d_mlp`` per projection instead of ``2 d_model d_mlp``;
* **the scored unembedding columns**: a multiple-choice example whose choices are single tokens at
  one position is decided by those columns' logits alone (the log-normaliser is common to them),
  so ``2 d_model x choices`` per scored position instead of ``2 d_model x vocabulary``.

:func:`scan_bound` returns today's count, each saving alone and all three together, and
:func:`matmul_peaks` measures the float32 and bfloat16 matmul peaks (one thread, CPU time) that turn
FLOPs into seconds.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from benchmarks.limit import Shape, head_flops, intact_flops, matmul_flops_per_second, pieces, scan_count_flops

__all__ = ["shared_prefix", "scan_bound", "matmul_peaks", "head_bound_flops"]

Encoded = Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]


def shared_prefix(encoded: Encoded) -> int:
    """Tokens every context starts with (at most each context's length less one: every example
    keeps a token of its own, where it is scored)."""
    contexts = [list(ctx) for ctx, _ in encoded]
    if len(contexts) < 2:
        return 0
    n = min(len(c) for c in contexts) - 1
    first = contexts[0]
    for i in range(max(n, 0)):
        if any(c[i] != first[i] for c in contexts[1:]):
            return i
    return max(n, 0)


def head_bound_flops(shape: Shape, layer: int, tokens: int, scored: int, past: int = 0, *, mlp_rank: bool = False,
                     columns: int = 0) -> int:
    """:func:`~benchmarks.limit.head_flops` less the MLP-input saving (``mlp_rank``) and with
    ``columns`` unembedding columns per scored position (0: the whole vocabulary)."""
    total = head_flops(shape, layer, tokens, scored, past)
    at = tokens if layer < shape.n_layers - 1 else scored
    if mlp_rank:
        projections = 2 if shape.gated else 1
        total -= at * projections * 2 * (shape.d_model - shape.d_head) * shape.d_mlp
    if columns:
        total -= scored * 2 * shape.d_model * (shape.d_vocab - columns)
    return total


def _columns(conts: Sequence[Sequence[int]]) -> int:
    """Unembedding columns an example needs: its choices' tokens when every choice is one token."""
    return len({c[0] for c in conts}) if len(conts) > 1 and all(len(c) == 1 for c in conts) else 0


def _total(shape: Shape, encoded: Encoded, prefix: int, mlp_rank: bool, columns: bool) -> int:
    """The scan's FLOPs with the chosen savings (module docstring)."""
    L, H = shape.n_layers, shape.n_heads
    total = intact_flops(shape, prefix, 0, 0) if prefix else 0
    total += sum(H * head_bound_flops(shape, l, prefix, 0, 0, mlp_rank=mlp_rank) for l in range(L)) if prefix else 0
    for ctx, conts in encoded:
        cols = _columns(conts) if columns else 0
        for tokens, scored, past in pieces([(ctx, conts)]):
            if past == 0 and prefix:  # the context's piece: its own tokens after the shared prefix
                tokens, past = tokens - prefix, prefix
            unembed_saving = scored * 2 * shape.d_model * (shape.d_vocab - cols) if cols else 0
            total += intact_flops(shape, tokens, scored, past) - unembed_saving
            total += H * sum(head_bound_flops(shape, l, tokens, scored, past, mlp_rank=mlp_rank, columns=cols)
                             for l in range(L))
    return total


def scan_bound(shape: Shape, encoded: Encoded) -> dict[str, Any]:
    """Today's count (:func:`~benchmarks.limit.scan_count_flops`), each saving alone and the bound
    with all three, in GFLOP, and each as today's count over it (the factor it saves)."""
    today = scan_count_flops(shape, pieces(encoded))
    prefix = shared_prefix(encoded)
    cases = {
        "prefix": _total(shape, encoded, prefix, False, False),
        "mlp_rank": _total(shape, encoded, 0, True, False),
        "columns": _total(shape, encoded, 0, False, True),
        "bound": _total(shape, encoded, prefix, True, True),
    }
    out: dict[str, Any] = {"today_gflop": today / 1e9, "prefix_tokens": prefix,
                           "mean_tokens": sum(len(c) for c, _ in encoded) / max(len(encoded), 1)}
    for name, flops in cases.items():
        out[f"{name}_gflop"] = flops / 1e9
        out[f"{name}_saving"] = today / flops if flops else float("nan")
    return out


def matmul_peaks(rows: int = 512, d_in: int = 576, d_out: int = 1536, reps: int = 5) -> dict[str, float]:
    """FLOP/s of a plain ``[rows, d_in] @ [d_in, d_out]`` matmul in float32 and in bfloat16 (best of
    ``reps`` CPU-timed runs of 10 products each, on the current thread count): the peaks a bound in
    seconds is taken at."""
    return {f"{name}_gflops": matmul_flops_per_second(rows, d_in, d_out, reps, dtype) / 1e9
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}

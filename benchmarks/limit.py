"""The FLOP count of today's exact stage-1 scan (cel_lens's method as it computes now), from the
real token shapes.

Formerly called the "FLOP limit": it is correct arithmetic but a count of one method, not a limit
on the work. :mod:`benchmarks.scan_bound` subtracts what an exact scan may also skip (the shared
prompt start, most of the ablated layer's MLP input, unscored unembedding columns) and states the
bound at the float32 and bf16 matmul peaks. Result keys keep their old names (``limit_gflop``,
``limit_over_scan_hf``, ...) so older records still render.

The benchmark's *floor* ``1 + N (L+1) / (2L)`` charges each head every full layer from its own
layer up. What today's method computes is less:

* **The intact pass** once: every layer at every token, the unembedding at scored positions only.
* **Per head at layer l** (resuming from the stored residual stream):
  - the ablated layer's attention is shared with the intact pass (its heads' outputs are stored);
    removing head ``h`` is a rank-``d_head`` correction, ``z_h W_O[h]``: ``2 d_head d_model`` per token;
  - layer ``l``'s MLP on the corrected stream;
  - layers ``l+1 .. L-2`` in full;
  - the last layer only at the scored positions, apart from its keys and values at every token;
  - the unembedding at the scored positions.

A sequence is cut into *pieces* ``(tokens, scored, past)``: ``tokens`` new positions after ``past``
cached ones, the last ``scored`` of them read (:func:`pieces`: a multiple-choice context once, its
endings after it). Generation (:func:`generation_flops`) is a prefill and one piece per new token.

Terms per token (one multiply-add = 2 FLOPs): Q/K/V ``2 d (H + 2 H_kv) d_head``, O ``2 H d_head d``,
MLP ``2 d d_ff x 3`` (gated) or ``x 2``, unembedding ``2 d V``; causal attention scores and values
over ``T`` tokens ``2 H d_head T (T + 1)`` per layer (queries at the last ``S`` positions only: their
causal pairs).
Converted to seconds at a measured throughput (FLOP/s): of a plain single-thread matmul, or of the
plain ``transformers`` intact pass (its FLOPs over its seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import torch

__all__ = ["Shape", "Piece", "intact_flops", "head_flops", "pieces", "scan_intact_flops", "scan_count_flops", "floor_flops",
           "generation_flops", "matmul_flops_per_second", "against_limit"]

Piece = Union[tuple[int, int], tuple[int, int, int]]  # (tokens, scored[, past])


@dataclass(frozen=True)
class Shape:
    """A decoder's shapes: layers, heads, key/value heads, widths, vocabulary, gated MLP."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    d_mlp: int
    d_vocab: int
    gated: bool = True

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any]) -> "Shape":
        """From a ``transformers`` config dict (Llama-style names)."""
        heads = int(cfg["num_attention_heads"])
        d = int(cfg["hidden_size"])
        return cls(int(cfg["num_hidden_layers"]), heads, int(cfg.get("num_key_value_heads", heads)), d,
                   int(cfg.get("head_dim") or d // heads), int(cfg["intermediate_size"]), int(cfg["vocab_size"]),
                   cfg.get("hidden_act", "silu") in ("silu", "swiglu"))

    @classmethod
    def from_hooked_config(cls, cfg: Any) -> "Shape":
        """From a HookedTransformer's ``model.cfg``."""
        heads = int(cfg.n_heads)
        return cls(int(cfg.n_layers), heads, int(getattr(cfg, "n_key_value_heads", None) or heads), int(cfg.d_model),
                   int(cfg.d_head), int(cfg.d_mlp), int(cfg.d_vocab), bool(getattr(cfg, "gated_mlp", False)))

    @property
    def qkv(self) -> int:
        """Q/K/V projection FLOPs per token."""
        return 2 * self.d_model * (self.n_heads + 2 * self.n_kv_heads) * self.d_head

    @property
    def out(self) -> int:
        """Output projection FLOPs per token."""
        return 2 * self.n_heads * self.d_head * self.d_model

    @property
    def mlp(self) -> int:
        """MLP FLOPs per token."""
        return 2 * self.d_model * self.d_mlp * (3 if self.gated else 2)

    @property
    def unembed(self) -> int:
        """Unembedding FLOPs per scored position."""
        return 2 * self.d_model * self.d_vocab

    def attention(self, queries: int, keys: int, causal: bool = True) -> int:
        """Score and value FLOPs of one layer: ``queries`` positions over ``keys`` (causal: ``T(T+1)/2`` pairs)."""
        pairs = keys * (keys + 1) // 2 if causal else queries * keys
        return 4 * self.n_heads * self.d_head * pairs

    def causal_attention(self, tokens: int, past: int = 0, last: Optional[int] = None) -> int:
        """Score and value FLOPs of the last ``last`` (default: all) of ``tokens`` new positions,
        each attending causally to ``past`` cached positions and the new ones up to itself."""
        q = tokens if last is None else last
        pairs = q * past + (tokens * (tokens + 1) - (tokens - q) * (tokens - q + 1)) // 2
        return 4 * self.n_heads * self.d_head * pairs

    def full_layer(self, tokens: int, past: int = 0) -> int:
        """One layer at ``tokens`` new positions (after ``past`` cached ones)."""
        return tokens * (self.qkv + self.out + self.mlp) + self.causal_attention(tokens, past)

    def last_layer(self, tokens: int, scored: int, past: int = 0) -> int:
        """The last layer when only the last ``scored`` positions are read: keys/values everywhere,
        queries, attention, output and MLP there."""
        kv = 2 * self.d_model * 2 * self.n_kv_heads * self.d_head
        q = 2 * self.d_model * self.n_heads * self.d_head
        return tokens * kv + scored * (q + self.out + self.mlp) + self.causal_attention(tokens, past, scored)


def intact_flops(shape: Shape, tokens: int, scored: int, past: int = 0) -> int:
    """The intact pass of one piece: every layer at its ``tokens`` positions (after ``past`` cached
    ones), the unembedding at ``scored`` positions."""
    return shape.n_layers * shape.full_layer(tokens, past) + scored * shape.unembed


def head_flops(shape: Shape, layer: int, tokens: int, scored: int, past: int = 0) -> int:
    """One head of ``layer`` ablated on one piece, resumed from the intact pass (module docstring)."""
    L = shape.n_layers
    at = tokens if layer < L - 1 else scored  # the last layer: only the scored positions change
    total = at * (2 * shape.d_head * shape.d_model + shape.mlp)
    total += sum(shape.full_layer(tokens, past) for _ in range(layer + 1, L - 1))
    if layer < L - 1:
        total += shape.last_layer(tokens, scored, past)
    return total + scored * shape.unembed


def pieces(encoded: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> list[Piece]:
    """The pieces ``(tokens, scored, past)`` a scan must compute for examples encoded as ``(context
    ids, continuation ids per choice)`` (:func:`benchmarks.floor.encode_for_floor`): one row
    ``context + continuation[:-1]`` for a single continuation; for several, the context once (its
    last position scored) and each ending of more than one token after it."""
    out: list[Piece] = []
    for ctx, conts in encoded:
        if len(conts) == 1:
            out.append((len(ctx) + len(conts[0]) - 1, len(conts[0]), 0))
            continue
        out.append((len(ctx), 1, 0))
        out += [(len(c) - 1, len(c) - 1, len(ctx)) for c in conts if len(c) > 1]
    return out


def _piece(p: Sequence[int]) -> tuple[int, int, int]:
    """``(tokens, scored, past)`` of a piece given as ``(tokens, scored)`` or ``(tokens, scored, past)``."""
    return (int(p[0]), int(p[1]), int(p[2]) if len(p) > 2 else 0)


def scan_intact_flops(shape: Shape, sequences: Sequence[Sequence[int]]) -> int:
    """The intact pass over every piece (:func:`pieces`; ``(tokens, scored)`` means no past)."""
    return sum(intact_flops(shape, *_piece(p)) for p in sequences)


def scan_count_flops(shape: Shape, sequences: Sequence[Sequence[int]]) -> int:
    """Today's FLOP count of an exact scan of every head over the pieces (:func:`pieces`)."""
    return sum(
        intact_flops(shape, *_piece(p)) + shape.n_heads * sum(head_flops(shape, l, *_piece(p)) for l in range(shape.n_layers))
        for p in sequences
    )


def floor_flops(shape: Shape, sequences: Sequence[Sequence[int]]) -> float:
    """The benchmark's floor ``(1 + N (L+1)/(2L))`` intact passes, in the same FLOPs."""
    L, N = shape.n_layers, shape.n_layers * shape.n_heads
    return (1 + N * (L + 1) / (2 * L)) * scan_intact_flops(shape, sequences)


def generation_flops(
    shape: Shape, prompts: Sequence[int], completions: Sequence[Sequence[Sequence[int]]]
) -> tuple[int, int]:
    """``(intact, scan)`` FLOP bounds of greedy generation: ``prompts`` token counts,
    ``completions[e][p]`` the token ids evaluation ``e`` (0: intact, then every head layer-major)
    generated for prompt ``p``. Each evaluation prefills its prompt (the first token from its last
    position) and decodes the rest one token at a time after a key/value cache. An ablated one
    resumes its prompt from its head's layer, and each decode step too while every token it has
    generated so far is the intact run's (below that layer it is then the intact run's step); once
    it departs from the intact text, its steps run every layer."""
    H = shape.n_heads
    total = 0
    for e, row in enumerate(completions):
        for P, ids, ref in zip(prompts, row, completions[0]):
            same = next((i for i, (a, b) in enumerate(zip(ids, ref)) if a != b), min(len(ids), len(ref)))
            if e == 0:
                total += intact_flops(shape, P, 1, 0) + sum(intact_flops(shape, 1, 1, P + j) for j in range(len(ids) - 1))
                continue
            layer = (e - 1) // H
            total += head_flops(shape, layer, P, 1, 0)
            total += sum(head_flops(shape, layer, 1, 1, P + j) if j < same else intact_flops(shape, 1, 1, P + j)
                         for j in range(len(ids) - 1))
        if e == 0:
            intact = total
    return intact, total


def matmul_flops_per_second(rows: int, d_in: int, d_out: int, reps: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of a plain matmul ``[rows, d_in] @ [d_in, d_out]`` in ``dtype`` (best of ``reps`` runs of
    10 products, CPU time; one product first, since bf16 kernels are chosen at the first call)."""
    a, b = torch.randn(rows, d_in, dtype=dtype), torch.randn(d_in, d_out, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(10):
            torch.mm(a, b)
        best = min(best, (time.process_time() - t0) / 10)
    return 2.0 * rows * d_in * d_out / max(best, 1e-9)


def against_limit(limit: float, intact: float, intact_cpu_s: float, measured_cpu_s: float, matmul_rate: float) -> dict[str, float]:
    """A measured run against today's FLOP count ``limit``: the count in seconds at the throughput of the plain
    ``transformers`` intact pass (``intact`` FLOPs in ``intact_cpu_s``) and of a plain matmul, and
    each over the measured seconds (1: at the limit; below 1: that far above it)."""
    hf_rate = intact / intact_cpu_s
    return {
        "limit_gflop": limit / 1e9, "hf_gflops": hf_rate / 1e9, "matmul_gflops": matmul_rate / 1e9,
        "limit_s_hf": limit / hf_rate, "limit_s_matmul": limit / matmul_rate,
        "limit_over_scan_hf": limit / hf_rate / measured_cpu_s, "limit_over_scan_matmul": limit / matmul_rate / measured_cpu_s,
    }

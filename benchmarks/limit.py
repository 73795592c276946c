"""The FLOP limit of an exact stage-1 scan, from the real token shapes.

The benchmark's *floor* ``1 + N (L+1) / (2L)`` charges each head every full layer from its own
layer up. What a scan must compute is less:

* **The intact pass** once: every layer at every token, the unembedding at scored positions only.
* **Per head at layer l** (resuming from the stored residual stream):
  - the ablated layer's attention is shared with the intact pass (its heads' outputs are stored);
    removing head ``h`` is a rank-``d_head`` correction, ``z_h W_O[h]``: ``2 d_head d_model`` per token;
  - layer ``l``'s MLP on the corrected stream;
  - layers ``l+1 .. L-2`` in full;
  - the last layer only at the scored positions, apart from its keys and values at every token;
  - the unembedding at the scored positions.

Terms per token (one multiply-add = 2 FLOPs): Q/K/V ``2 d (H + 2 H_kv) d_head``, O ``2 H d_head d``,
MLP ``2 d d_ff x 3`` (gated) or ``x 2``, unembedding ``2 d V``; causal attention scores and values
over ``T`` tokens ``2 H d_head T (T + 1)`` per layer (queries at ``S`` positions only: ``4 H d_head S T``).
Converted to seconds at a measured throughput (FLOP/s): of a plain single-thread matmul, or of the
plain ``transformers`` intact pass (its FLOPs over its seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

__all__ = ["Shape", "intact_flops", "head_flops", "scan_limit_flops", "floor_flops", "matmul_flops_per_second"]


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

    def full_layer(self, tokens: int) -> int:
        """One layer at every token."""
        return tokens * (self.qkv + self.out + self.mlp) + self.attention(tokens, tokens)

    def last_layer(self, tokens: int, scored: int) -> int:
        """The last layer when only ``scored`` positions are read: keys/values everywhere, the rest there."""
        kv = 2 * self.d_model * 2 * self.n_kv_heads * self.d_head
        q = 2 * self.d_model * self.n_heads * self.d_head
        return tokens * kv + scored * (q + self.out + self.mlp) + self.attention(scored, tokens, causal=False)


def intact_flops(shape: Shape, tokens: int, scored: int) -> int:
    """The intact pass of one sequence: every layer everywhere, the unembedding at ``scored`` positions."""
    return shape.n_layers * shape.full_layer(tokens) + scored * shape.unembed


def head_flops(shape: Shape, layer: int, tokens: int, scored: int) -> int:
    """One head of ``layer`` ablated, resumed from the intact pass (module docstring)."""
    L = shape.n_layers
    at = tokens if layer < L - 1 else scored  # the last layer: only the scored positions change
    total = at * (2 * shape.d_head * shape.d_model + shape.mlp)
    total += sum(shape.full_layer(tokens) for _ in range(layer + 1, L - 1))
    if layer < L - 1:
        total += shape.last_layer(tokens, scored)
    return total + scored * shape.unembed


def scan_limit_flops(shape: Shape, sequences: Sequence[tuple[int, int]]) -> int:
    """The limit of an exact scan of every head over ``sequences`` of ``(tokens, scored)``."""
    return sum(
        intact_flops(shape, t, s) + shape.n_heads * sum(head_flops(shape, l, t, s) for l in range(shape.n_layers))
        for t, s in sequences
    )


def floor_flops(shape: Shape, sequences: Sequence[tuple[int, int]]) -> float:
    """The benchmark's floor ``(1 + N (L+1)/(2L))`` intact passes, in the same FLOPs."""
    L, N = shape.n_layers, shape.n_layers * shape.n_heads
    return (1 + N * (L + 1) / (2 * L)) * sum(intact_flops(shape, t, s) for t, s in sequences)


def matmul_flops_per_second(rows: int, d_in: int, d_out: int, reps: int = 5) -> float:
    """FLOP/s of a plain float32 matmul ``[rows, d_in] @ [d_in, d_out]`` (best of ``reps``, CPU time)."""
    a, b = torch.randn(rows, d_in), torch.randn(d_in, d_out)
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(10):
            torch.mm(a, b)
        best = min(best, (time.process_time() - t0) / 10)
    return 2.0 * rows * d_in * d_out / max(best, 1e-9)

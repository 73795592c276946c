"""One recorded evaluation, and the compact form of per-example correctness it is stored in."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import HeadSet

__all__ = ["Evaluation", "encode_bits", "decode_bits", "encode_floats", "decode_floats"]


def encode_bits(correct: Bool[Tensor, " example"]) -> str:
    """Base64 of the little-endian packed bits of a correctness vector (``n`` is stored apart)."""
    arr = np.asarray(correct.detach().cpu().numpy() if isinstance(correct, Tensor) else correct, dtype=bool)
    return base64.b64encode(np.packbits(arr, bitorder="little").tobytes()).decode("ascii")


def decode_bits(bits: str, n: int) -> Bool[Tensor, " example"]:
    """Inverse of :func:`encode_bits` for a vector of length ``n``."""
    raw = np.frombuffer(base64.b64decode(bits), dtype=np.uint8)
    arr = np.unpackbits(raw, count=n, bitorder="little").astype(bool)
    if arr.shape[0] != n:
        raise ValueError(f"bitset holds {arr.shape[0]} bits, expected {n}")
    return torch.from_numpy(arr.copy())


def encode_floats(values: Float[Tensor, "example choice"]) -> str:
    """Base64 of the little-endian float32 bytes of a table (its shape is stored apart): exact, so
    anything computed from a resumed record equals what was computed from memory."""
    arr = np.ascontiguousarray(values.detach().cpu().to(torch.float32).numpy(), dtype="<f4")
    return base64.b64encode(arr.tobytes()).decode("ascii")


def decode_floats(text: str, n: int, m: int) -> Float[Tensor, "example choice"]:
    """Inverse of :func:`encode_floats` for an ``[n, m]`` table."""
    arr = np.frombuffer(base64.b64decode(text), dtype="<f4")
    if arr.shape[0] != n * m:
        raise ValueError(f"float table holds {arr.shape[0]} values, expected {n} x {m}")
    return torch.from_numpy(arr.reshape(n, m).astype(np.float32))


@dataclass(frozen=True)
class Evaluation:
    """One recorded evaluation: a head set's per-example correctness on a split, and for a
    multiple-choice task the per-choice scores (``choice_scores`` ``[example, choice]``, NaN
    where an example has fewer choices) that decided it."""

    split: str
    heads: HeadSet
    stage: str
    correct: Bool[Tensor, " example"] = field(repr=False)
    choice_scores: Optional[Float[Tensor, "example choice"]] = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        """Number of examples."""
        return int(self.correct.shape[0])

    @property
    def accuracy(self) -> float:
        """Fraction of examples answered correctly."""
        return float(self.correct.to(torch.float64).mean()) if self.n else float("nan")

    def to_line(self) -> dict[str, Any]:
        """The JSON object written to ``evaluations.jsonl``."""
        return {
            "type": "eval",
            "split": self.split,
            "heads": str(self.heads),
            "stage": self.stage,
            "n": self.n,
            "n_correct": int(self.correct.sum()),
            "acc": self.accuracy,
            "bits": encode_bits(self.correct),
            **(
                {"n_choices": int(self.choice_scores.shape[1]), "choice_scores": encode_floats(self.choice_scores)}
                if self.choice_scores is not None else {}
            ),
        }

    @classmethod
    def from_line(cls, obj: Mapping[str, Any]) -> "Evaluation":
        """Read an ``"eval"`` line back."""
        return cls(
            split=obj["split"],
            heads=HeadSet.parse(obj["heads"]),
            stage=obj.get("stage", ""),
            correct=decode_bits(obj["bits"], int(obj["n"])),
            choice_scores=(
                decode_floats(obj["choice_scores"], int(obj["n"]), int(obj["n_choices"])) if "choice_scores" in obj else None
            ),
        )

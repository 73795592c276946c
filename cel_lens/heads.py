"""Attention heads and head sets: naming, parsing, validation and boolean masks.

A :class:`Head` is one attention head ``(layer, head)`` with 0-based indices, written ``L3H1``.
A :class:`HeadSet` is an immutable, sorted, duplicate-free set of heads with the canonical text
``L3H1+L12H7`` (the empty set is written ``intact``). Masks are boolean tensors
``[layer, head]`` (one set) or ``[variant, layer, head]`` (several sets), ``True`` = ablated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence, Union

import torch
from jaxtyping import Bool
from torch import Tensor

__all__ = ["Head", "HeadSet", "HeadsLike", "masks_from_head_sets", "head_sets_from_masks"]

_HEAD_RE = re.compile(r"^\s*(?:L\s*(\d+)\s*H\s*(\d+)|(\d+)\s*[.:]\s*(\d+))\s*$", re.IGNORECASE)
_EMPTY_TEXT = "intact"


@dataclass(frozen=True, order=True)
class Head:
    """One attention head: ``layer`` and ``head`` index, both 0-based."""

    layer: int
    head: int

    def __post_init__(self) -> None:
        for name in ("layer", "head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Head.{name} must be an int, got {value!r}")
            if value < 0:
                raise ValueError(f"Head.{name} must be >= 0, got {value}")

    @classmethod
    def parse(cls, obj: Union["Head", str, Sequence[int]]) -> "Head":
        """Read a head from ``"L12H3"``, ``"12.3"``, ``(12, 3)`` or a :class:`Head`."""
        if isinstance(obj, Head):
            return obj
        if isinstance(obj, str):
            match = _HEAD_RE.match(obj)
            if match is None:
                raise ValueError(f"cannot parse head {obj!r}: expected 'L12H3', '12.3' or (12, 3)")
            groups = [g for g in match.groups() if g is not None]
            return cls(int(groups[0]), int(groups[1]))
        if isinstance(obj, (tuple, list)) and len(obj) == 2:
            layer, head = (x.item() if hasattr(x, "item") else x for x in obj)
            try:
                return cls(layer, head)
            except TypeError as err:  # user input: report as a value problem
                raise ValueError(f"cannot parse head {obj!r}: {err}") from err
        raise ValueError(f"cannot parse head {obj!r}: expected 'L12H3', '12.3' or (12, 3)")

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"


HeadsLike = Union["HeadSet", Head, str, Iterable[Union[Head, str, Sequence[int]]], None]


class HeadSet:
    """An immutable, hashable, sorted set of heads; ``str()`` gives the canonical text ``L3H1+L12H7``."""

    __slots__ = ("_heads",)

    def __init__(self, heads: Iterable[Union[Head, str, Sequence[int]]] = ()) -> None:
        object.__setattr__(self, "_heads", tuple(sorted({Head.parse(h) for h in heads})))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("HeadSet is immutable")

    def __reduce__(self) -> tuple:
        # pickle/copy would restore the slot through __setattr__, which refuses.
        return (HeadSet, (self._heads,))

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, obj: HeadsLike) -> "HeadSet":
        """Read a head set from text (``"L3H1+L12H7"``, ``"3.1, 12.7"``, ``"intact"``/``""`` for none),
        a single head, or an iterable of heads/tuples/strings."""
        if obj is None:
            return cls()
        if isinstance(obj, HeadSet):
            return obj
        if isinstance(obj, Head):
            return cls([obj])
        if isinstance(obj, str):
            text = obj.strip()
            if text.lower() in ("", _EMPTY_TEXT, "none", "{}"):
                return cls()
            parts = [p for p in re.split(r"[+,;\s]+", text) if p.strip()]
            # "12.3" survives the split; "L1H2 + L3H4" and "1.2,3.4" split into heads.
            return cls(Head.parse(p) for p in parts)
        if isinstance(obj, tuple) and len(obj) == 2 and all(isinstance(x, int) for x in obj):
            return cls([Head(*obj)])
        return cls(obj)  # iterable of head-likes

    @classmethod
    def from_mask(cls, mask: Bool[Tensor, "layer head"]) -> "HeadSet":
        """The heads marked ``True`` in a ``[layer, head]`` mask."""
        if mask.ndim != 2:
            raise ValueError(f"expected a [layer, head] mask, got shape {tuple(mask.shape)}")
        return cls(Head(int(l), int(h)) for l, h in mask.nonzero().tolist())

    # -- views ----------------------------------------------------------------------------------
    @property
    def heads(self) -> tuple[Head, ...]:
        """The heads, sorted by layer then head."""
        return self._heads

    @property
    def layers(self) -> tuple[int, ...]:
        """Distinct layers that hold an ablated head, ascending."""
        return tuple(sorted({h.layer for h in self._heads}))

    @property
    def first_layer(self) -> int | None:
        """Lowest layer with an ablated head (``None`` for the empty set): where a resumed pass starts."""
        return self._heads[0].layer if self._heads else None

    def layers_run(self, n_layers: int) -> int:
        """Layers a pass runs when it resumes at the first ablated layer from a stored residual stream
        (all ``n_layers`` for the empty set, the intact model): what an evaluation of this set costs."""
        return n_layers - (self.first_layer or 0)

    def to_mask(self, n_layers: int, n_heads: int) -> Bool[Tensor, "layer head"]:
        """Boolean ``[layer, head]`` mask, ``True`` for ablated heads."""
        self.validate(n_layers, n_heads)
        mask = torch.zeros(n_layers, n_heads, dtype=torch.bool)
        for h in self._heads:
            mask[h.layer, h.head] = True
        return mask

    def validate(self, n_layers: int, n_heads: int, model_name: str = "the model") -> "HeadSet":
        """Raise ``ValueError`` naming the valid ranges if any head lies outside the model."""
        bad = [h for h in self._heads if h.layer >= n_layers or h.head >= n_heads]
        if bad:
            raise ValueError(
                f"head(s) {', '.join(map(str, bad))} out of range for {model_name}: "
                f"layers 0..{n_layers - 1}, heads 0..{n_heads - 1}"
            )
        return self

    def union(self, other: HeadsLike) -> "HeadSet":
        """The heads of both sets."""
        return HeadSet(self._heads + HeadSet.parse(other)._heads)

    # -- protocol ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Head]:
        return iter(self._heads)

    def __len__(self) -> int:
        return len(self._heads)

    def __contains__(self, item: object) -> bool:
        try:
            return Head.parse(item) in self._heads  # type: ignore[arg-type]
        except (ValueError, TypeError):
            return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HeadSet):
            return self._heads == other._heads
        return NotImplemented

    def __lt__(self, other: "HeadSet") -> bool:
        return (len(self), self._heads) < (len(other), other._heads)

    def __hash__(self) -> int:
        return hash(self._heads)

    def __str__(self) -> str:
        return "+".join(map(str, self._heads)) if self._heads else _EMPTY_TEXT

    def __repr__(self) -> str:
        return f"HeadSet('{self}')"

    def __bool__(self) -> bool:
        return bool(self._heads)


def masks_from_head_sets(
    head_sets: Sequence[HeadsLike], n_layers: int, n_heads: int
) -> Bool[Tensor, "variant layer head"]:
    """Stack the masks of several head sets into ``[variant, layer, head]``."""
    if len(head_sets) == 0:
        return torch.zeros(0, n_layers, n_heads, dtype=torch.bool)
    return torch.stack([HeadSet.parse(s).to_mask(n_layers, n_heads) for s in head_sets])


def head_sets_from_masks(masks: Bool[Tensor, "variant layer head"]) -> list[HeadSet]:
    """Inverse of :func:`masks_from_head_sets`."""
    if masks.ndim != 3:
        raise ValueError(f"expected [variant, layer, head] masks, got shape {tuple(masks.shape)}")
    return [HeadSet.from_mask(m) for m in masks]

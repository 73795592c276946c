"""Which float32 re-checks run together: head sets grouped so that few evaluations recompute
what bf16 marked, at no more than a bounded multiple of the marked work."""

from __future__ import annotations

from jaxtyping import Bool
from torch import Tensor

__all__ = ["recompute_groups"]


def recompute_groups(redo: Bool[Tensor, "variant example"], slack: float = 2.0) -> list[tuple[list[int], list[int]]]:
    """Variants whose marked examples are recomputed together, with the union of those examples:
    a variant joins the current group while the group's cost (variants x union) stays within
    ``slack`` times the decisions its members mark, so few evaluations recompute at most ``slack``
    times what is needed."""
    groups: list[tuple[list[int], list[int]]] = []
    members: list[int] = []
    union: set[int] = set()
    needed = 0
    for v in range(redo.shape[0]):
        own = set(redo[v].nonzero()[:, 0].tolist())
        if not own:
            continue
        joined = union | own
        if members and (len(members) + 1) * len(joined) > slack * (needed + len(own)):
            groups.append((members, sorted(union)))
            members, union, needed = [], set(), 0
            joined = own
        members.append(v)
        union = joined
        needed += len(own)
    if members:
        groups.append((members, sorted(union)))
    return groups

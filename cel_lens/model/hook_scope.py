"""Hooks that belong to one pass of one thread: two searches on one model in two threads never see
each other's hooks.

TransformerLens keeps hooks on the model's hook points, shared by every thread, and
``model.hooks()`` numbers its contexts with one counter on the model (a thread leaving its block
can remove another's hooks). :func:`scoped_hooks` instead registers each hook under a level of its
own, wrapped so that it acts only in the thread that registered it (a pass of another thread runs
as if it were absent), and removes exactly those. :func:`foreign_hooks` counts, per hook point, the
hooks other threads hold, so the fused stack's check that no other point is hooked ignores them.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import Counter
from typing import Any, Callable, Iterator, Sequence

__all__ = ["scoped_hooks", "foreign_hooks", "owned"]

_LOCK = threading.Lock()
_LEVELS = itertools.count(1 << 30)  # far above any level TransformerLens's own contexts reach
_HELD: dict[int, Counter] = {}  # id(hook point) -> hooks held there, per thread id


def owned(fn: Callable, owner: int) -> Callable:
    """``fn`` acting only in thread ``owner``: elsewhere it returns ``None`` (leaves the activation)."""

    def hook(x: Any, hook: Any = None) -> Any:
        if threading.get_ident() != owner:
            return None
        return fn(x, hook=hook)

    return hook


def foreign_hooks(point: Any) -> int:
    """How many forward hooks other threads hold on ``point`` through :func:`scoped_hooks`."""
    me = threading.get_ident()
    with _LOCK:
        held = _HELD.get(id(point))
        return 0 if not held else sum(n for owner, n in held.items() if owner != me)


@contextlib.contextmanager
def scoped_hooks(model: Any, hooks: Sequence[tuple[Any, Callable]]) -> Iterator[None]:
    """Within the block, ``hooks`` (``(hook point name, fn)``; a name may be a predicate on names,
    as in TransformerLens) fire for passes of the calling thread only; on exit exactly these are removed."""
    if not hooks:
        yield
        return
    me = threading.get_ident()
    points: list[Any] = []
    with _LOCK:
        level = next(_LEVELS)
        for name, fn in hooks:
            names = [name] if isinstance(name, str) else [n for n in model.hook_dict if name(n)]
            for n in names:
                point = model.hook_dict[n]
                point.add_hook(owned(fn, me), dir="fwd", level=level)
                _HELD.setdefault(id(point), Counter())[me] += 1
                points.append(point)
    try:
        yield
    finally:
        with _LOCK:
            for point in points:
                point.remove_hooks("fwd", level=level)
                held = _HELD[id(point)]
                held[me] -= 1
                if held[me] <= 0:
                    del held[me]
                if not held:
                    del _HELD[id(point)]

"""The one form of every table that grows: ``name -> "module:attribute"``, imported when first asked for.

The option tables (scorers, strategies, parsimony rules, interval methods, backends, ablation
kinds, loaders, precisions, BOS rules, rank rules: :mod:`cel_lens.config.options`), the tasks
(:data:`cel_lens.tasks.registry.TASKS`: each entry a task's ``TaskSpec``, loader and info), the
answer types (:data:`cel_lens.tasks.answer_types.ANSWER_TYPES`: each entry an ``AnswerTypeEntry``),
the named models (:data:`cel_lens.model.registry.MODELS`) and the model sources
(:mod:`cel_lens.model.sources`) are each a
:class:`Registry`: a ``dict`` of entry name -> ``"module:attribute"``, where the module is imported
only when the entry is resolved (:meth:`Registry.resolve`), so an optional backend (Ray) or a
scorer's dependencies cost nothing until used, and ``cel-lens --help`` needs no torch. Adding an
entry is one line in its table (or ``table["name"] = "my_module:MyClass"`` at run time); code that
already holds the object (:func:`cel_lens.tasks.register_task`) may add it as it is, an entry
with nothing to import.

What an entry *is* (a scorer's unit, an ablation kind's export rule) lives on the class or function
it names, never in code that tests its name; ``tests/test_registry_names.py`` holds that.

This module imports nothing of cel_lens (it is the bottom of the layering).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Mapping, Optional, Union

__all__ = ["Registry", "UnknownEntry", "resolve_target", "split_target"]


class UnknownEntry(ValueError):
    """A name that is not in a registry: the message names the entries it holds."""


def split_target(target: str) -> tuple[str, str]:
    """``"module:attribute"`` as ``(module, attribute)``; ``ValueError`` for any other form."""
    module, sep, attribute = str(target).partition(":")
    if not sep or not module or not attribute or ":" in attribute:
        raise ValueError(f"a registry entry is 'module:attribute', got {target!r}")
    return module, attribute


def resolve_target(target: str, what: str = "entry") -> Any:
    """The attribute a ``"module:attribute"`` string names, its module imported now. An
    ``ImportError`` of a missing optional dependency passes through unchanged; an attribute the
    module lacks is an ``AttributeError`` naming ``target``."""
    module, attribute = split_target(target)
    loaded = importlib.import_module(module)
    try:
        return getattr(loaded, attribute)
    except AttributeError:
        raise AttributeError(f"{what} {target!r}: module {module!r} has no attribute {attribute!r}") from None


class Registry(dict):
    """Entry name -> ``"module:attribute"`` (a plain ``dict``, in order), named ``what``
    (``"scorer"``, ``"ablation kind"``) for its messages. An entry added at run time may be the
    object itself (anything but a string): :meth:`resolve` returns it as it is.

    ``name in table``, ``list(table)`` and ``table[name] = "module:Class"`` work as on any dict;
    :meth:`resolve` imports what a name points to. An entry's form is checked when it is added."""

    def __init__(self, what: str, entries: Union[Mapping[str, str], Iterable[tuple[str, str]]] = ()) -> None:
        super().__init__()
        self.what = what
        for name, target in dict(entries).items():
            self[name] = target

    def __setitem__(self, name: str, target: Any) -> None:
        if isinstance(target, str):
            split_target(target)
        super().__setitem__(name, target)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, dict(self)))

    def unknown(self, name: Any, hint: str = "") -> UnknownEntry:
        """The error for ``name`` not being an entry: ``unknown scorer 'x'; choose one of a, b``."""
        return UnknownEntry(f"unknown {self.what} {name!r}; choose one of {', '.join(self)}{hint}")

    def check(self, name: Any) -> str:
        """``name`` when it is an entry, else :class:`UnknownEntry` naming the entries."""
        if not isinstance(name, str) or name not in self:
            raise self.unknown(name)
        return name

    def resolve(self, name: Any) -> Any:
        """What entry ``name`` points to (its module imported now); :class:`UnknownEntry` (a
        ``ValueError``) naming the entries for a name not in the table."""
        target = self[self.check(name)]
        return resolve_target(target, f"{self.what} {name!r}") if isinstance(target, str) else target

    def get_resolved(self, name: Any, default: Optional[Any] = None) -> Any:
        """:meth:`resolve`, or ``default`` for a name not in the table (a name an old run recorded
        that is no longer registered)."""
        return self.resolve(name) if isinstance(name, str) and name in self else default

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {dict.__repr__(self)})"

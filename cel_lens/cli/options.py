"""Command-line flags generated from the fields of :class:`~cel_lens.config.SearchConfig` and
:class:`~cel_lens.config.ExecutionSettings`: help, default, choices and validation are written
once, on the field (its ``metadata``), and every subcommand that takes the option gets the same flag.

A field ``pool_size`` becomes ``--pool-size`` unless :data:`FLAGS` names
another flag (``--pool``). A ``bool`` field that defaults to True becomes ``--no-<name>`` (its help
says what the flag does: ``--no-store``); one that defaults to False, ``--<name>``. A field with
``"choices"`` in its metadata gets them (a registry table: what is registered when the parser is
built); one with ``"unit": (name, scale)`` is given in that unit (``--store-budget-mb``). Values are
checked by the dataclass's ``validate`` (:func:`config_from_args`, :func:`settings_from_args`), so
a bad one fails in one line naming its flag.
"""

from __future__ import annotations

import argparse
import math

from dataclasses import MISSING, Field, fields
from typing import Any, Iterable, Mapping, Optional

from cel_lens.config import ExecutionSettings, OptionError, SearchConfig

__all__ = ["FLAGS", "flag_of", "add_fields", "values_from_args", "config_from_args", "settings_from_args", "LOAD_FIELDS",
           "RUN_FIELDS"]

FLAGS: dict[str, str] = {
    "pool_size": "--pool",
    "store_budget": "--store-budget-mb",
    "ray_address": "--address",
    "use_store": "--no-store",
    "progress": "--no-progress",
}
"""Option field name -> its command-line flag, where the two differ (else ``--`` + the dashed name,
``--no-`` first for a ``bool`` that defaults to True)."""


LOAD_FIELDS = ("device", "dtype", "loader", "bos", "batch_size")
"""Execution settings that say how a model given by name is loaded and run."""
RUN_FIELDS = ("use_store", "store_budget", "backend", "ray_address", "workers", "gpus_per_worker")
"""Execution settings of a search's evaluations (activation store, backend)."""


def flag_of(f: Field) -> str:
    """The command-line flag of a config field."""
    if f.name in FLAGS:
        return FLAGS[f.name]
    dashed = f.name.replace("_", "-")
    return f"--no-{dashed}" if f.default is True else f"--{dashed}"


def _type(f: Field) -> type:
    """The Python type a flag's value is read as, from the field's annotation."""
    if "unit" in f.metadata:
        return float
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    for name, kind in (("bool", bool), ("int", int), ("float", float)):
        if name in text:
            return kind
    return str


def add_fields(
    p: argparse.ArgumentParser, cls: type, names: Optional[Iterable[str]] = None, *,
    defaults: Optional[Mapping[str, Any]] = None, help_suffix: Optional[Mapping[str, str]] = None,
) -> None:
    """Declare one flag per field of ``cls`` (``names``: only those, in that order), from the
    field's help and default (``defaults`` overrides a default, e.g. ``None`` for a preset to fill;
    ``help_suffix`` appends to a help text)."""
    by_name = {f.name: f for f in fields(cls)}
    for name in names if names is not None else list(by_name):
        f = by_name[name]
        default = (defaults or {}).get(name, f.default if f.default is not MISSING else None)
        text = f.metadata.get("help", "") + (help_suffix or {}).get(name, "")
        kind = _type(f)
        if kind is bool:
            action = "store_false" if f.default is True else "store_true"
            p.add_argument(flag_of(f), dest=name, action=action, default=f.default, help=text)
            continue
        if "unit" in f.metadata and default is not None:
            default = default / f.metadata["unit"][1]
        choices = f.metadata.get("choices")
        extra = {"choices": list(choices)} if choices is not None else {"metavar": flag_of(f)[2:].replace("-", "_").upper()}
        p.add_argument(flag_of(f), dest=name, type=kind, default=default, help=text, **extra)


def values_from_args(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``cls`` the parsed ``args`` carry, converted back from their flag's unit."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if "unit" in f.metadata and value is not None:
            unit, scale = f.metadata["unit"]
            if not 0 <= value < math.inf:
                raise OptionError(f.name, f"{f.name} must be a number of {unit} >= 0, got {value}")
            value = round(value * scale)
        out[f.name] = value
    return out


def config_from_args(args: argparse.Namespace, **overrides: Any) -> SearchConfig:
    """The checked :class:`~cel_lens.config.SearchConfig` of the parsed flags."""
    return SearchConfig(**{**values_from_args(SearchConfig, args), **overrides}).validate()


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> ExecutionSettings:
    """The checked :class:`~cel_lens.config.ExecutionSettings` of the parsed flags."""
    return ExecutionSettings(**{**values_from_args(ExecutionSettings, args), **overrides}).validate()




"""Rows of task data that know where they came from, and the checks that turn them into examples.

A row that cannot become an example (a missing field, a field of the wrong type, a line that is
not a JSON object) is one :class:`RowError` naming its file and line, never a bare ``KeyError``
or ``TypeError`` from deep inside a task's loader: :func:`build_examples` runs a task's
``make_example`` over :class:`Rows` (what :func:`cel_lens.tasks.io.read_jsonl` returns), and
:func:`require` checks one field.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

__all__ = ["RowError", "Rows", "require", "build_examples"]

T = TypeVar("T")


class RowError(ValueError):
    """A data row that cannot become an example; the message names its file and line."""


class Rows(list):
    """Rows of one data file (or hub split) that know where each came from: ``source`` (a path or a
    hub id and split) and, for files, each row's 1-based ``lines``."""

    def __init__(self, rows: Iterable[Any] = (), source: str = "", lines: Optional[Sequence[int]] = None) -> None:
        super().__init__(rows)
        self.source = source
        self.lines = None if lines is None else list(lines)

    def where(self, index: int) -> str:
        """``path:line`` of row ``index`` (``hub-id split row i`` for hub rows)."""
        if self.lines is not None and 0 <= index < len(self.lines):
            return f"{self.source}:{self.lines[index]}"
        return f"{self.source or 'data'} row {index}"


_JSON_TYPES = ((bool, "a boolean"), (str, "a string"), (int, "an integer"), (float, "a number"),
               (list, "a list"), (dict, "an object"), (type(None), "null"))


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def require(row: Mapping[str, Any], name: str, kind: Union[type, tuple[type, ...]], *, optional: bool = False) -> Any:
    """``row[name]``, checked to be a ``kind`` (``bool`` is not an ``int`` here); :class:`RowError`
    naming the field otherwise. ``optional``: a missing or null field is ``None``."""
    if name not in row or (optional and row[name] is None):
        if optional:
            return None
        raise RowError(f"missing field {name!r}")
    value = row[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        expected = " or ".join(dict((k, n) for k, n in _JSON_TYPES).get(k, k.__name__) for k in kinds)
        raise RowError(f"field {name!r} must be {expected}, got {_json_type(value)} {value!r:.60}")
    return value


def build_examples(rows: Sequence[Any], make: Callable[[Mapping[str, Any], int], T]) -> list[T]:
    """``make(row, index)`` for every row; a row that is not a JSON object, lacks a field or has
    one of the wrong type is one :class:`RowError` naming its file and line (see :class:`Rows`)."""
    out = []
    for i, row in enumerate(rows):
        where = rows.where(i) if isinstance(rows, Rows) else f"row {i}"
        try:
            if not isinstance(row, Mapping):
                raise RowError(f"the row is {_json_type(row)}, not a JSON object")
            out.append(make(row, i))
        except KeyError as err:
            raise RowError(f"{where}: missing field {err.args[0]!r}") from None
        except (RowError, TypeError, ValueError, AttributeError) as err:
            raise RowError(f"{where}: {err}") from None
    return out

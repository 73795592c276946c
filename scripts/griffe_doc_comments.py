"""A Griffe extension for the API reference: a module attribute documented by ``#:`` comment lines
right above it (Sphinx's form, used across cel_lens) gets them as its docstring, so mkdocstrings
renders it and the site's missing-docstring check counts it as documented."""

from __future__ import annotations

from typing import Any

import griffe


def doc_comment(lines: list[str], lineno: int) -> str:
    """The ``#:`` lines directly above line ``lineno`` (1-based), joined; ``""`` when there are none."""
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        found.append(lines[i].lstrip()[2:].strip())
        i -= 1
    return " ".join(reversed(found))


class DocComments(griffe.Extension):
    """Set an undocumented attribute's docstring from its ``#:`` comment."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None or attr.filepath is None:
            return
        try:
            lines = attr.lines_collection[attr.filepath]
        except KeyError:
            return
        text = doc_comment(lines, attr.lineno)
        if text:
            attr.docstring = griffe.Docstring(text, lineno=attr.lineno - 1, parent=attr)

"""A Griffe extension for the API reference, for the Sphinx forms cel_lens's docstrings use: a module
attribute documented by ``#:`` comment lines right above it gets them as its docstring (so mkdocstrings
renders it and the site's missing-docstring check counts it), and a cross-reference role
(``:func:`~cel_lens.x.f` ``) becomes a code span of the name it shows (``f``), since Markdown has no roles."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|obj|exc|const):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """Sphinx roles as Markdown code spans: ``:func:`~a.b` `` -> `` `b` ``, ``:mod:`a.b` `` -> `` `a.b` ``."""
    return ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


def doc_comment(lines: list[str], lineno: int) -> str:
    """The ``#:`` lines directly above line ``lineno`` (1-based), joined; ``""`` when there are none."""
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        found.append(lines[i].lstrip()[2:].strip())
        i -= 1
    return " ".join(reversed(found))


class DocComments(griffe.Extension):
    """Set an undocumented attribute's docstring from its ``#:`` comment; turn roles into code spans."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None or attr.filepath is None:
            return
        try:
            lines = attr.lines_collection[attr.filepath]
        except KeyError:
            return
        text = doc_comment(lines, attr.lineno)
        if text:
            attr.docstring = griffe.Docstring(plain_roles(text), lineno=attr.lineno - 1, parent=attr)

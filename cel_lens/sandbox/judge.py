"""Split each test (an ``assert``) into what the program computes and what the sandbox checks.

A test such as ``assert abs(area(2) - 12.56) < 0.01`` names something of the program (``area``)
and things of Python (``abs``, ``-``, ``<``). The program-dependent sub-expressions are its
**holes**: the largest sub-expressions that name something of the program and are not one of
the operations the supervisor can finish on plain data itself (comparisons, boolean and
arithmetic operators, literals, subscripts, calls of built-in functions and of a few standard
modules). Here the one hole is ``area(2)``; the **remainder** ``abs(__hole__(0) - 12.56) < 0.01``
is evaluated by the supervisor, a process that never runs the program's code, on the value that
the program's process sent back as plain data (:mod:`cel_lens.sandbox.codec`).

A name refers to the program unless it is a built-in or one of :data:`TRUSTED_MODULES`; a
built-in name listed in ``entry_points`` refers to the program too (MBPP task 126 asks for a
function called ``sum``). Patching ``builtins`` or ``math`` in the program therefore changes
nothing the supervisor computes. Consequence, by design: whatever the program controls enters the
verdict only as the *value* of a hole, so a test passes only if those values satisfy it (a
program can always return the expected values, as a table of answers would; it cannot make a
wrong value compare equal, skip an assert, or report a pass).

This module runs in the parent (the tests are the caller's, not the program's).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Iterable

__all__ = ["HOLE", "TRUSTED_MODULES", "Check", "split_test", "split_tests"]

HOLE = "__hole__"
"""The name of the supervisor's function that fetches a hole's value in the remainder."""

TRUSTED_MODULES = frozenset(
    {"math", "cmath", "re", "string", "operator", "itertools", "functools", "collections",
     "heapq", "bisect"}
)
"""Standard modules a test may use; the supervisor evaluates them itself (never the program's)."""

# nodes the supervisor evaluates itself, recursing into their parts
_RECURSE = (
    ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set,
    ast.Dict, ast.Subscript, ast.Slice, ast.Starred, ast.JoinedStr, ast.FormattedValue, ast.keyword,
)


@dataclass(frozen=True)
class Check:
    """One test, split: ``source`` as written, the supervisor's ``remainder`` expression, and the
    ``holes`` (expressions the program's process evaluates) numbered from ``first_hole``."""

    source: str
    remainder: str
    holes: tuple[str, ...]
    first_hole: int
    modules: tuple[str, ...] = ()
    """The :data:`TRUSTED_MODULES` the remainder uses (the supervisor imports them)."""


def split_test(source: str, entry_points: Iterable[str] = (), first_hole: int = 0) -> Check:
    """Split one test, which must be a single ``assert`` statement (its message is ignored)."""
    try:
        module = ast.parse(source.strip(), mode="exec")
    except SyntaxError as exc:
        raise ValueError(f"a test does not parse: {source!r} ({exc.msg})") from None
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
        raise ValueError(f"a test must be one assert statement, got {source!r}")
    expr = module.body[0].test
    splitter = _Splitter(_program_names(expr, set(entry_points)), first_hole)
    remainder = splitter.visit(expr)
    modules = sorted({n.id for n in ast.walk(remainder) if isinstance(n, ast.Name)} & TRUSTED_MODULES)
    return Check(source.strip(), ast.unparse(remainder), tuple(splitter.holes), first_hole, tuple(modules))


def split_tests(sources: Iterable[str], entry_points: Iterable[str] = ()) -> tuple[Check, ...]:
    """Split every test; holes are numbered across all of them."""
    entry = tuple(entry_points)
    checks: list[Check] = []
    n = 0
    for source in sources:
        check = split_test(source, entry, n)
        checks.append(check)
        n += len(check.holes)
    return tuple(checks)


def _program_names(expr: ast.expr, entry_points: set[str]) -> set[str]:
    """The names in ``expr`` that refer to the program."""
    bound: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Lambda):
            bound.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
        elif isinstance(node, ast.comprehension):
            bound.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - bound
    return {n for n in names if n in entry_points or not (hasattr(builtins, n) or n in TRUSTED_MODULES)}


class _Splitter(ast.NodeTransformer):
    """Replaces every hole by ``__hole__(k)`` and records its source."""

    def __init__(self, program_names: set[str], first_hole: int) -> None:
        self.program_names = program_names
        self.first_hole = first_hole
        self.holes: list[str] = []

    def depends(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.program_names for n in ast.walk(node))

    def visit(self, node: ast.AST) -> ast.AST:
        if not self.depends(node):
            return node
        if isinstance(node, _RECURSE) or (isinstance(node, ast.Call) and not self.depends(node.func)):
            return self.generic_visit(node)
        # anything else (a call of the program, an attribute of its value, a comprehension or
        # lambda over its names) is a hole as a whole
        k = self.first_hole + len(self.holes)
        self.holes.append(ast.unparse(node))
        return ast.copy_location(ast.Call(ast.Name(HOLE, ast.Load()), [ast.Constant(k)], []), node)

"""Split each test (an ``assert``) into what the program computes and what the sandbox checks.

A test such as ``assert abs(area(2) - 12.56) < 0.01`` names something of the program (``area``)
and things of Python (``abs``, ``-``, ``<``). The program's **holes** are of two shapes only: a
call of one of its names (``area(2)``; the arguments are the test's inputs) and one of its names
used as a value (``root``). The program's process evaluates a hole and sends its value back as
plain data (:mod:`cel_lens.sandbox.codec`); everything else, the **remainder**
``abs(__hole__(0) - 12.56) < 0.01``, is evaluated by the supervisor, a process that never runs the
program's code: comparisons, boolean and arithmetic operators, literals, subscripts, calls of
built-ins and of :data:`TRUSTED_MODULES`, attributes and methods of a value (``f(1).strip()`` is
``str.strip`` of the decoded string), comprehensions, generator expressions and lambdas (their
iterables are holes). What fits neither, such as a call of the program that uses the test's own
comprehension variable (``all(g(x) for x in range(3))``) or an attribute of a name of the program
(``obj.method(1)``), is refused with :class:`CannotJudge` before anything runs.

A name refers to the program unless it is a built-in or one of :data:`TRUSTED_MODULES`; a
built-in name listed in ``entry_points`` refers to the program too (MBPP task 126 asks for a
function called ``sum``). Patching ``builtins``, ``math`` or ``sys`` in the program therefore
changes nothing the supervisor computes. Consequence, by design: whatever the program controls
enters the verdict only as the *value* of a hole, so a test passes only if those values satisfy it
(a program can always return the expected values, as a table of answers would; it cannot make a
wrong value compare equal, skip an assert, or report a pass).

This module runs in the parent (the tests are the caller's, not the program's).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Iterable

__all__ = ["HOLE", "TRUSTED_MODULES", "CannotJudge", "Check", "split_test", "split_tests"]

HOLE = "__hole__"
"""The name of the supervisor's function that fetches a hole's value in the remainder."""

TRUSTED_MODULES = frozenset(
    {"math", "cmath", "re", "string", "operator", "itertools", "functools", "collections",
     "heapq", "bisect", "sys"}
)
"""Standard modules a test may use; the supervisor evaluates them itself (never the program's)."""

# nodes the supervisor evaluates itself, recursing into their parts (an attribute or a call only
# when what it is taken of is not a name of the program: ``f(1).strip()`` is str.strip of f(1))
_RECURSE = (
    ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set,
    ast.Dict, ast.Subscript, ast.Slice, ast.Starred, ast.JoinedStr, ast.FormattedValue, ast.keyword,
    ast.Attribute, ast.Call, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
    ast.comprehension, ast.Lambda, ast.arguments, ast.arg,
)
_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


class CannotJudge(ValueError):
    """A test of a shape the supervisor cannot judge on plain data (the message says which part):
    refused before anything runs, never judged "passed"."""


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
    """Split one test, which must be a single ``assert`` statement (its message is ignored).

    Raises ``ValueError`` for anything else, and :class:`CannotJudge` for an assert whose
    program-dependent parts are not all holes of the two judged shapes (see the module docstring).
    """
    try:
        module = ast.parse(source.strip(), mode="exec")
    except SyntaxError as exc:
        raise ValueError(f"a test does not parse: {source!r} ({exc.msg})") from None
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
        raise ValueError(f"a test must be one assert statement, got {source!r}")
    expr = module.body[0].test
    splitter = _Splitter(_program_names(expr, set(entry_points)), first_hole, source.strip())
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


def _bound_by(node: ast.AST) -> set[str]:
    """The names a comprehension's targets or a lambda's parameters bind."""
    if isinstance(node, ast.Lambda):
        return {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}  # type: ignore[attr-defined]


def _program_names(expr: ast.expr, entry_points: set[str]) -> set[str]:
    """The names in ``expr`` that refer to the program."""
    bound: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, _SCOPES):
            bound |= _bound_by(node)
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - bound
    return {n for n in names if n in entry_points or not (hasattr(builtins, n) or n in TRUSTED_MODULES)}


class _Splitter(ast.NodeTransformer):
    """Replaces every hole by ``__hole__(k)`` and records its source; refuses any other
    program-dependent part (:class:`CannotJudge`)."""

    def __init__(self, program_names: set[str], first_hole: int, source: str) -> None:
        self.program_names = program_names
        self.first_hole = first_hole
        self.source = source
        self.holes: list[str] = []
        self.bound: list[set[str]] = []  # names bound by the comprehensions and lambdas around

    def depends(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.program_names for n in ast.walk(node))

    def refuse(self, node: ast.AST, why: str) -> CannotJudge:
        return CannotJudge(f"cannot judge the test {self.source!r}: {ast.unparse(node)!r} {why}")

    def visit(self, node: ast.AST) -> ast.AST:
        if not self.depends(node):
            return node
        program_name = isinstance(node, ast.Name)
        program_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.program_names
        if program_name or program_call:
            return self.hole(node)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.program_names:
            raise self.refuse(node, "is an attribute of a name of the program (only its calls and values are judged)")
        if not isinstance(node, _RECURSE):
            raise self.refuse(node, "is not one of the expressions the supervisor evaluates on plain data")
        if isinstance(node, _SCOPES):
            self.bound.append(_bound_by(node))
            try:
                return self.generic_visit(node)
            finally:
                self.bound.pop()
        return self.generic_visit(node)

    def hole(self, node: ast.AST) -> ast.AST:
        """``node`` (a call of the program, or one of its names) becomes ``__hole__(k)``."""
        inner = set().union(*self.bound) if self.bound else set()
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & inner
        if used:
            raise self.refuse(node, f"uses {', '.join(sorted(used))}, a variable of the test's own "
                                    "comprehension or lambda, which the program's process cannot see")
        k = self.first_hole + len(self.holes)
        self.holes.append(ast.unparse(node))
        return ast.copy_location(ast.Call(ast.Name(HOLE, ast.Load()), [ast.Constant(k)], []), node)

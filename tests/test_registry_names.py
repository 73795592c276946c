"""No code outside a registry's entries tests an entry's name.

What a scorer, an ablation kind, a backend, a task, a model source or an answer type *is* lives on
the class, function or object its registry entry names (a scorer's unit, a kind's export rule, a
backend's ``in_process``, an answer type's ``scores_choices``); code elsewhere reads that, so a new entry needs no edit anywhere else. This test
parses every module of ``cel_lens/`` and fails naming ``file:line`` for any comparison (``==``,
``!=``, ``is``, ``in (...)``, ``case``) of a string literal that is an entry name of
:data:`REGISTRIES`, and for the same test written in a JavaScript string (``=== 'exact'``). An
entry's own module (the file its ``"module:attribute"`` names) may compare its registry's names:
it is the entry.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cel_lens.config import ABLATION_KINDS, BACKENDS, SCORERS
from cel_lens.model.sources import MODEL_SOURCES
from cel_lens.registry import Registry, split_target
from cel_lens.tasks.answer_types import ANSWER_TYPES
from cel_lens.tasks.registry import BUILTIN_TASKS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cel_lens"

REGISTRIES: dict[str, Registry] = {
    "SCORERS": SCORERS, "ABLATION_KINDS": ABLATION_KINDS, "BACKENDS": BACKENDS,
    "BUILTIN_TASKS": BUILTIN_TASKS, "MODEL_SOURCES": MODEL_SOURCES, "ANSWER_TYPES": ANSWER_TYPES,
}


def _module_file(module: str) -> Path:
    """The file of a dotted ``cel_lens`` module (a package: its ``__init__.py``)."""
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _names_by_file() -> dict[Path, set[str]]:
    """Each ``cel_lens`` file -> the entry names it may not compare against (every registry's names
    but those of the registries one of whose entries it is)."""
    names = {table: set(registry) for table, registry in REGISTRIES.items()}
    everything = set().union(*names.values())
    own: dict[Path, set[str]] = {}
    for table, registry in REGISTRIES.items():
        for target in registry.values():
            own.setdefault(_module_file(split_target(target)[0]), set()).update(names[table])
    return {path: everything - own.get(path, set()) for path in sorted(PACKAGE.rglob("*.py"))}


def _literal_names(node: ast.AST) -> list[str]:
    """The string literals of a comparison operand: a constant, or the items of a tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for item in node.elts for s in _literal_names(item) if isinstance(item, ast.Constant)]
    return []


def name_tests(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` for every test of a string in ``names`` in Python ``source`` (see the module
    docstring), JavaScript strings in it included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                sides = [right] if isinstance(op, (ast.In, ast.NotIn)) else [left, right]
                found += [(node.lineno, s) for side in sides for s in _literal_names(side) if s in names]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, s) for s in _literal_names(node.value) if s in names]
    if names:
        js = re.compile(r"[!=]==?\s*['\"](" + "|".join(map(re.escape, sorted(names))) + r")['\"]")
        for lineno, line in enumerate(source.splitlines(), 1):
            found += [(lineno, m.group(1)) for m in js.finditer(line) if (lineno, m.group(1)) not in found]
    return sorted(set(found))


def test_no_code_outside_a_registry_tests_an_entry_name():
    problems = [
        f"{path.relative_to(ROOT)}:{line}: tests the entry name {name!r} (read the entry's class instead)"
        for path, names in _names_by_file().items()
        for line, name in name_tests(path.read_text(encoding="utf-8"), names)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("code, hits", [
    ('if scorer == "racing": pass', [(1, "racing")]),
    ('x = "zero" != kind', [(1, "zero")]),
    ('ok = name in ("exact", "compressed")', [(1, "compressed"), (1, "exact")]),
    ('ok = name not in {"mean"}', [(1, "mean")]),
    ('match kind:\n    case "resample":\n        pass', [(2, "resample")]),
    ('JS = "const a = D.scorer === \'exact\';"', [(1, "exact")]),
    ('ok = options.get("scorer", "exact")', []),  # a default, not a test
    ('ok = kind == "exact_match"', []),  # another word
    ('ok = "zero" in text', []),  # a literal on the left of `in` is a search, not a name test
])
def test_the_check_sees_each_form_of_a_name_test(code, hits):
    assert name_tests(code, {"exact", "compressed", "racing", "zero", "mean", "resample"}) == hits


def test_answer_type_names_are_covered():
    """The answer-type names are checked everywhere but in the entries' own module."""
    names = _names_by_file()
    assert {"exact_match", "multiple_choice", "generation"} <= names[PACKAGE / "evaluation" / "evaluator.py"]
    assert "multiple_choice" not in names[PACKAGE / "tasks" / "answer_types.py"]
    js = 'JS = "const mc = row.answer_type === \'multiple_choice\';"'  # a JavaScript test in a Python string
    assert name_tests(js, names[PACKAGE / "report" / "heatmap.py"]) == [(1, "multiple_choice")]
    assert name_tests('if key.answer_type in ("exact_match", "generation"): pass', {"exact_match", "generation"}) == [
        (1, "exact_match"), (1, "generation")]


def test_an_entry_module_may_compare_its_own_registry_names():
    names = _names_by_file()
    prescreen = PACKAGE / "scoring" / "prescreen.py"
    assert "attribution" not in names[prescreen]  # a scorer module compares scorer names freely
    assert "zero" in names[prescreen] and "local" in names[prescreen]  # but no other registry's
    assert "exact" in names[PACKAGE / "config.py"] and "zero" in names[PACKAGE / "pipeline.py"]

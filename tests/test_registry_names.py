"""No code outside a registry's entries tests an entry's name.

What a scorer, an ablation kind, a backend, a task, a model source or an answer type *is* lives on
the class, function or object its registry entry names (a scorer's unit, a kind's export rule, a
backend's ``in_process``, an answer type's ``scores_choices``); code elsewhere reads that, so a new entry needs no edit anywhere else. This test
parses every module of ``cel_lens/`` and fails naming ``file:line`` for any comparison (``==``,
``!=``, ``is``, ``in (...)``, ``case``) of a string literal that is an entry name of
:data:`REGISTRIES`, and for the same test written in a JavaScript string (``=== 'exact'``). An
entry's own module (the file its ``"module:attribute"`` names) may compare its registry's names:
it is the entry.

Some entry names are also common words that code compares in other meanings (``"auto"`` threads, a
manifest field written ``"always"``, a dtype ``"float32"``): :data:`COMMON_WORDS` lists them per
registry, and a comparison of one counts only where its other side names the registry's subject
(``precision == "auto"`` is a name test, ``text in ("", "auto")`` is not). Every other name of
every registry counts wherever it is compared.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Mapping, Union

import pytest

from cel_lens.config import (
    ABLATION_KINDS, BACKENDS, BOS_RULES, CI_METHODS, LOADERS, PARSIMONY_RULES, PRECISIONS, RANK_RULES, SCORERS,
    STRATEGIES,
)
from cel_lens.model.registry import MODELS
from cel_lens.model.sources import MODEL_SOURCES
from cel_lens.registry import Registry, split_target
from cel_lens.tasks.answer_types import ANSWER_TYPES
from cel_lens.tasks.registry import TASKS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cel_lens"

REGISTRIES: dict[str, Registry] = {
    "SCORERS": SCORERS, "ABLATION_KINDS": ABLATION_KINDS, "BACKENDS": BACKENDS,
    "TASKS": TASKS, "MODEL_SOURCES": MODEL_SOURCES, "MODELS": MODELS, "ANSWER_TYPES": ANSWER_TYPES,
    "STRATEGIES": STRATEGIES, "PARSIMONY_RULES": PARSIMONY_RULES, "CI_METHODS": CI_METHODS,
    "LOADERS": LOADERS, "PRECISIONS": PRECISIONS, "BOS_RULES": BOS_RULES, "RANK_RULES": RANK_RULES,
}

COMMON_WORDS: dict[str, tuple[tuple[str, ...], str]] = {
    "PRECISIONS": (("auto", "float32"), r"prec"),
    "LOADERS": (("auto",), r"loader"),
    "BOS_RULES": (("always", "never"), r"bos|rule"),
    "PARSIMONY_RULES": (("best", "backward"), r"parsimony|rule"),
    "CI_METHODS": (("bootstrap",), r"ci_method|method|interval"),
    "RANK_RULES": (("raw", "calibrated"), r"rank"),
}
"""Registry -> (its names that are common words, the pattern the other side of a comparison of one
must match to count: the registry's subject, as code names it)."""


def _scopes(table: str) -> dict[str, str]:
    """Each name of registry ``table`` -> the subject pattern its comparisons must name (``""``: any)."""
    words, subject = COMMON_WORDS.get(table, ((), ""))
    return {name: (subject if name in words else "") for name in REGISTRIES[table]}


def _merge(names: dict[str, str], more: Mapping[str, str]) -> None:
    """Add ``more`` to ``names``; a name in both counts where either's subject is named (``""``: anywhere)."""
    for name, subject in more.items():
        known = names.get(name, subject)
        names[name] = f"{known}|{subject}" if known and subject and known != subject else (known and subject)


def _module_file(module: str) -> Path:
    """The file of a dotted ``cel_lens`` module (a package: its ``__init__.py``)."""
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _names_by_file() -> dict[Path, dict[str, str]]:
    """Each ``cel_lens`` file -> the entry names it may not compare against, each with the subject
    pattern a comparison must name to count (every registry's names but those of the registries one
    of whose entries it is; a name two registries share counts by the broader of their scopes)."""
    own: dict[Path, set[str]] = {}
    for table, registry in REGISTRIES.items():
        for target in (t for t in registry.values() if isinstance(t, str)):  # an object added at run time: no module
            own.setdefault(_module_file(split_target(target)[0]), set()).add(table)
    out: dict[Path, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names: dict[str, str] = {}
        for table in REGISTRIES:
            if table in own.get(path, set()):
                continue
            _merge(names, _scopes(table))
        out[path] = names
    return out


def _literal_names(node: ast.AST) -> list[str]:
    """The string literals of a comparison operand: a constant, or the items of a tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for item in node.elts for s in _literal_names(item) if isinstance(item, ast.Constant)]
    return []


def _counts(name: str, names: Mapping[str, str], other: str) -> bool:
    """Whether comparing ``name`` with code ``other`` is a test of a registry's entry name."""
    return name in names and (not names[name] or re.search(names[name], other, re.IGNORECASE) is not None)


def name_tests(source: str, names: Union[Mapping[str, str], set[str]]) -> list[tuple[int, str]]:
    """``(line, name)`` for every test of a string in ``names`` in Python ``source`` (see the module
    docstring), JavaScript strings in it included. ``names``: name -> the subject pattern the other
    side must match (``""``: any; a set: every name, anywhere)."""
    names = dict.fromkeys(names, "") if isinstance(names, set) else dict(names)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                pairs = [(right, left)] if isinstance(op, (ast.In, ast.NotIn)) else [(left, right), (right, left)]
                found += [(node.lineno, s) for side, other in pairs for s in _literal_names(side)
                          if _counts(s, names, ast.unparse(other))]
        elif isinstance(node, ast.Match):
            subject = ast.unparse(node.subject)
            found += [(value.lineno, s) for case in node.cases for value in ast.walk(case.pattern)
                      if isinstance(value, ast.MatchValue) for s in _literal_names(value.value) if _counts(s, names, subject)]
    if names:
        js = re.compile(r"[!=]==?\s*['\"](" + "|".join(map(re.escape, sorted(names))) + r")['\"]")
        for lineno, line in enumerate(source.splitlines(), 1):
            found += [(lineno, m.group(1)) for m in js.finditer(line)
                      if (lineno, m.group(1)) not in found and _counts(m.group(1), names, line)]
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
    assert {"exact_match", "multiple_choice", "generation"} <= set(names[PACKAGE / "evaluation" / "evaluator.py"])
    assert "multiple_choice" not in names[PACKAGE / "tasks" / "answer_types.py"]
    js = 'JS = "const mc = row.answer_type === \'multiple_choice\';"'  # a JavaScript test in a Python string
    assert name_tests(js, names[PACKAGE / "report" / "heatmap.py"]) == [(1, "multiple_choice")]
    assert name_tests('if key.answer_type in ("exact_match", "generation"): pass', {"exact_match": "", "generation": ""}) == [
        (1, "exact_match"), (1, "generation")]


@pytest.mark.parametrize("code, hits", [
    ('if precision == "auto": pass', [(1, "auto")]),
    ('if ctx.precision not in (None, "auto", "float32"): pass', [(1, "auto"), (1, "float32")]),
    ('if loader != "auto": pass', [(1, "auto")]),
    ('if rule == "always": pass', [(1, "always")]),
    ('match config.parsimony:\n    case "best":\n        pass', [(2, "best")]),
    ('if text in ("", "auto"): pass', []),  # CEL_LENS_THREADS, not a registry's subject
    ('if how == "always": pass', []),  # a manifest rule, not a BOS rule
    ('if dtype == "float32": pass', []),
    ('if kind == "beam": pass', [(1, "beam")]),  # a name that is no common word counts anywhere
])
def test_a_common_word_counts_only_beside_its_registry_subject(code, hits):
    names: dict[str, str] = {}
    for table in ("PRECISIONS", "LOADERS", "BOS_RULES", "PARSIMONY_RULES", "STRATEGIES"):
        _merge(names, _scopes(table))
    assert name_tests(code, names) == hits


def test_the_new_registries_are_checked_with_their_names():
    names = _names_by_file()[PACKAGE / "pipeline.py"]
    for table in ("STRATEGIES", "PARSIMONY_RULES", "CI_METHODS", "LOADERS", "PRECISIONS", "BOS_RULES"):
        assert set(REGISTRIES[table]) <= set(names), table
    assert names["beam"] == "" and names["one_se"] == "" and names["bf16"] == "" and names["newcombe"] == ""
    assert set(names["auto"].split("|")) == {"prec", "loader"} and names["always"] and names["best"]  # common words: scoped, not dropped


def test_an_entry_module_may_compare_its_own_registry_names():
    names = _names_by_file()
    prescreen = PACKAGE / "scoring" / "prescreen.py"
    assert "attribution" not in names[prescreen]  # a scorer module compares scorer names freely
    assert "zero" in names[prescreen] and "local" in names[prescreen]  # but no other registry's
    assert "exact" in names[PACKAGE / "config" / "__init__.py"] and "zero" in names[PACKAGE / "pipeline.py"]

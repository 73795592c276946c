"""The package's shape, enforced: imports flow one way, files and functions stay small.

Every import in ``cel_lens/`` (function-level and ``TYPE_CHECKING`` ones too) is parsed. A module
may import its own package or a package of a lower layer (:data:`LAYERS`, as in the README's
layout table); nothing imports the package root; only ``cel_lens.model``
imports TransformerLens; no private name (``_x``) crosses a package boundary; the module import
graph has no cycle; and no file is over 400 lines, no function over 80.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cel_lens"

LAYERS: dict[str, int] = {
    "version": 0, "registry": 0, "heads": 0, "progress": 0, "threads": 0, "splits": 0,
    "config": 1, "stats": 1, "oracle": 1,
    "model": 2, "sandbox": 2,
    "tasks": 3,
    "evaluation": 4,
    "scoring": 5, "testing": 5,
    "selection": 6,
    "runs": 7,
    "backends": 8,
    "pipeline": 9,
    "report": 10,
    "analysis": 11, "organism": 11, "plant": 11, "theory": 11, "grids": 11,
    "cli": 12,
}
"""Package (or top-level module) -> layer; imports go to lower layers only."""


MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _unit(module: str) -> str:
    """The layered unit of a dotted name: ``cel_lens.model.load`` -> ``model``; the root -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, imported names)`` for every import statement in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}:{node.lineno}: relative import (use absolute cel_lens. imports)")
    return found


def _targets(module: str, names: list[str]) -> list[str]:
    """The cel_lens modules an import statement loads: ``from cel_lens.a import b`` loads
    ``cel_lens.a.b`` when that is a module, else ``cel_lens.a``."""
    if module != "cel_lens" and not module.startswith("cel_lens."):
        return []
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    return subs or [module]


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in MODULES} - {""}
    assert units - set(LAYERS) == set(), "add new packages to LAYERS (and docs/layout.md's table)"


def test_imports_flow_one_way():
    problems = []
    for module, path in MODULES.items():
        unit = _unit(module)
        if unit == "":
            continue
        for line, imported, names in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if imported.split(".")[0] == "transformer_lens" and unit != "model":
                problems.append(f"{where}: only cel_lens.model may import transformer_lens")
            for target in _targets(imported, names):
                other = _unit(target)
                if other == "":
                    problems.append(f"{where}: imports the package root (import the defining module)")
                elif other != unit and LAYERS[other] >= LAYERS[unit]:
                    problems.append(f"{where}: {unit} (layer {LAYERS[unit]}) imports {other} (layer {LAYERS[other]})")
                if other != unit:
                    private = [n for n in names if n.startswith("_") and not n.endswith("__")] + [
                        p for p in target.split(".") if p.startswith("_") and p != "__init__"
                    ]
                    if private:
                        problems.append(f"{where}: private name(s) {private} of {target} used outside its package")
    assert not problems, "\n".join(problems)


def _find_cycle(graph: dict[str, set[str]]) -> None:
    """Raise naming the first import cycle of ``graph`` (module -> modules it imports)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_module_import_graph_has_no_cycle():
    graph = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _, imported, names in _imports(path):
            graph[module].update(t for t in _targets(imported, names) if t in MODULES and t != module)
    _find_cycle(graph)


BENCHMARKS = {f"benchmarks.{p.stem}": p for p in sorted((ROOT / "benchmarks").glob("*.py")) if p.stem != "__init__"}
"""The benchmark modules (not part of the installed package, but they import one way too)."""


def _benchmark_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in BENCHMARKS}
    for module, path in BENCHMARKS.items():
        for _, imported, names in _imports(path):
            targets = [f"{imported}.{n}" for n in names if f"{imported}.{n}" in BENCHMARKS] or [imported]
            graph[module].update(t for t in targets if t in BENCHMARKS and t != module)
    return graph


def test_benchmarks_import_graph_has_no_cycle_and_the_package_never_imports_them():
    _find_cycle(_benchmark_graph())
    for module, path in MODULES.items():
        assert not any(imp.split(".")[0] == "benchmarks" for _, imp, _ in _imports(path)), module


def test_the_cycle_check_sees_function_level_imports():
    """A cycle closed only by an import inside a function (as ``benchmarks.scaling`` once had) is found."""
    tree = ast.parse("def f():\n    from benchmarks.a import x\n")
    assert [(n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] == ["benchmarks.a"]
    with pytest.raises(AssertionError, match="import cycle: a -> b -> a"):
        _find_cycle({"a": {"b"}, "b": {"a"}})


def test_files_and_functions_are_small():
    problems = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        n_lines = text.count("\n")
        if n_lines > MAX_FILE_LINES:
            problems.append(f"{path.relative_to(ROOT)}: {n_lines} lines (> {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} has {length} lines")
    assert not problems, "\n".join(problems)


def test_no_module_is_also_a_function():
    for module, path in MODULES.items():
        assert "sys.modules[__name__].__class__" not in path.read_text(encoding="utf-8"), module
    assert "cel_lens.search" not in MODULES and "cel_lens.evaluate" not in MODULES
    import cel_lens
    import cel_lens.evaluation  # noqa: F401 - importing packages must not rebind the functions
    import cel_lens.pipeline  # noqa: F401

    assert inspect.isfunction(cel_lens.search) and inspect.isfunction(cel_lens.evaluate)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_every_module_imports_in_any_order(order):
    """Each module imports on its own terms: all of them in a fresh interpreter, in two orders."""
    names = sorted(m for m in MODULES if not m.endswith("__main__"))
    if order == "reversed":
        names.reverse()
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_small_front_door():
    """``cel_lens.__all__`` holds the entry points of a search and its figures (at most 20 names,
    each resolving); everything else is reached through its subpackage, and no old module path
    (a deprecated shim) is left at the top level."""
    import cel_lens

    assert len(cel_lens.__all__) <= 20, cel_lens.__all__
    assert all(getattr(cel_lens, name) is not None for name in cel_lens.__all__)
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top <= set(LAYERS), f"top-level modules outside the layer table: {sorted(top - set(LAYERS))}"
    with pytest.raises(AttributeError):
        cel_lens.flipped_examples  # noqa: B018 - moved to cel_lens.analysis
    assert cel_lens.analysis.flipped_examples is not None


SHARED_NAMES = {
    "__init__",
    # the parallel roles DESIGN.md names: a table's registry (one registry form: the tasks' and the
    # models' tables, and the helper itself; tests/test_registry.py checks each holds a Registry); a package's contracts (tasks/base.py, backends/base.py);
    # a computation that runs a model for a figure (analysis/) beside the figure drawn from its data
    # (report/); a study package's figures (organism/, theory/)
    "registry", "base", "attention", "flips", "side_effects", "figures",
}
"""File names that may repeat across packages; any other name says what its one file holds. The CLI's
files are named after their subcommands and are not counted."""


def test_one_name_one_meaning():
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name != "cli":
            seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1 and name not in SHARED_NAMES}
    assert not shared, shared
    unused = sorted(name for name in SHARED_NAMES if len(seen.get(name, [])) < 2)
    assert not unused, f"allowed to repeat but no longer repeated (drop them from SHARED_NAMES): {unused}"

"""The one registry form: ``name -> "module:attribute"``, resolved lazily, one error for an unknown
name; every table of cel_lens is one, and each holds (at least) its built-in entries, each resolving."""

from __future__ import annotations

import ast
import copy
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from cel_lens.config import (
    ABLATION_KINDS, BACKENDS, BOS_RULES, CI_METHODS, LOADERS, PARSIMONY_RULES, PRECISIONS, SCORERS, STRATEGIES,
)
from cel_lens.model.registry import MODELS, PAPER_MODELS
from cel_lens.model.sources import MODEL_SOURCES
from cel_lens.registry import Registry, UnknownEntry, resolve_target, split_target
from cel_lens.tasks.base import TaskSpec
from cel_lens.tasks.registry import LM_EVAL, SHIPPED_TASKS, TASKS, available_tasks, register_task, task_info, task_spec

VALUE = 42
"""What ``f"{__name__}:VALUE"`` resolves to."""

BUILT_IN = {
    "SCORERS": (SCORERS, {"exact", "attribution", "compressed", "racing", "prescreen"}),
    "ABLATION_KINDS": (ABLATION_KINDS, {"zero", "mean", "resample"}),
    "BACKENDS": (BACKENDS, {"local", "ray"}),
    "TASKS": (TASKS, {"arithmetic", "arithmetic_choice", "boolq", "hellaswag", "mbpp", "organism_a", "organism_b", "lm_eval"}),
    "MODEL_SOURCES": (MODEL_SOURCES, {"builtin", "gguf", "directory", "hub"}),
    "MODELS": (MODELS, {"organism", "smollm2-135m", *PAPER_MODELS}),
    "STRATEGIES": (STRATEGIES, {"exhaustive", "beam"}),
    "PARSIMONY_RULES": (PARSIMONY_RULES, {"backward", "one_se", "simultaneous", "best"}),
    "CI_METHODS": (CI_METHODS, {"tango", "newcombe", "bootstrap"}),
    "LOADERS": (LOADERS, {"auto", "hooked", "bridge"}),
    "PRECISIONS": (PRECISIONS, {"auto", "float32", "bf16"}),
    "BOS_RULES": (BOS_RULES, {"tokenizer", "always", "never"}),
}
OPTION_FAMILIES = ("STRATEGIES", "PARSIMONY_RULES", "LOADERS", "PRECISIONS", "BOS_RULES")
"""The option tables whose entries are objects that carry their own name (CI methods are functions)."""


@pytest.mark.parametrize("table", sorted(BUILT_IN))
def test_every_table_is_a_registry_holding_its_built_in_entries(table):
    registry, names = BUILT_IN[table]
    assert isinstance(registry, Registry)
    assert names <= set(registry), f"{table} lacks {sorted(names - set(registry))}"  # more may be added
    for name in registry:
        assert registry.resolve(name) is not None, (table, name)


@pytest.mark.parametrize("table", OPTION_FAMILIES)
def test_an_option_entry_is_an_object_named_as_its_entry(table):
    """The name a manifest records is the entry's key, and the object it resolves to says the same."""
    registry = BUILT_IN[table][0]
    assert [registry.resolve(name).name for name in registry] == list(registry)


def test_a_task_entry_is_one_spec_holding_its_loader_and_info():
    """One table: each built-in task's entry names a TaskSpec whose info says how it is scored;
    the lm-eval family's entry makes one per name."""
    assert LM_EVAL in SHIPPED_TASKS and LM_EVAL not in available_tasks() and callable(TASKS.resolve(LM_EVAL))
    for name in sorted(SHIPPED_TASKS - {LM_EVAL}):
        spec = TASKS.resolve(name)
        assert isinstance(spec, TaskSpec) and callable(spec.loader) and spec is task_spec(name), name
        assert TASKS[name].rsplit(":", 1)[1].startswith("SPEC"), name
        assert task_info(name) == dict(spec.info) and task_info(name)["answer_type"], name
    assert task_spec("organism_b").loader.__name__ == "load_organism_b"


def test_a_registered_task_is_a_spec_too(monkeypatch):
    from cel_lens.tasks import registry

    monkeypatch.setattr(registry, "TASKS", copy.copy(registry.TASKS))  # leaves no trace in other tests
    loader = register_task("toy_registered", lambda **kw: None, info={"answer_type": "exact_match", "metric": "acc"})
    spec = task_spec("toy_registered")
    assert isinstance(spec, TaskSpec) and spec.loader is loader and spec.info["metric"] == "acc"
    assert registry.TASKS["toy_registered"] is spec  # the one table holds it, beside the built-in tasks
    assert "toy_registered" in available_tasks() and task_info("toy_registered")["answer_type"] == "exact_match"
    with pytest.raises(ValueError, match="built-in task"):
        register_task("arithmetic", loader)
    with pytest.raises(ValueError, match="unknown task 'nope'; available: .*toy_registered"):
        task_spec("nope")
    with pytest.raises(ValueError, match="unknown task 'lm_eval'"):  # the family's entry is no task
        task_spec("lm_eval")


def test_a_built_in_entry_that_is_not_a_spec_is_refused(monkeypatch):
    monkeypatch.setitem(TASKS, "not_a_spec", f"{__name__}:VALUE")
    with pytest.raises(TypeError, match="not_a_spec.*int, not a TaskSpec"):
        task_spec("not_a_spec")


def test_resolve_imports_lazily_and_names_the_entries_on_an_unknown_name():
    table = Registry("widget", {"answer": f"{__name__}:VALUE"})
    assert table.resolve("answer") == 42 and table.get_resolved("nope") is None
    with pytest.raises(UnknownEntry, match=r"^unknown widget 'nope'; choose one of answer$"):
        table.resolve("nope")
    with pytest.raises(ValueError, match="unknown widget 3"):  # UnknownEntry is a ValueError
        table.resolve(3)
    table["missing"] = f"{__name__}:NO_SUCH_NAME"
    with pytest.raises(AttributeError, match="widget 'missing'.*has no attribute 'NO_SUCH_NAME'"):
        table.resolve("missing")
    table["gone"] = "no_such_module_anywhere:thing"
    with pytest.raises(ModuleNotFoundError):  # an optional dependency's ImportError passes through
        table.resolve("gone")


def test_an_entry_added_as_the_object_itself_resolves_to_it():
    table, thing = Registry("widget"), object()
    table["x"] = thing  # what register_task does with a loader it is handed
    assert table.resolve("x") is thing and table.get_resolved("x") is thing


@pytest.mark.parametrize("bad", ["no_colon", ":attr", "module:", "a:b:c"])
def test_an_entry_of_another_form_is_refused_when_added(bad):
    with pytest.raises(ValueError, match="'module:attribute'"):
        Registry("widget", {"x": bad})
    table = Registry("widget")
    with pytest.raises(ValueError, match="'module:attribute'"):
        table["x"] = bad
    assert "x" not in table


def test_a_registry_is_a_plain_dict_that_copies_and_pickles(monkeypatch):
    assert split_target("a.b:c") == ("a.b", "c") and resolve_target(f"{__name__}:VALUE") == 42
    for twin in (copy.copy(SCORERS), copy.deepcopy(SCORERS), pickle.loads(pickle.dumps(SCORERS))):
        assert isinstance(twin, Registry) and twin == SCORERS and twin.what == "scorer"
    monkeypatch.setitem(SCORERS, "toy", f"{__name__}:VALUE")  # how tests and users add one
    assert SCORERS.resolve("toy") == 42 and list(SCORERS)[-1] == "toy"


def test_asking_the_tables_imports_no_entry():
    """Reading the tables (``--help``, validation) imports none of the modules they name."""
    code = ("import sys\nimport cel_lens.config, cel_lens.tasks.registry\n"
            "print(sorted(m for m in ('cel_lens.scoring.exact', 'cel_lens.backends.ray', 'cel_lens.model.ablation_kinds', "
            "'cel_lens.tasks.mbpp', 'cel_lens.tasks.organism', 'cel_lens.selection.subsets', 'cel_lens.selection.parsimony', "
            "'cel_lens.selection.paired', 'cel_lens.evaluation.precision', 'cel_lens.model.load', 'cel_lens.model.bos') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_file_named_registry_holds_a_registry():
    """``registry.py`` only where a Registry is: the class itself, or a table built as one."""
    package = Path(__file__).resolve().parents[1] / "cel_lens"
    files = sorted(package.rglob("registry.py"))
    assert len(files) >= 3  # the helper, the tasks' table, the models' table
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        built = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Registry"]
        defined = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Registry"]
        assert built or defined, f"{path.relative_to(package.parent)} is named registry.py but holds no Registry"

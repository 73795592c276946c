"""The scripts in ``scripts/`` as modules, for the tests that call their functions (they are files,
not a package: each is loaded from its path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` (``name`` with or without ``.py``) loaded as a module of that name."""
    stem = name.removesuffix(".py")
    spec = importlib.util.spec_from_file_location(stem, SCRIPTS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

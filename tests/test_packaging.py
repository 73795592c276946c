"""Installing prints no setuptools deprecation about ``project.license`` (a TOML table was
deprecated in setuptools 77): the license is an SPDX string with its file, and the build requires
a setuptools that reads it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUILD_METADATA = """
import sys, warnings
warnings.simplefilter("always")
from setuptools import build_meta
print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))
"""


def test_license_is_an_spdx_string_with_its_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert all((ROOT / f).is_file() for f in project["project"]["license-files"])
    assert "setuptools>=77" in " ".join(project["build-system"]["requires"])


def test_building_metadata_warns_nothing_about_the_license(tmp_path):
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "cel_lens").mkdir()
    (tmp_path / "cel_lens" / "__init__.py").write_text("")
    (tmp_path / "meta").mkdir()
    done = subprocess.run([sys.executable, "-c", BUILD_METADATA, str(tmp_path / "meta")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "project.license" not in done.stderr and "SetuptoolsDeprecationWarning" not in done.stderr
    metadata = next((tmp_path / "meta").glob("*.dist-info/METADATA")).read_text()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata

"""The SmolLM2 benchmarks run anywhere: the model by name, the data as the library finds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.paths import MODEL, checkpoint_dir, task_data_dir

REPO = Path(__file__).resolve().parents[1]
MODULES = ("smollm2", "smollm2_lmeval", "boolq_calibration")


@pytest.mark.parametrize("module", MODULES)
def test_defaults_name_the_model_and_no_machine_path(module):
    source = (REPO / "benchmarks" / f"{module}.py").read_text()
    assert "/work/models" not in source and '"/work/shared/data"' not in source
    out = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert MODEL in out.stdout and "CEL_LENS_DATA_DIR" in out.stdout


def test_the_model_name_resolves_to_a_checkpoint_directory():
    assert (checkpoint_dir(MODEL) / "config.json").is_file()


def test_task_files_are_found_as_the_library_finds_them(monkeypatch, tmp_path):
    monkeypatch.delenv("CEL_LENS_DATA_DIR", raising=False)
    monkeypatch.chdir(REPO)
    assert (task_data_dir(None, ["boolq/dev.jsonl"]) / "boolq" / "dev.jsonl").is_file()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        task_data_dir(None, ["no/such/file.jsonl"])

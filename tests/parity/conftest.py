"""Fixtures of the lm-eval parity suite: tiny checkpoints in each BOS convention, lm-eval's own
``HFLM`` on each, and the parity table the tests fill in (printed at the end of the session).

lm-evaluation-harness is an optional test extra (``pip install "cel_lens[parity]"``); without it
every test here is skipped with that reason.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cel_lens.testing import BOS_CONVENTIONS

PARITY_ROWS = pytest.StashKey[list]()

# long enough for MBPP's 3-shot prompts with the tiny 300-token vocabulary
MAX_POSITIONS = 4096


@pytest.fixture(scope="session")
def lm_side():
    """``lm_eval_side.py`` of this folder (lm-eval's side of the comparison) as a module."""
    spec = importlib.util.spec_from_file_location("cel_lens_parity_lm_eval_side", Path(__file__).with_name("lm_eval_side.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _soften(path: Path, factor: float) -> Path:
    """Scale the final norm's gain of a checkpoint by ``factor``: the logits shrink by as much, so
    per-token log-likelihoods are a few nats (as a trained model's) instead of tens; summed over a
    HellaSwag ending they then stay where float32 resolves 1e-4."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(path / "model.safetensors"))
    weights["model.norm.weight"] = weights["model.norm.weight"] * factor
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="session")
def parity_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random Llama checkpoints, one per BOS convention (same weights, same vocabulary; only
    the tokenizer's BOS handling differs): ``{"added" | "not_added" | "absent": path}``."""
    from cel_lens.testing import tiny_hf_checkpoint

    root = tmp_path_factory.mktemp("parity_checkpoints")
    return {
        bos: _soften(tiny_hf_checkpoint("llama", root / bos, seed=3, bos=bos, max_position_embeddings=MAX_POSITIONS), 0.1)
        for bos in BOS_CONVENTIONS
    }


@pytest.fixture(scope="session")
def lm_eval_models(parity_checkpoints: dict[str, Path]):
    """lm-eval's ``HFLM`` on each checkpoint (float32, CPU), built on first use."""
    from lm_eval.models.huggingface import HFLM

    built: dict[str, HFLM] = {}

    def get(bos: str) -> HFLM:
        if bos not in built:
            built[bos] = HFLM(pretrained=str(parity_checkpoints[bos]), device="cpu", dtype="float32", batch_size=4)
        return built[bos]

    return get


@pytest.fixture(scope="session")
def parity_rows(request: pytest.FixtureRequest) -> list[dict]:
    """Rows of the parity table (one per task x BOS convention x loader x variant)."""
    return request.config.stash.setdefault(PARITY_ROWS, [])


def parity_table_wanted(config, exitstatus) -> bool:
    """Whether the session prints the parity table: when a test failed (the table helps read it) or
    output is not captured (``-s``); ``pytest -q`` of a passing suite prints no table of ~30 lines."""
    return int(exitstatus) != 0 or config.getoption("capture") == "no"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Print the parity table when the suite ran and :func:`parity_table_wanted`."""
    rows = config.stash.get(PARITY_ROWS, [])
    if not rows or not parity_table_wanted(config, exitstatus):
        return
    terminalreporter.section("lm-eval parity")
    head = "| task | BOS | loader | variant | max abs d loglik | decisions equal | prompts, ids equal | generations equal |"
    terminalreporter.write_line(head)
    terminalreporter.write_line("|" + "---|" * 8)
    for r in sorted(rows, key=lambda r: (r["task"], r["bos"], r["loader"], r["variant"])):
        d = "n/a" if r["max_dll"] is None else f"{r['max_dll']:.1e}"
        gen = "n/a" if r.get("gens") is None else r["gens"]
        terminalreporter.write_line(
            f"| {r['task']} | {r['bos']} | {r['loader']} | {r['variant']} | {d} | {r['decisions']} | {r['inputs']} | {gen} |"
        )

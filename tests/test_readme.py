"""The README's "Use" section runs, as a doctest would: its code block is read from README.md and
executed on the offline model organism. Only names that need a GPU, the hub or a 3B model are
swapped (each swap must find its text, so a README edit that drops one fails here); every call,
argument name and result the block shows is exercised as written."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"

SWAPS = [  # (text in the README, what runs offline instead)
    ('"Qwen/Qwen2.5-3B-Instruct", device="cuda", dtype="bfloat16"', '"organism", device="cpu", dtype="float32"'),
    ('cl.load_task("arithmetic")', 'cl.load_task("organism_a", n_dist=120, n_test=120)'),
    ("cl.search(model, task, k=3, pool_size=12)", "cl.search(model, task, k=3, pool_size=12, n_boot=500, progress=False)"),
    (".show()", ""),  # no browser in a test
    ("L12H7", "L0H2"),
    ("L3H1", "L0H1"),
]


def use_block() -> str:
    """The first ``python`` code block under the README's ``## Use`` heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Use\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_use_section_runs(tmp_path, monkeypatch):
    code = use_block()
    for old, new in SWAPS:
        assert old in code, f"the README's Use block no longer contains {old!r}: update SWAPS"
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)  # the run directory goes to ./runs
    tokens = torch.tensor([[0, 1, 2, 3]])
    namespace: dict = {"tokens": tokens}
    exec(compile(code, str(README) + ":Use", "exec"), namespace)  # noqa: S102 - the README's own code
    import cel_lens as cl

    run, model = namespace["run"], namespace["model"]
    assert isinstance(run.result, cl.selection.Result) and run.result.heads and (tmp_path / "runs").is_dir()
    assert namespace["logits"].shape[:2] == (3, 1) and namespace["logits"].shape[-1] == model.cfg.d_vocab
    with torch.no_grad():
        torch.testing.assert_close(namespace["logits"][0], model(tokens))  # variant 0 is the intact model
    res = namespace["res"]
    assert res.correct.shape == (2, 120) and res.split == "test"


def test_the_block_shows_the_front_door():
    """The calls the test above runs are the README's own: the public names a first user meets."""
    calls = set(re.findall(r"cl\.([\w.]+)\(", use_block()))
    assert calls >= {"load_model", "load_task", "plan", "search", "plot_gain_heatmap", "analysis.flipped_examples",
                     "ablate", "run_variants", "evaluate"}

"""A 2 models × 2 tasks grid that runs offline on a CPU: the model organism on its two tasks, and a
tiny random Llama checkpoint on two planted tasks whose best ablations are known (``L1H2`` and
``L2H3``: ablating exactly that head answers every example). Run as a script (the kill test starts
it in a subprocess): ``python planted_grid.py CHECKPOINT OUT``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

PLANTED = {"planted_a": "L1H2", "planted_b": "L2H3"}
"""Registered task name -> the head whose ablation answers all of it."""
OPTIONS: dict[str, Any] = dict(
    n_dist=48, n_test=48, k=2, pool_size=4, n_null=5, n_boot=200, loader="hooked", progress=False, png=False,
)
"""Options of every search of the grid (small: seconds per pair)."""


def make_checkpoint(path: Path) -> Path:
    """The tiny checkpoint (untied embeddings: a random tied model only repeats its last token)."""
    from cel_lens.testing import tiny_hf_checkpoint

    return tiny_hf_checkpoint("llama", path, seed=1, tie_word_embeddings=False)


def register_planted(checkpoint: str) -> None:
    """Register ``planted_a``/``planted_b`` (24 + 24 examples each, built from the checkpoint)."""
    from cel_lens.model.load import load_model
    from cel_lens.tasks.registry import available_tasks, register_task
    from cel_lens.testing import planted_task

    cache: dict[str, Any] = {}

    def loader(name: str):
        def load(n_dist=None, n_test=None, seed=0, data_dir=None, **_: Any):
            if "model" not in cache:
                cache["model"] = load_model(checkpoint, loader="hooked")
            return planted_task(cache["model"], n=24, heads=PLANTED[name], name=name)

        return load

    for name in PLANTED:
        if name not in available_tasks():
            register_task(name, loader(name))


def tasks_of(checkpoint: str) -> dict[str, list[str]]:
    """Each model's tasks."""
    return {"organism": ["organism_a", "organism_b"], checkpoint: list(PLANTED)}


def run(checkpoint: str, out: str, **extra: Any):
    """Register the planted tasks and run the grid."""
    import cel_lens

    register_planted(checkpoint)
    return cel_lens.grid(["organism", checkpoint], tasks_of(checkpoint), out=out, **{**OPTIONS, **extra})


if __name__ == "__main__":
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    run(sys.argv[1], sys.argv[2])

"""The thread policy: CEL_LENS_THREADS pins it, tiny models get one thread, the command takes only
the cores others leave idle, and a count the user set is left alone."""

from __future__ import annotations

import os

import pytest
import torch

from cel_lens import threads
from cel_lens.threads import choose_threads, configure_threads


@pytest.fixture
def fresh(monkeypatch):
    """Module state as at import, torch's count restored afterwards."""
    before = torch.get_num_threads()
    for name in ("CEL_LENS_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_BASELINE", 8)
    monkeypatch.setattr(threads, "_last_set", None)
    monkeypatch.setattr(threads, "_ceiling", None)
    monkeypatch.setattr(threads, "_usable_cores", lambda: 8)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    torch.set_num_threads(8)
    yield monkeypatch
    torch.set_num_threads(before)


def _load(monkeypatch, value: float) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (value, value, value))


def test_choose(fresh):
    _load(fresh, 0.0)
    assert choose_threads() == 8 and choose_threads(10**9, look_at_load=True) == 8  # an idle large machine
    assert choose_threads(50_000) == 1  # a tiny model
    _load(fresh, 6.0)
    assert choose_threads(10**9, look_at_load=True) == 2  # two of eight cores idle
    _load(fresh, 20.0)
    assert choose_threads(10**9, look_at_load=True) == 1  # a loaded machine: one thread
    fresh.setenv("CEL_LENS_THREADS", "3")
    assert choose_threads(50_000) == 3
    fresh.setenv("CEL_LENS_THREADS", "lots")
    with pytest.raises(ValueError, match="CEL_LENS_THREADS"):
        choose_threads()


def test_configure_caps_later_calls_and_respects_the_user(fresh, tiny_model):
    _load(fresh, 6.0)
    assert configure_threads(look_at_load=True) == 2 == torch.get_num_threads()
    big = torch.nn.Linear(5000, 5000)  # 25M parameters: not tiny
    assert configure_threads(big) == 2  # the idle cores seen at start still cap it
    assert configure_threads(tiny_model) == 1 == torch.get_num_threads()
    torch.set_num_threads(5)  # the user's own choice from here on
    assert configure_threads(tiny_model) == 5 == torch.get_num_threads()


def test_omp_num_threads_is_respected(fresh, tiny_model):
    fresh.setenv("OMP_NUM_THREADS", "4")
    torch.set_num_threads(4)
    assert configure_threads(tiny_model) == 4
    fresh.setenv("CEL_LENS_THREADS", "2")  # but CEL_LENS_THREADS wins
    assert configure_threads(tiny_model) == 2


def test_evaluating_a_tiny_model_uses_one_thread(fresh, tiny_model):
    from cel_lens.evaluation.evaluator import evaluate
    from cel_lens.tasks.base import Example, Split

    split = Split("s", (Example("a", "Question: 1 plus 1?\nAnswer:", target=" 2"),), answer_type="exact_match")
    evaluate(tiny_model, split, progress=False)
    assert torch.get_num_threads() == 1

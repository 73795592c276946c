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
    """The machine's load as the load average says it (no ``/proc/stat`` reading)."""
    monkeypatch.setattr(threads, "busy_now", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (value, value, value))


def _stat(path, idle: int, total: int) -> None:
    busy = total - idle
    path.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n", encoding="ascii")


def test_busy_now_reads_the_ticks_of_the_interval(tmp_path, monkeypatch):
    """Busy share over the sampled interval, from the ``cpu`` line's idle and total ticks: a past
    load (in the counters before the interval) does not count."""
    stat = tmp_path / "stat"
    _stat(stat, idle=100, total=10_000)  # busy for ages before

    def fake_sleep(_):
        _stat(stat, idle=100 + 150, total=10_000 + 200)  # 200 ticks pass, 150 of them idle

    monkeypatch.setattr(threads.time, "sleep", fake_sleep)
    assert threads.busy_now(str(stat)) == pytest.approx(0.25)
    assert threads.busy_now(str(tmp_path / "missing")) is None
    (tmp_path / "odd").write_text("intr 1 2 3\n", encoding="ascii")
    assert threads.busy_now(str(tmp_path / "odd")) is None


def test_idle_cores_prefers_the_measured_share(fresh):
    fresh.setattr(threads, "busy_now", lambda: 0.25)
    fresh.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))  # a load average still full of a finished job
    assert threads.idle_cores() == pytest.approx(6.0)
    assert choose_threads(10**9, look_at_load=True) == 6


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

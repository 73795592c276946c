"""Shared fixtures of the theory tests: one thread, and one reproduced table for the session."""

from __future__ import annotations

import pytest
import torch

from cel_lens import theory as th


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def table() -> th.TheoryTable:
    return th.theory_table(seeds=2500, alpha=0.1, sweep_seeds=400, seed=0, n_track=4)

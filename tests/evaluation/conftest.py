"""Shared fixtures of the evaluation tests."""

from __future__ import annotations

import pytest

from cel_lens.threads import single_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread (and do not suffer from a loaded machine's cores)."""
    with single_thread():
        yield

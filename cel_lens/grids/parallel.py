"""Pairs searched at once. With a backend whose workers load their own model replicas (Ray), the
searches of a grid need not wait for each other: ``grid(..., parallel_pairs=N)`` runs N pairs at a
time, each on its own share of the cluster, and then measures the side effects model by model.

Two things make that safe. Ray is started once for the whole grid, so no search shuts it down under
another (a search that starts Ray itself stops it when it ends). And the cluster's workers are
split among the pairs running at once (when ``workers`` is not given): a search that asked for
every worker would leave the next one waiting for actors that never come free. The grid's record
(``grid.json``) and its task cache take a lock, so pairs may finish in any order.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence, TypeVar

from cel_lens.backends.base import backend_class
from cel_lens.config import ExecutionSettings, OptionError
from cel_lens.grids.grid_plan import GridPlan, Pair

__all__ = ["check_parallel_pairs", "shared_cluster", "run_at_once"]

T = TypeVar("T")


def check_parallel_pairs(plan: GridPlan, parallel_pairs: int) -> None:
    """``parallel_pairs`` is an integer >= 1, and above 1 only with a backend whose workers load
    their own models (the local backend runs every search on the one model of this process)."""
    if isinstance(parallel_pairs, bool) or not isinstance(parallel_pairs, int) or parallel_pairs < 1:
        raise OptionError("parallel_pairs", f"parallel_pairs must be an integer >= 1, got {parallel_pairs!r}")
    if parallel_pairs > 1 and backend_class(plan.settings.backend).in_process:
        raise OptionError(
            "parallel_pairs",
            "parallel_pairs > 1 needs a backend whose workers load their own models (backend='ray'); "
            "the local backend runs every search on this process's one model",
        )


@contextlib.contextmanager
def shared_cluster(settings: ExecutionSettings, parallel_pairs: int) -> Iterator[ExecutionSettings]:
    """The settings the backend's class yields for pairs run at once (its ``shared_cluster``; Ray:
    one cluster started once for all pairs, stopped at the end if started here, ``workers`` divided
    among the pairs unless given; the local backend: the settings as they are)."""
    with backend_class(settings.backend).shared_cluster(settings, parallel_pairs) as shared:
        yield shared


def run_at_once(pairs: Sequence[Pair], run_one: Callable[[Pair], T], parallel_pairs: int) -> list[T]:
    """``run_one`` of every pair, ``parallel_pairs`` at a time (in threads: each search spends its
    time waiting for its Ray actors), results in the pairs' order."""
    with ThreadPoolExecutor(max_workers=parallel_pairs, thread_name_prefix="cel-lens-pair") as pool:
        return list(pool.map(run_one, pairs))

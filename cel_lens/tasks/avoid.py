"""Rows D_test must not contain: a committed list of examples already read elsewhere.

The test-split ledger (:mod:`cel_lens.evaluation.seal`) marks a selection as not fixed before D_test
when the same model read one of its D_test rows earlier. On a pool read many times (the 20,000
Arithmetic rows, BoolQ's 3,270 validation rows) no split seed gives a 1,000-row D_test that avoids
every earlier read, so a loader's ``avoid_test`` option names a file of rows to leave out of D_test's
draw: one example id or content hash per line (``#`` starts a comment). The file is part of the
run's configuration (its path and sha256 are recorded), so the row's D_test is fixed, and
reproducible, before it is read; the rows left out stay eligible for D_dist, whose reads do not
break a seal. ``scripts/read_rows.py`` writes such a file from a machine's ledger and from earlier
runs' manifests.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional, Sequence

from cel_lens.tasks.base import Example, sample_disjoint, without_avoided
from cel_lens.tasks.io import PathLike, check_size, check_unique_ids

__all__ = ["AvoidList", "avoid_options", "load_avoid", "without_avoided", "reserved_rows", "draw_pool"]


class AvoidList(frozenset):
    """The example ids and content hashes to keep out of D_test, with the file they came from."""

    path: Optional[str] = None
    sha256: Optional[str] = None

    def record(self, avoided: int) -> dict[str, Any]:
        """What a task's options record about the list: its file, sha256, size and the pool rows it
        kept out of D_test's draw."""
        return {"path": self.path, "sha256": self.sha256, "entries": len(self), "rows_left_out": avoided}


def load_avoid(path: Optional[PathLike], option: str = "avoid_test") -> AvoidList:
    """The avoid list in ``path`` (empty when ``path`` is None). Raises FileNotFoundError, with the
    option's name (``option``), when the file is missing (a row's splits depend on it)."""
    if path is None:
        return AvoidList()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{option}: no file {p} (a list of example ids or content hashes, one per line)")
    data = p.read_bytes()
    lines = (line.split("#", 1)[0].strip() for line in data.decode().splitlines())
    out = AvoidList(line for line in lines if line)
    out.path, out.sha256 = str(path), hashlib.sha256(data).hexdigest()
    return out


def avoid_options(avoid: AvoidList, pool: Sequence[Any]) -> dict[str, Any]:
    """The task options that record ``avoid`` (none when it is empty): ``avoid_test``, the path the
    loader takes again, and ``avoid_test_file``, its sha256, size and the ``pool`` rows it left out."""
    if not avoid:
        return {}
    left_out = len(pool) - len(without_avoided(pool, avoid))
    return {"avoid_test": avoid.path, "avoid_test_file": avoid.record(left_out)}


def reserved_rows(pool: Sequence[Any], reserve: Optional[PathLike]) -> tuple[list[Any], dict[str, Any]]:
    """``pool`` less the rows of the ``reserve`` file (rows neither split may hold, e.g. a planted
    model's fit and truth rows), and the task options that record it (none without a file)."""
    kept = load_avoid(reserve, option="reserve")
    if not kept:
        return list(pool), {}
    left = without_avoided(pool, kept)
    return left, {"reserve": kept.path, "reserve_file": kept.record(len(pool) - len(left))}


def draw_pool(pool: Sequence[Example], n_dist: Optional[int], n_test: Optional[int], defaults: tuple[int, int], seed: int,
              avoid_test: Optional[PathLike], task: str, where: str) -> tuple[list[Example], list[Example], dict[str, Any]]:
    """D_dist and D_test (sizes default to ``defaults``) drawn disjointly, seeded, from one pool's
    distinct problems (:func:`~cel_lens.tasks.base.sample_disjoint`), D_test leaving out
    ``avoid_test``'s rows; with the options that record the draw (``n_dist``, ``n_test``,
    ``pool_distinct`` and the avoid list). ``where`` names the pool in a size error."""
    distinct = len({e.dedup_key for e in pool})  # what sample_disjoint keeps: one row per problem text
    where = f"{where} ({distinct} distinct rows)"
    n_d = check_size(n_dist, defaults[0], distinct, f"{task} D_dist", where)
    n_t = check_size(n_test, defaults[1], distinct - n_d, f"{task} D_test", where + f" minus {n_d} for D_dist")
    avoid = load_avoid(avoid_test)
    dist, test = sample_disjoint(pool, n_d, n_t, seed, avoid)
    check_unique_ids([*dist, *test], task)
    return dist, test, {"n_dist": n_d, "n_test": n_t, "pool_distinct": distinct, **avoid_options(avoid, pool)}

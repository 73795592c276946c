"""D_dist and D_test drawn from one file, disjoint by construction (when a train split is not at hand).

The paper draws BoolQ's and HellaSwag's D_dist from ``train`` and uses ``validation`` as D_test.
Offline, only BoolQ's validation file may be reachable; :func:`split_one_file` then draws D_test as
a seeded sample of it (the same sample :func:`~cel_lens.tasks.io.train_val_splits` draws for the same
size and seed) and D_dist as a seeded sample of the rows left, leaving out any row equal to, or
worded like, a D_test row. The options it returns record that D_dist came from the validation
file, so a run's manifest says its protocol differs from the paper's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from cel_lens.tasks.avoid import avoid_options, load_avoid, reserved_rows, without_avoided
from cel_lens.tasks.base import dedup_record
from cel_lens.tasks.io import (
    PathLike,
    build_examples,
    check_size,
    check_unique_ids,
    load_rows,
    resolve_data_dir,
    sample_excluding,
    seeded_sample,
)

__all__ = ["DIST_SOURCES", "split_one_file"]

DIST_SOURCES = ("train", "validation")
"""Where a task with a train and a validation split may draw D_dist from (``dist_from``)."""


def split_one_file(
    *,
    task: str,
    label: str,
    data_dir: Optional[PathLike],
    hub_id: str,
    relpath: str,
    val_name: str,
    make_example: Callable[[Mapping[str, Any], str, int], Any],
    n_dist: Optional[int],
    n_test: Optional[int],
    n_dist_default: int,
    n_test_default: int,
    seed: int,
    hub_config: Optional[str] = None,
    splits: Sequence[str] = ("dist", "test"),
    avoid_test: Optional[PathLike] = None,
    reserve: Optional[PathLike] = None,
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """D_test (``n_test``, default ``n_test_default``) and D_dist (``n_dist``, default
    ``n_dist_default``) from the validation split alone; returns both and the options to record.
    ``splits=("test",)`` returns D_test alone (the same D_test). D_test leaves out the rows of
    ``avoid_test`` (:mod:`cel_lens.tasks.avoid`); they stay eligible for D_dist. Neither split holds
    a row of ``reserve`` (the same file format): rows kept for something else, e.g. a planted
    model's fit and truth rows (docs/planted.md)."""
    root = resolve_data_dir(data_dir, needs=(relpath,))
    rows, src = load_rows(
        what=f"{label} validation", data_dir=root, relpath=relpath, hub_id=hub_id, hub_split="validation",
        hub_config=hub_config,
    )
    val = build_examples(rows, lambda r, i: make_example(r, val_name, i))
    where = f"{label} validation ({src.get('path', hub_id)})"
    val, reserved = reserved_rows(val, reserve)
    if reserved:
        where += f" less {reserved['reserve_file']['rows_left_out']} reserved rows"
    avoid = load_avoid(avoid_test)
    eligible = without_avoided(val, avoid)
    note = f" after leaving out {len(val) - len(eligible)} rows of avoid_test" if avoid else ""
    n_t = check_size(n_test, n_test_default, len(eligible), f"{label} D_test", where, note)
    test = seeded_sample(eligible, n_t, seed, f"{task}/test")
    options: dict[str, Any] = {
        **avoid_options(avoid, val), **reserved, "seed": seed, "n_test": n_t, "sources": [src], "dist_from": "validation",
        "dist_protocol": "D_dist: seeded sample of the validation rows not in D_test (none equal to or worded like "
        "a D_test row); the paper draws D_dist from train",
    }
    if "dist" not in splits:
        return [], test, {**options, "n_dist": 0, "splits": ["test"]}
    chosen = {e.id for e in test}
    rest = [e for e in val if e.id not in chosen]
    dist, skipped, same_text = sample_excluding(
        rest, n_dist, n_dist_default, seed, f"{task}/dist", (e.content_hash for e in test), f"{label} D_dist",
        f"{where} less D_test's {n_t} rows", same_text_as=test,
    )
    check_unique_ids([*dist, *test], task)
    options.update(n_dist=len(dist), validation_rows_equal_to_test=skipped)
    if same_text:
        options["deduplication"] = dedup_record(same_text)
    return dist, test, options

"""Stage 2 runs in batches: each is recorded as it returns and moves the progress bar, so a kill
loses at most one batch and the same search resumes with the next."""

from __future__ import annotations

import math

import pytest

from cel_lens import oracle as oracle_module
from cel_lens.config import SearchConfig
from cel_lens.runs import RecordingOracle, RunDir, load_run
from cel_lens.selection import run_search
from cel_lens.selection.subsets import STAGE2_BATCH
from cel_lens.testing import SyntheticOracle

MANIFEST = {"model": {"id": "synthetic"}, "task": {"name": "toy"}, "k": 2}
ORACLE = dict(n_layers=4, n_heads=4, n_dist=200, n_test=200, base_acc=0.5,
              effects={"L1H2": 0.06, "L2H3": 0.05}, background_sd=0.01, noise=0.05, seed=0)
SEARCH = dict(k=3, pool_size=6, n_null=4, n_boot=200)  # 6 + 15 + 20 = 41 subsets, 35 new


class Killed(Exception):
    """Stands for a kill in the middle of stage 2."""


class KilledAt(SyntheticOracle):
    """A synthetic oracle that dies at its ``at``-th stage-2 call, and counts them."""

    def __init__(self, at: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.at, self.stage2 = at, []

    def evaluate(self, split, head_sets, *, stage=""):
        if stage == "stage2":
            self.stage2.append(len(head_sets))
            if len(self.stage2) == self.at:
                raise Killed
        return super().evaluate(split, head_sets, stage=stage)


def test_a_killed_stage_two_keeps_its_finished_batches_and_resumes(tmp_path):
    reference = run_search(SyntheticOracle(**ORACLE), SearchConfig(**SEARCH), progress=False)
    path = tmp_path / "run"
    first = KilledAt(3, **ORACLE)
    with pytest.raises(Killed):
        run_search(RecordingOracle(first, RunDir.open(path, MANIFEST)), SearchConfig(**SEARCH), progress=False)
    assert max(first.stage2) <= STAGE2_BATCH and len(first.stage2) == 3  # was one call of all 35
    recorded = [e for e in load_run(path).evaluations if e.stage == "stage2"]
    assert len(recorded) == sum(first.stage2[:2]) >= STAGE2_BATCH  # two batches kept (less singles known from stage 1)
    second = KilledAt(**ORACLE)
    result = run_search(RecordingOracle(second, RunDir.open(path, MANIFEST)), SearchConfig(**SEARCH), progress=False)
    assert sum(second.stage2) == 35 - len(recorded)  # only what was not recorded, the lost batch included
    assert result == reference


def test_stage_two_moves_its_progress_bar_once_per_batch(monkeypatch):
    updates: list[tuple[str, int]] = []

    class Bar:
        def __init__(self, total, enabled=True, desc="", unit="it", **kw):
            self.desc = desc

        def update(self, n=1):
            updates.append((self.desc, n))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(oracle_module, "progress_bar", Bar)
    run_search(SyntheticOracle(**ORACLE), SearchConfig(**SEARCH), progress=True)
    stage2 = [n for desc, n in updates if desc.startswith("stage2")]
    assert len(stage2) == math.ceil(41 / STAGE2_BATCH) and sum(stage2) == 41

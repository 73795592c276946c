"""A model × task grid of CEL searches with its side effects: the paper's Table 1 in one call.

* :mod:`~cel_lens.grids.run_grid`: :func:`grid` (run every pair, then the side effects, then the
  outputs) and :func:`rebuild` (the outputs again from the directory, without a model);
* :mod:`~cel_lens.grids.grid_plan`: :class:`GridPlan`, the checked plan, and the ``"paper"`` presets;
* :mod:`~cel_lens.grids.resources`: each model and task loaded once; :mod:`~cel_lens.grids.state`:
  ``grid.json`` (errors, timings);
* :mod:`~cel_lens.grids.cross_task`: each Ŝ on its model's other tasks, recorded and resumed;
* :mod:`~cel_lens.grids.summary`: the table from the directory alone (Holm-adjusted p across the grid).

The outputs are drawn by :mod:`cel_lens.report.grid` from the table alone.
"""

from cel_lens.grids.grid_plan import PAPER, PAPER_MODEL_NAMES, PAPER_TASKS, GridPlan, Pair, make_plan
from cel_lens.grids.run_grid import GridRun, grid, rebuild
from cel_lens.grids.state import GRID_FILE, GridState
from cel_lens.grids.summary import build_table, selection_stability

__all__ = [
    "grid",
    "rebuild",
    "GridRun",
    "GridPlan",
    "Pair",
    "make_plan",
    "PAPER",
    "PAPER_TASKS",
    "PAPER_MODEL_NAMES",
    "GridState",
    "GRID_FILE",
    "build_table",
    "selection_stability",
]

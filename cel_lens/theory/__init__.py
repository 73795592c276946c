"""Section 4 of the paper, reproduced numerically: a three-head, three-feature attention model.

Head ``h`` carries feature ``j`` through four scalars ``(q, k, v, o)_{hj}`` and contributes
``c_{hj} = o v tanh(q k)`` to a linear predictor ``w_j = Σ_h c_{hj}``, trained by gradient descent on
two tasks that share feature 0 (:mod:`~cel_lens.theory.toy_model`, :mod:`~cel_lens.theory.training`).
From a small initialisation ``θ⁰ = α·G`` one head takes each feature, the one whose auxiliary
ODE escapes first (Lemma B.1, Theorem 4.2; :mod:`~cel_lens.theory.escape`). With ``t = a/2`` and
E = "the head holding feature 0 holds neither feature 1 nor 2" (Pr(E) = 4/9), ablating that head
improves R_A by ``t²`` and worsens R_B by ``3t²``, up to O(α⁴) (Theorem 4.3).

Everything is vectorized over seeds (a ``[seed, head, feature, 4]`` tensor), so thousands of
seeds train in seconds on a CPU. :func:`theory_table` returns the measured numbers next to the
paper's predictions, each with a 95% confidence interval (:mod:`~cel_lens.theory.claims`);
:mod:`~cel_lens.theory.figures` draws the trajectories and the escape order.
"""

from cel_lens.theory.escape import escape_integrals, escape_time, ode_escape_time, predicted_winners
from cel_lens.theory.experiment import TheoryRun
from cel_lens.theory.figures import plot_escape_order, plot_trajectories, save_theory_figures
from cel_lens.theory.intervals import mean_interval, median_interval, wilson_interval
from cel_lens.theory.lab import theory_table
from cel_lens.theory.toy_model import (
    FEATURE_WEIGHTS,
    N_FEATURES,
    N_HEADS,
    attention_forward,
    gradient,
    head_contributions,
    init_params,
    joint_objective,
    risks,
    targets,
)
from cel_lens.theory.predictions import TheoryRow, TheoryTable
from cel_lens.theory.training import TrainResult, default_steps, train

__all__ = [
    "N_HEADS",
    "N_FEATURES",
    "FEATURE_WEIGHTS",
    "TrainResult",
    "TheoryRow",
    "TheoryTable",
    "targets",
    "risks",
    "joint_objective",
    "head_contributions",
    "attention_forward",
    "gradient",
    "init_params",
    "train",
    "escape_integrals",
    "escape_time",
    "ode_escape_time",
    "predicted_winners",
    "default_steps",
    "wilson_interval",
    "mean_interval",
    "median_interval",
    "TheoryRun",
    "theory_table",
    "plot_trajectories",
    "plot_escape_order",
    "save_theory_figures",
]

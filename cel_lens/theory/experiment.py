"""One experiment of the theory lab: train many seeds at one α and read off who won what.

:func:`run_seeds` draws ``G``, trains from ``θ⁰ = α·G``, and pairs the escape-time prediction of
each feature's winner with the head that actually holds it; the helpers here turn that into the
quantities Theorems 4.2 and 4.3 talk about (winning heads, single-head ablation effects).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from jaxtyping import Float
from torch import Tensor

from cel_lens.theory.escape import predicted_winners
from cel_lens.theory.toy_model import init_params, risks
from cel_lens.theory.training import TrainResult, default_steps, train


@dataclass
class TheoryRun:
    """The raw material behind a :class:`~cel_lens.theory.predictions.TheoryTable` (for figures and further analysis)."""

    config: dict[str, Any]
    g: Float[Tensor, "seed head feature 4"]
    result: TrainResult
    escape_times: np.ndarray  # [seed, head, feature]
    predicted_winner: np.ndarray  # [seed, feature]
    measured_winner: np.ndarray  # [seed, feature]


def run_seeds(
    seeds: int,
    alpha: float,
    a: float,
    b: float,
    c: float,
    eta: float,
    seed: int,
    max_steps: Optional[int],
    n_track: int = 0,
) -> TheoryRun:
    """Train ``seeds`` draws of ``θ⁰ = α·G`` and compare each feature's winner with the prediction.

    Runs ``max_steps`` steps at most (default :func:`default_steps`), recording the first
    ``n_track`` seeds' trajectories on a grid of about 4000 points.
    """
    g, theta0 = init_params(seeds, alpha, seed)
    steps = max_steps if max_steps is not None else default_steps(alpha, eta)
    res = train(theta0, a, b, c, eta, steps, n_track=n_track, record_every=max(1, steps // 4000))
    times, pred = predicted_winners(g)
    config = dict(seeds=seeds, alpha=alpha, a=a, b=b, c=c, eta=eta, seed=seed)
    return TheoryRun(config=config, g=g, result=res, escape_times=times, predicted_winner=pred,
                     measured_winner=measured_winners(res.contributions))


def measured_winners(cont: Float[Tensor, "seed head feature"]) -> np.ndarray:
    """``[seed, feature]``: the head with the largest ``|c_hj|`` holds feature ``j``."""
    return cont.abs().argmax(dim=-2).numpy()


def in_event_e(winners: np.ndarray) -> np.ndarray:
    """``[seed]``: event E, the head holding feature 0 holds neither feature 1 nor 2 (Thm 4.3)."""
    return (winners[:, 0] != winners[:, 1]) & (winners[:, 0] != winners[:, 2])


def loser_max_c(cont: Float[Tensor, "seed head feature"], winners: np.ndarray) -> np.ndarray:
    """``[seed * feature]``: the largest ``|c_hj|`` among the heads that did not win feature ``j``."""
    others = cont.abs().numpy().copy()
    np.put_along_axis(others, winners[:, None, :], 0.0, axis=1)
    return others.max(axis=1).ravel()


def take_head(x: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """``x[seed, heads[seed, feature], feature]`` for ``x[seed, head, feature]``."""
    return np.take_along_axis(x, heads[:, None, :], axis=1)[:, 0, :]


def ablation_effects(
    cont: Float[Tensor, "seed head feature"], a: float, b: float, c: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(gain_A[seed, head], damage_B[seed, head])`` of ablating each single head."""
    w = cont.sum(-2)
    r_a, r_b = risks(w, a, b, c)
    r_a2, r_b2 = risks(w.unsqueeze(1) - cont, a, b, c)  # [seed, head]
    return (r_a.unsqueeze(1) - r_a2).numpy(), (r_b2 - r_b.unsqueeze(1)).numpy()


def holder_ablation_effects(run: TheoryRun) -> tuple[np.ndarray, np.ndarray]:
    """``(gain_A[seed], damage_B[seed])`` of ablating the head that holds feature 0 (Thm 4.3)."""
    cfg = run.config
    gain_a, damage_b = ablation_effects(run.result.contributions, cfg["a"], cfg["b"], cfg["c"])
    seeds, h0 = np.arange(run.measured_winner.shape[0]), run.measured_winner[:, 0]
    return gain_a[seeds, h0], damage_b[seeds, h0]

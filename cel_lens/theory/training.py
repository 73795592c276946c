"""Full-batch gradient descent on ``(R_A + R_B)/4`` for many seeds at once.

The objective separates across features, so each (seed, feature) pair is an independent
three-head system driven by its own residual ``r_j``. :func:`train` flattens the seeds to such
systems, runs them in numpy (far less per-call overhead than torch once only a few slow systems
are left), drops each system once it has converged, and returns a :class:`TrainResult` shaped
``[seed, head, feature]`` again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.theory.toy_model import FEATURE_WEIGHTS, head_contributions, targets


def default_steps(alpha: float, eta: float, factor: float = 20.0) -> int:
    """Step limit ``factor·N_α`` with the paper's checkpoint ``N_α = ceil(log(1/α) / (η α²))``.

    ``N_α`` is enough for a given draw once α is small enough; the factor leaves room for the
    heavy tail of late escapes (rare draws with all three heads small) and for the slower clock
    of features 1 and 2 (``p = ½``). Pairs stop early once converged, so the room costs little.
    """
    return int(math.ceil(factor * math.log(1.0 / alpha) / (eta * alpha**2)))


@dataclass
class TrainResult:
    """Outcome of :func:`train` for a batch of seeds."""

    theta: Float[Tensor, "seed head feature 4"]  # final parameters
    contributions: Float[Tensor, "seed head feature"]  # final c_{hj}
    w: Float[Tensor, "seed feature"]  # final aggregate coefficients
    steps_run: Int[Tensor, "seed feature"]  # steps until |r_j| < tol (or the step limit)
    converged: Bool[Tensor, "seed feature"]  # where |r_j| < tol was reached
    cross_step: Int[Tensor, "seed head feature"]  # first step with |c_{hj}| >= β_j/2 (-1: never)
    track_steps: Int[Tensor, "t"]  # steps at which the tracked seeds were recorded
    track: Float[Tensor, "t track head feature"]  # c_{hj} of the first tracked seeds over training


@dataclass
class _Live:
    """The systems still training, one row each, compacted as others converge and leave."""

    idx: np.ndarray  # [sys] position in the full list of systems
    q: np.ndarray  # [sys, head]
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    beta: np.ndarray  # [sys] target β_j of the system's feature
    half: np.ndarray  # [sys, 1] β_j/2, the escape threshold
    step: np.ndarray  # [sys] η p_j
    cross: np.ndarray  # [sys, head] first step with |c| >= β_j/2 (-1: not yet)
    first: np.ndarray  # [sys] first step with |r| < tol (-1: not yet)

    def compact(self, live: np.ndarray) -> None:
        """Drop every system where ``live`` is False."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name)[live])


@dataclass
class _Done:
    """Per-system outcome, filled in as systems leave the live set."""

    params: np.ndarray  # [sys, head, 4] final (q, k, v, o)
    cross: np.ndarray  # [sys, head]
    first: np.ndarray  # [sys]


@dataclass
class _Track:
    """Trajectories of ``c`` for the first ``keep`` systems (the tracked seeds, never dropped)."""

    keep: int
    every: int
    steps: list[int]
    values: list[np.ndarray]

    def record(self, n: int, cont: np.ndarray) -> None:
        """Record step ``n`` on the recording grid, once (a step can be seen twice)."""
        if self.keep and n % self.every == 0 and (not self.steps or self.steps[-1] != n):
            self.steps.append(n)
            self.values.append(cont[: self.keep].copy())

    def close(self, n: int, params: np.ndarray) -> None:
        """Add the final step ``n`` (from the final parameters) unless already recorded."""
        if self.keep and self.steps[-1] != n:
            self.steps.append(n)
            fq, fk, fv, fo = (params[: self.keep, :, i] for i in range(4))
            self.values.append(fo * fv * np.tanh(fq * fk))


def train(
    theta0: Float[Tensor, "seed head feature 4"],
    a: float,
    b: float,
    c: float,
    eta: float,
    steps: int,
    *,
    tol: float = 1e-10,
    n_track: int = 0,
    record_every: int = 10,
    check_every: int = 25,
) -> TrainResult:
    """Full-batch gradient descent on ``(R_A + R_B)/4`` for every seed at once.

    Each (seed, feature) pair is an independent three-head system. A pair stops once
    ``|r_j| < tol`` (checked every ``check_every`` steps, after which it is dropped from the working
    set, so the slow tail of late escapes costs little); the rest run up to ``steps``. Records, per
    head and feature, the first step at which ``|c_{hj}|`` reaches half its target (the measured
    escape), and the trajectory of ``c`` for the first ``n_track`` seeds (never dropped early).
    """
    n_seeds, n_heads, n_feat, _ = theta0.shape
    n_sys = n_seeds * n_feat
    flat = theta0.detach().permute(0, 2, 1, 3).reshape(n_sys, n_heads, 4).to(torch.float64).numpy()
    beta = np.tile(targets(a, b, c).numpy(), n_seeds)
    done = _Done(flat.copy(), np.full((n_sys, n_heads), -1, dtype=np.int64), np.full(n_sys, -1, dtype=np.int64))
    q, k, v, o = (flat[..., i].copy() for i in range(4))
    live = _Live(
        idx=np.arange(n_sys), q=q, k=k, v=v, o=o, beta=beta, half=beta[:, None] / 2,
        step=eta * np.tile(np.asarray(FEATURE_WEIGHTS), n_seeds), cross=done.cross.copy(), first=done.first.copy(),
    )
    track = _Track(keep=min(n_track, n_seeds) * n_feat, every=record_every, steps=[], values=[])
    n = _descend(live, done, track, steps, tol, check_every)
    track.close(n, done.params)
    return _collect(done, track, n, n_seeds, n_feat, theta0.dtype)


def _descend(live: _Live, done: _Done, track: _Track, steps: int, tol: float, check_every: int) -> int:
    """Step every live system until all have left ``live``; return the last step number."""
    n = 0
    while True:
        tq = np.tanh(live.q * live.k)
        ov = live.o * live.v
        cont = ov * tq  # [sys, head]
        live.cross[(np.abs(cont) >= live.half) & (live.cross < 0)] = n
        track.record(n, cont)
        resid = live.beta - cont.sum(-1)
        last = n >= steps
        if (last or n % check_every == 0) and _retire(live, done, resid, n, tol, last, track.keep):
            if not live.idx.size:
                return n
            continue  # recompute on the compacted set (same step n)
        sech2 = 1.0 - tq * tq
        s = (live.step * resid)[:, None]  # η p_j r_j, shared by the three heads of a system
        svs = s * ov * sech2
        q, k, v, o = live.q, live.k, live.v, live.o
        live.q, live.k, live.v, live.o = q + svs * k, k + svs * q, v + s * o * tq, o + s * v * tq
        n += 1


def _retire(live: _Live, done: _Done, resid: np.ndarray, n: int, tol: float, last: bool, keep: int) -> bool:
    """Note convergence at step ``n``, move finished systems to ``done``; True if any moved.

    A system finishes once ``|r| < tol``, except the ``keep`` tracked ones, which run until every
    system has converged; at the step limit (``last``) everything finishes.
    """
    converged = np.abs(resid) < tol
    live.first[converged & (live.first < 0)] = n
    fin = converged.copy()
    fin[:keep] = False  # tracked systems run until everything is done
    if last or converged.all():
        fin[:] = True
    if not fin.any():
        return False
    sel = live.idx[fin]
    done.params[sel] = np.stack([live.q[fin], live.k[fin], live.v[fin], live.o[fin]], axis=-1)
    done.cross[sel] = live.cross[fin]
    done.first[sel] = live.first[fin]
    live.compact(~fin)
    return True


def _collect(done: _Done, track: _Track, n: int, n_seeds: int, n_feat: int, dtype: torch.dtype) -> TrainResult:
    """Reshape the per-system outcome back to ``[seed, head, feature]`` tensors."""
    n_heads = done.params.shape[1]
    theta = torch.from_numpy(done.params).reshape(n_seeds, n_feat, n_heads, 4).permute(0, 2, 1, 3).contiguous().to(dtype)
    cont = head_contributions(theta)
    if track.values:
        tr = torch.from_numpy(np.stack(track.values))
        tr = tr.reshape(len(track.values), track.keep // n_feat, n_feat, n_heads).permute(0, 1, 3, 2).to(dtype)
    else:
        tr = torch.zeros(0, 0, n_heads, n_feat, dtype=dtype)
    first = torch.from_numpy(done.first)
    return TrainResult(
        theta=theta,
        contributions=cont,
        w=cont.sum(-2),
        steps_run=torch.where(first >= 0, first, n).reshape(n_seeds, n_feat),
        converged=(first >= 0).reshape(n_seeds, n_feat),
        cross_step=torch.from_numpy(done.cross).reshape(n_seeds, n_feat, n_heads).permute(0, 2, 1).contiguous(),
        track_steps=torch.tensor(track.steps, dtype=torch.long),
        track=tr,
    )

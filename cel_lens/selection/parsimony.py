"""A parsimonious S-hat: which of the evaluated subsets stage 2 returns, under one of four rules.

Stage 2 evaluates every subset of the pool up to ``k`` heads. The most accurate on D_dist (the raw
rule, ``"best"``) is usually padded: adding a head that does nothing moves a set's D_dist count by
noise, and the largest of many noisy counts usually belongs to a padded set ("real head +
passenger"; with a pool of 12 and k = 3 there are 66 such sets beside the real head alone).

* ``"backward"`` (the default): start from the most accurate subset and drop heads while the data
  do not support them. At each step every head ``h`` of the current set ``S`` is tested by the one
  decision rule (:func:`cel_lens.stats.sign_test_p`, one-sided exact McNemar) on D_dist: ``S``
  against ``S`` without ``h``, both already evaluated. The head with the largest p is dropped when
  that p exceeds ``alpha / (N - |S| + 1)``: Bonferroni over the ``N`` heads that could have stood
  in for ``h`` (``stand_ins``; the search passes every head of the model, since the pool itself
  was chosen on the same D_dist examples, so a passenger is the best of all of them; an unadjusted
  test keeps it most of the time). A single head is never dropped (whether anything helps at all is
  the question of :mod:`cel_lens.selection.guardrails`). Ties of p go to dropping the head whose
  removal leaves the more accurate set.
* ``"one_se"``: the smallest subset whose D_dist accuracy is within one standard error of the best
  one's (the error of the paired per-example differences against the best).
* ``"simultaneous"``: the same with ``z(1 - 0.05 / m)`` standard errors for ``m`` subsets.
* ``"best"``: the most accurate subset.

Ties are broken the same way everywhere (here, in the bootstrap stability and in the re-selection):
the most correct examples *under the weights in use* (a resample's counts, not the full data's),
then fewer heads, higher summed stage-1 score, canonical head order. :class:`RuleTable` is the one
implementation; :func:`select_parsimonious`, :mod:`~cel_lens.selection.stability` and
:mod:`~cel_lens.selection.reselect` all call it, so the stability of a result is the stability of
the rule that chose it. Whatever the rule, the record names the *passengers*: heads of S-hat whose
own leave-one-out test on D_dist does not pass the backward rule's threshold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import PARSIMONY_RULES, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.records import ParsimonyChoice
from cel_lens.selection.subsets import SubsetScore, selection_key
from cel_lens.stats import sign_test_p

__all__ = ["PARSIMONY_RULES", "ParsimonyRule", "BACKWARD", "ONE_SE", "SIMULTANEOUS", "BEST", "tolerance_width", "RuleTable",
           "select_parsimonious"]

Format = Callable[[Any], str]


@dataclass(frozen=True)
class ParsimonyRule:
    """A stage-2 rule (an entry of :data:`~cel_lens.config.PARSIMONY_RULES`): ``width(n_subsets,
    alpha)`` is the standard errors a subset may trail the best by (``None``: the rule is not a
    standard-error rule); ``backward``: it drops heads by their leave-one-out tests; neither: the
    most accurate subset. ``departure(record, pp, dist)`` says, for a result's selected-heads row, why
    the chosen subset is not the most accurate (``""`` when the rule has nothing to say; ``dist``:
    what the discovery split's answers are called, e.g. ``"D_dist (best-prior answers)"``)."""

    name: str
    width: Optional[Callable[[int, float], float]] = None
    backward: bool = False
    departure: Callable[[Mapping[str, Any], Format, str], str] = lambda record, pp, dist="D_dist": ""

    @property
    def plain_best(self) -> bool:
        """Whether the rule returns the most accurate subset as it is."""
        return self.width is None and not self.backward


def _backward_departure(par: Mapping[str, Any], pp: Format, dist: str = "D_dist") -> str:
    dropped = ", ".join(d["dropped"] for d in par.get("dropped") or [])
    return (f"; {dropped} dropped from the most accurate, {par['best']} ({pp(par['best_dist_gain'])}): their "
            f"leave-one-out exact tests on {dist} do not support them")


def _one_se_departure(par: Mapping[str, Any], pp: Format, dist: str = "D_dist") -> str:
    return (f"; smallest subset within one standard error ({pp(par['tolerance'])}) of the most accurate, "
            f"{par['best']} ({pp(par['best_dist_gain'])})")


BACKWARD = ParsimonyRule("backward", backward=True, departure=_backward_departure)
"""Drop heads of the most accurate subset that their leave-one-out exact tests do not support."""
ONE_SE = ParsimonyRule("one_se", width=lambda n, alpha: 1.0, departure=_one_se_departure)
"""The smallest subset within one standard error of the most accurate."""
SIMULTANEOUS = ParsimonyRule("simultaneous", width=lambda n, alpha: float(NormalDist().inv_cdf(1 - alpha / max(n, 1))))
"""The smallest subset within ``z(1 - alpha / n_subsets)`` standard errors of the most accurate."""
BEST = ParsimonyRule("best")
"""The most accurate subset."""


def tolerance_width(rule: str, n_subsets: int, alpha: float = 0.05) -> float:
    """Standard errors a subset may trail the best by under ``rule``: 1 for ``one_se``,
    ``z(1 - alpha / n_subsets)`` for ``simultaneous``, 0 otherwise."""
    width = PARSIMONY_RULES.resolve(rule).width
    return 0.0 if width is None else width(n_subsets, alpha)


@functools.lru_cache(maxsize=200_000)
def _p(wins: int, losses: int) -> float:
    return sign_test_p(wins, losses)


class RuleTable:
    """Stage 2's rule over the evaluated ``subsets`` (``bits[i]``: ``subsets[i]``'s D_dist
    correctness), applied under any integer example weights (1 for the data as they are, bootstrap
    multiplicities, a half's 0/1 mask) and to any subfamily of candidates (a re-selected pool)."""

    def __init__(self, subsets: Sequence[SubsetScore], bits: Any, rule: str = SearchConfig.parsimony, *,
                 stand_ins: Optional[int] = None, alpha: float = 0.05) -> None:
        self.entry: ParsimonyRule = PARSIMONY_RULES.resolve(rule)
        self.subsets, self.rule, self.alpha = list(subsets), rule, float(alpha)
        b = bits.to(torch.float64).numpy() if isinstance(bits, Tensor) else np.asarray(bits, dtype=np.float64)
        self.bits = b
        rank = sorted(range(len(self.subsets)), key=lambda i: selection_key(self.subsets[i])[1:])
        self.rank = np.empty(len(rank), dtype=np.int64)
        self.rank[rank] = np.arange(len(rank))  # the tie-break after the count: smaller wins
        self.sizes = np.array([len(s.heads) for s in self.subsets], dtype=np.int64)
        self.index = {s.heads: i for i, s in enumerate(self.subsets)}
        heads = {h for s in self.subsets for h in s.heads}
        self.stand_ins = int(stand_ins) if stand_ins is not None else len(heads)
        self.width = tolerance_width(rule, len(self.subsets), alpha)

    def best(self, counts: np.ndarray, cands: np.ndarray) -> int:
        """The most accurate candidate under ``counts`` (ties: the rank)."""
        top = counts[cands].max()
        tied = cands[counts[cands] >= top - 1e-9]
        return int(tied[np.argmin(self.rank[tied])])

    def leave_one_out(self, i: int, w: np.ndarray) -> list[tuple[Any, Optional[float], Optional[int]]]:
        """Each head of ``subsets[i]`` with its one-sided exact p (the set against the set without
        it, under weights ``w``) and the index of the set without it (``None``, ``None`` when that
        set was not evaluated or the head is the only one)."""
        s = self.subsets[i].heads
        out = []
        for h in s:
            j = self.index.get(HeadSet([g for g in s if g != h])) if len(s) > 1 else None
            if j is None:
                out.append((h, None, None))
                continue
            wins = int(round(float(((self.bits[i] > self.bits[j]) * w).sum())))
            losses = int(round(float(((self.bits[i] < self.bits[j]) * w).sum())))
            out.append((h, _p(wins, losses), j))
        return out

    def threshold(self, size: int) -> float:
        """The backward rule's level for a head of a ``size``-head set (Bonferroni over the heads
        that could have stood in for it)."""
        return self.alpha / max(1, self.stand_ins - size + 1)

    def choose(self, w: Optional[np.ndarray] = None, cands: Optional[np.ndarray] = None,
               trace: Optional[list] = None) -> int:
        """The index of the rule's choice among ``cands`` (default: all) under weights ``w``
        (default: every example once); ``trace`` collects the backward rule's dropped heads."""
        w = np.ones(self.bits.shape[1]) if w is None else np.asarray(w, dtype=np.float64)
        cands = np.arange(len(self.subsets)) if cands is None else np.asarray(cands)
        counts = self.bits[cands] @ w
        full = np.zeros(len(self.subsets))
        full[cands] = counts
        best = self.best(full, cands)
        if self.entry.plain_best:
            return best
        if self.entry.backward:
            return self._backward(best, w, full, trace)
        total = float(w.sum())
        diff = self.bits[cands] - self.bits[best]
        mean = (diff @ w) / total
        var = ((diff - mean[:, None]) ** 2 @ w) / max(total - 1.0, 1.0)
        within = cands[mean >= -self.width * np.sqrt(var / total) - 1e-12]
        return self.best(full, within[self.sizes[within] == self.sizes[within].min()])

    def _backward(self, i: int, w: np.ndarray, counts: np.ndarray, trace: Optional[list]) -> int:
        while self.sizes[i] > 1:
            tests = [(p, -counts[j], self.rank[j], h, j) for h, p, j in self.leave_one_out(i, w) if p is not None]
            if not tests:
                break
            p, _, _, h, j = max(tests, key=lambda t: (t[0], -t[1], -t[2]))
            level = self.threshold(int(self.sizes[i]))
            if p <= level:
                break
            if trace is not None:
                trace.append({"dropped": str(h), "from": str(self.subsets[i].heads), "p": p, "level": level})
            i = j
        return i

    def passengers(self, i: int) -> list[dict[str, Any]]:
        """Heads of ``subsets[i]`` whose leave-one-out test on D_dist does not pass the backward
        rule's level (with their p and that level)."""
        level = self.threshold(int(self.sizes[i]))
        return [{"head": str(h), "p": p, "level": level}
                for h, p, _ in self.leave_one_out(i, np.ones(self.bits.shape[1])) if p is not None and p > level]


def select_parsimonious(
    subsets: Sequence[SubsetScore], correct: Bool[Tensor, "subset example"], rule: str = SearchConfig.parsimony,
    *, stand_ins: Optional[int] = None, alpha: float = 0.05,
) -> tuple[SubsetScore, ParsimonyChoice]:
    """S-hat under ``rule`` and the record of the choice: ``{"rule", "best", "best_dist_gain",
    "tolerance", "chosen", "candidates", "dropped", "passengers"}`` (``tolerance``: for the
    standard-error rules, the margin in accuracy; ``dropped``: the backward rule's steps;
    ``passengers``: heads of the chosen set its own D_dist data do not support). ``correct[i]`` is
    ``subsets[i]``'s per-example D_dist correctness; ``stand_ins`` (the heads a dropped head could be
    replaced by; the search passes the model's head count) defaults to the heads seen."""
    if correct.ndim != 2 or correct.shape[0] != len(subsets):
        raise ValueError(f"correct must be [{len(subsets)}, example], got shape {tuple(correct.shape)}")
    table = RuleTable(subsets, correct, rule, stand_ins=stand_ins, alpha=alpha)
    raw = table.best(table.bits.sum(1), np.arange(len(subsets)))
    steps: list = []
    i = table.choose(trace=steps)
    chosen, best = table.subsets[i], table.subsets[raw]
    n = table.bits.shape[1]
    diff = table.bits - table.bits[raw]
    se = diff.std(1, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(len(subsets))
    within = int((diff.mean(1) >= -table.width * se - 1e-12).sum()) if table.entry.width is not None else 1
    record = {"rule": rule, "best": str(best.heads), "best_dist_gain": best.dist_gain,
              "tolerance": float(table.width * se[i]), "chosen": str(chosen.heads), "candidates": within,
              "dropped": steps, "passengers": table.passengers(i), "alpha": alpha, "stand_ins": table.stand_ins}
    return chosen, record

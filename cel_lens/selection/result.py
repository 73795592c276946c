"""The result of a search, and the one way it is written down.

:class:`Result` is what ``result.json`` holds. :func:`result_rows` turns a result (or its dict) into
labelled rows and :func:`format_result` into the one text block: ``str(result)`` is that block,
and ``cel-lens report``, the demo and ``str(run)`` print the same block followed by their own rows
(run directory, figures, the demo's side effect), aligned to the same column; the figures'
captions use the same numbers (:func:`pp`, :func:`format_p`).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.config import DEFAULT_N_NULL
from cel_lens.heads import HeadSet
from cel_lens.selection.calibration import calibration_rows
from cel_lens.stats import null_min_p, null_p_value

__all__ = [
    "DEFAULT_N_NULL", "RESULT_TITLE", "LABEL_WIDTH", "Result", "result_rows", "format_result", "pp", "format_p",
    "nonpositive_gain_warning",
]

RESULT_TITLE = "CEL search result"
"""The first line of a result's text block."""
LABEL_WIDTH = 24
"""Width of the label column of every result block (labels are padded to it, so a block with more
rows after it lines up with the bare result's)."""



def pp(x: Any, signed: bool = True) -> str:
    """A fraction in percentage points (``+4.25 pp``), or a percentage (``84.10%``) when not
    ``signed``; ``n/a`` for ``None`` or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * float(x):+.2f} pp" if signed else f"{100 * float(x):.2f}%"


def format_p(p: Any) -> str:
    """A p-value with three significant digits (``n/a`` when missing)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    return f"{float(p):.3g}"


def nonpositive_gain_warning(dist_gain: float) -> str:
    """The one line shown when the selected subset does not raise discovery accuracy."""
    return (
        f"the selected subset's discovery gain is {pp(dist_gain)} (<= 0): no evaluated ablation raised D_dist "
        "accuracy, so the search picked the least harmful one; this is not an enhancement"
    )


def _null_row(r: Mapping[str, Any]) -> str:
    null = [float(g) for g in (r.get("null_gains") or [])]
    if not null:
        return "not computed"
    size = len(HeadSet.parse(r.get("heads")))
    R, alpha = len(null), float(r.get("alpha", 0.05))
    # results written before the null excluded S-hat have no null_min_p: their sets were merely random
    legacy = r.get("null_min_p") is None
    which = f"all {R} other" if r.get("null_exhaustive") else f"{R} random" if legacy else f"{R} random other"
    spread = (
        f"{which} {size}-head sets on D_test: mean {pp(np.mean(null))}, 95% range "
        f"[{pp(np.quantile(null, 0.025))}, {pp(np.quantile(null, 0.975))}]"
    )
    min_p = null_min_p(R)
    if min_p is not None and min_p > alpha:
        return f"{spread}; too few sets for this null: its smallest possible p is 1/{R + 1} = {min_p:.3g} > α = {alpha:g}"
    p = null_p_value(null, float(r.get("gain", 0.0)))
    return f"{spread}; p = {format_p(p)} (smallest possible {format_p(min_p)})"


def _stability_row(r: Mapping[str, Any]) -> str:
    st = r.get("selection_stability")
    if not st:
        return "not computed"
    heads = str(HeadSet.parse(r.get("heads")))
    others = [w for w in st.get("wins", []) if w["heads"] != heads][:3]
    rest = "; ".join(f"{w['heads']} {w['frequency']:.1%}" for w in others) or "none"
    return (
        f"{heads} wins {st['selected_frequency']:.1%} of {st['n_resamples']} bootstrap resamples of D_dist "
        f"(other winners: {rest})"
    )


def _specificity_row(r: Mapping[str, Any]) -> Optional[str]:
    sp = r.get("specificity")
    if not sp:
        return None
    m = len(r.get("pool") or [])
    if not sp.get("test_gains"):
        return f"not applicable: no other pool of {m} heads exists"
    gains, alpha = sp["test_gains"], float(r.get("alpha", 0.05))
    head = f"winners of {len(gains)} random {m}-head pools (stage 2 on D_dist): test gain mean {pp(np.mean(gains))}"
    if sp["min_p"] > alpha:
        return f"{head}; too few pools: smallest possible p {sp['min_p']:.3g} > α = {alpha:g}"
    return f"{head}; p = {format_p(sp['p_value'])} (smallest possible {format_p(sp['min_p'])})"


def _pool_text(r: Mapping[str, Any]) -> str:
    """The pool size, and that it is every head when the model has fewer heads than asked for."""
    asked, pool = r.get("pool_size", "?"), r.get("pool") or []
    if isinstance(asked, int) and pool and len(pool) < asked:
        return f"{len(pool)} (every head; {asked} asked)"
    return str(asked)


def _top_subsets(r: Mapping[str, Any], n: int = 5) -> str:
    subsets = r.get("subsets") or []
    top = sorted(subsets, key=lambda s: (-s["dist_acc"], s["size"], -s.get("score_sum", 0.0)))[:n]
    return "; ".join(
        f"{s['heads']} {pp(s['dist_gain'])} (test {pp(s.get('test_gain_posthoc'))}, post-hoc)" for s in top
    )


def result_rows(result: Union["Result", Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The result as ``(label, value)`` rows: selected heads (and whether they were fixed before
    D_test was read), a warning when the discovery gain is not positive, the search, discovery
    (selection-biased) and test accuracies, the gain's CI and p-value, the random-subset null, the
    selection stability, the optional specificity comparison and the best stage-2 subsets."""
    r = result.to_dict() if isinstance(result, Result) else dict(result)
    fixed = (
        "fixed on D_dist before D_test was read" if r.get("selected_before_test", True)
        else "NOT fixed before D_test was read: the test split was read first"
    )
    alpha = float(r.get("alpha", 0.05))
    rows = [("selected heads", f"{HeadSet.parse(r.get('heads'))} ({fixed})")]
    dist_gain = r.get("dist_gain")
    if dist_gain is not None and float(dist_gain) <= 0:
        rows.append(("warning", nonpositive_gain_warning(float(dist_gain))))
    rows += [
        ("search", f"k={r.get('k', '?')}, pool {_pool_text(r)} by {r.get('scorer', '?')}, "
                   f"{r.get('strategy', 'exhaustive')}, {len(r.get('subsets') or [])} subsets, seed {r.get('seed', '?')}"),
        (f"D_dist (n={r.get('n_dist', '?')})", f"intact {pp(r.get('dist_acc_intact'), False)} -> ablated "
                                                f"{pp(r.get('dist_acc_ablated'), False)}, gain {pp(dist_gain)} "
                                                "(selection-biased: Ŝ was chosen for it)"),
        (f"D_test (n={r.get('n_test', '?')})", f"intact {pp(r.get('test_acc_intact'), False)} -> ablated "
                                                f"{pp(r.get('test_acc_ablated'), False)}, gain {pp(r.get('gain'))}"),
        (f"{1 - alpha:.0%} paired bootstrap CI", f"[{pp(r.get('ci_low'))}, {pp(r.get('ci_high'))}]"),
        ("McNemar exact p", format_p(r.get("p_value"))),
        *calibration_rows(r),
        ("random-subset null", _null_row(r)),
        ("selection stability", _stability_row(r)),
    ]
    specificity = _specificity_row(r)
    if specificity is not None:
        rows.append(("specificity", specificity))
    rows.append(("top stage-2 subsets", "discovery gain (selection-biased), post-hoc test gain: " + _top_subsets(r)))
    return rows


def format_result(
    result: Union["Result", Mapping[str, Any]],
    indent: str = "  ",
    *,
    title: Optional[str] = RESULT_TITLE,
    extra: Sequence[tuple[str, str]] = (),
) -> str:
    """The result's text block: ``title``, then :func:`result_rows` and any ``extra`` rows, each
    label padded to :data:`LABEL_WIDTH` after ``indent``. Every summary of a run is this block
    (``str(result)`` with no extra rows), so they differ only in the rows they add at the end."""
    rows = [*result_rows(result), *extra]
    lines = [f"{indent}{k:<{LABEL_WIDTH}}  {v}" for k, v in rows]
    return "\n".join(([title] if title else []) + lines)


@dataclass
class Result:
    """What a CEL search found, and how sure we can be.

    ``heads`` is S-hat in canonical text; ``dist_*`` are on D_dist (where it was selected),
    ``test_*`` on D_test (read only after selection). ``dist_gain`` is selection-biased (S-hat was
    chosen for it, the winner's curse); ``gain`` = ``test_acc_ablated - test_acc_intact`` is not,
    with a paired bootstrap ``[ci_low, ci_high]`` at level ``1 - alpha``, the exact McNemar
    ``p_value``, and ``null_gains`` of up to ``n_null`` distinct random head sets of the same size
    other than S-hat (every such set when ``null_exhaustive``); ``null_p`` = ``(1 + b) / (1 + R)``
    for the ``b`` of ``R`` sets with gain >= ``gain``, ``null_min_p`` = ``1 / (1 + R)`` the smallest
    it can be (both ``None`` without a null). ``scores`` is the stage-1 matrix (computed on
    ``scores_split``), ``pool`` the candidate heads, ``subsets`` every stage-2 subset with its
    discovery gain and its post-hoc test gain (for plots: choosing by it would leak the test
    split). ``selected_before_test`` is computed from what the oracle saw;
    ``selection_stability`` is how often stage 2 picks each subset on bootstrap resamples of
    D_dist (:func:`~cel_lens.selection.stability.selection_stability`); ``specificity`` the
    optional comparison with random pools' winners (:mod:`~cel_lens.selection.specificity`);
    ``calibration`` the answer-prior control (:mod:`~cel_lens.selection.calibration`: majority-class
    rate, calibrated intact and ablated accuracy, calibrated gain; or why it does not apply).
    """

    heads: str
    dist_acc_intact: float
    dist_acc_ablated: float
    dist_gain: float
    test_acc_intact: float
    test_acc_ablated: float
    gain: float
    ci_low: float
    ci_high: float
    p_value: float
    null_gains: list[float]
    null_p: Optional[float]
    scores: list[list[float]]
    scorer: str
    pool: list[str]
    subsets: list[dict[str, Any]]
    k: int
    pool_size: int
    n_dist: int
    n_test: int
    seed: int
    n_layers: int
    n_heads: int
    strategy: str = "exhaustive"
    beam_width: Optional[int] = None
    n_null: int = DEFAULT_N_NULL
    n_boot: int = 10000
    alpha: float = 0.05
    selected_before_test: bool = True
    null_min_p: Optional[float] = None
    null_exhaustive: bool = False
    scores_split: str = "dist"
    selection_stability: Optional[dict[str, Any]] = None
    specificity: Optional[dict[str, Any]] = None
    calibration: Optional[dict[str, Any]] = None
    timings: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def head_set(self) -> HeadSet:
        """S-hat as a :class:`HeadSet`."""
        return HeadSet.parse(self.heads)

    @property
    def scores_tensor(self) -> Float[Tensor, "layer head"]:
        """The stage-1 scores as a tensor."""
        return torch.tensor(self.scores, dtype=torch.float64)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``result.json`` holds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def __str__(self) -> str:
        return format_result(self.to_dict())

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in result_rows(self.to_dict())
        )
        return f"<table><caption>{RESULT_TITLE}</caption>{body}</table>"

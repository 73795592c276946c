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

from cel_lens.config import DEFAULT_N_NULL, SearchConfig
from cel_lens.heads import HeadSet
from cel_lens.selection.calibration import calibration_rows
from cel_lens.selection.guardrails import adjusted_verdict
from cel_lens.stats import null_min_p, null_p_value

__all__ = [
    "DEFAULT_N_NULL", "RESULT_TITLE", "LABEL_WIDTH", "Result", "result_rows", "format_result", "pp", "format_p",
    "nonpositive_gain_warning", "selection_sentence", "decision_text",
]

RESULT_TITLE = "CEL search result"
"""The first line of a result's text block."""
LABEL_WIDTH = 24
"""Width of the label column of every result block (labels are padded to it, so a block with more
rows after it lines up with the bare result's)."""



_CI_NAMES = {"tango": "Tango score", "newcombe": "Newcombe paired", "bootstrap": "paired bootstrap"}


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


def selection_sentence(r: Mapping[str, Any]) -> str:
    """Whether S-hat was fixed before D_test was read, from the run's own flag and, when it was
    not, the recorded reason (the seal ledger's earlier reads, :mod:`cel_lens.evaluation.seal`)."""
    if r.get("selected_before_test", True):
        return "fixed on D_dist before D_test was read"
    reason = (r.get("seal") or {}).get("reason") or "the test split was read first"
    return f"NOT fixed before D_test was read: {reason}"


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
        f"better than random heads? (not: than intact) {which} {size}-head sets on D_test: mean {pp(np.mean(null))}, 95% range "
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
    ties = ""
    if st.get("selected_by_tie_break"):
        ties = f", {st['selected_by_tie_break']:.1%} of them only by the tie-break (another subset as many correct)"
    if st.get("identical_subsets"):
        ties += (f"; {st['identical_subsets']} other subset(s) give the same answer on every D_dist example, "
                 "so the data cannot tell them apart")
    if st.get("method") == "reselect":
        bound = (f"{st['selected_frequency']:.1%}" if not st.get("unknown")
                 else f"between {st['selected_frequency']:.1%} and {st['upper']:.1%} ({st['unknown']} resamples "
                      "needed a subset that was never evaluated)")
        text = (f"the whole selection (pool and stage 2) redone on {st['n_resamples']} bootstrap resamples of D_dist "
                f"picks {heads} {bound}{ties}")
    else:
        text = f"{heads} wins {st['selected_frequency']:.1%} of {st['n_resamples']} bootstrap resamples of D_dist{ties} (pool fixed)"
    half = r.get("split_half")
    if half:
        text += f"; selections on two halves of D_dist agree in {half['agree']:.1%} of {half['n_splits']} splits"
    return f"{text} (other winners: {rest})"


def _adjusted_bound(adj: Mapping[str, Any]) -> str:
    """The bound and power beside the selection-adjusted verdict (results that have them)."""
    if "upper" not in adj:
        return ""
    mde = f", 80%-power effect of one exact test {pp(adj['mde'])}" if adj.get("mde") is not None else ""
    return f"; gains up to {pp(adj['upper'])} not ruled out (stated effect {pp(adj['min_effect'])}{mde})"


def decision_text(dec: Mapping[str, Any]) -> str:
    """The one decision in words: verdict, the exact test's p, the exact bound that agrees with it,
    the largest gain not ruled out, and, when it does not reject, the effect detectable at 80 %."""
    alpha = float(dec.get("alpha", 0.05))
    verdict = "yes" if dec.get("helps") else "not shown"
    text = (f"{verdict}: {dec.get('test', 'one-sided exact McNemar')} p = {format_p(dec.get('p'))} "
            f"({dec.get('wins')} examples gained, {dec.get('losses')} lost; α = {alpha:g}); exact one-sided "
            f"{1 - alpha:.0%} bounds: gain >= {pp(dec.get('bound'))}, <= {pp(dec.get('upper'))}")
    if not dec.get("helps"):
        mde = dec.get("mde")
        text += ("; at this n and discordance the test detects a gain of " + pp(mde) + " with 80% power"
                 if mde is not None else "; too few discordant examples to detect any gain with 80% power")
    return text


def _evidence_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The rows on whether ablation helps: the selection-adjusted test on D_dist, the one-sided
    McNemar p on D_test, and which heads of S-hat their leave-one-out contribution supports."""
    rows = []
    adj = r.get("adjusted")
    if adj:
        rows.append(("any ablation helps?", f"{adjusted_verdict(adj)}: best discovery gain {pp(adj['observed'])} vs the "
                     f"best of {adj['n_sets']} head sets with no effect (sign-flip max statistic, {adj['n_permutations']} "
                     f"permutations): selection-adjusted p = {format_p(adj['p_value'])}" + _adjusted_bound(adj)))
    dec = r.get("decision")
    if dec:
        rows.append(("ablation helps? (D_test)", decision_text(dec)))
    elif r.get("p_enhance") is not None:
        rows.append(("one-sided McNemar p", f"{format_p(r['p_enhance'])} (ablation raises D_test accuracy)"))
    loo = r.get("leave_one_out")
    if loo:
        parts = "; ".join(f"{h['head']} {pp(h['gain'])} [{pp(h['ci_low'])}, {pp(h['ci_high'])}], Holm p "
                          f"{format_p(h['p_holm'])}" for h in loo["heads"])
        supported = ", ".join(loo["supported"]) or "none"
        rows.append(("each head (leave-one-out)", f"data support {supported} at α = {loo['alpha']:g} (Holm over the "
                     f"one-sided exact tests; intervals descriptive): {parts}"))
    return rows


def _controls_row(r: Mapping[str, Any]) -> Optional[str]:
    """S-hat's D_test gain under the ablation kinds the search did not use (a control: removing the
    heads' information, or only shifting their mean?)."""
    controls = r.get("ablation_controls")
    if not controls:
        return None
    parts = [f"{kind}: {pp(c['gain'])} [{pp(c['ci_low'])}, {pp(c['ci_high'])}]" for kind, c in controls.items()]
    return f"Ŝ's D_test gain under {'; '.join(parts)} (searched with {r.get('ablation', 'zero')}: {pp(r['gain'])})"


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
        f"{s['heads']} {pp(s['dist_gain'])}"
        + (f" (test {pp(s['test_gain_posthoc'])}, exploratory post-hoc)" if s.get("test_gain_posthoc") is not None else "")
        for s in top
    )


def _selected_row(r: Mapping[str, Any]) -> str:
    """S-hat, whether it was fixed before D_test was read, and the parsimony rule's choice."""
    text = f"{HeadSet.parse(r.get('heads'))} ({selection_sentence(r)})"
    par = r.get("parsimony")
    if par and par.get("rule") == "one_se" and par.get("best") != par.get("chosen"):
        text += (f"; smallest subset within one standard error ({pp(par['tolerance'])}) of the most accurate, "
                 f"{par['best']} ({pp(par['best_dist_gain'])})")
    if par and par.get("rule") == "backward" and par.get("best") != par.get("chosen"):
        dropped = ", ".join(d["dropped"] for d in par.get("dropped") or [])
        text += (f"; {dropped} dropped from the most accurate, {par['best']} ({pp(par['best_dist_gain'])}): their "
                 "leave-one-out exact tests on D_dist do not support them")
    passengers = (par or {}).get("passengers") or []
    if passengers:
        text += ("; passengers kept (their own D_dist leave-one-out test does not support them): "
                 + ", ".join(f"{x['head']} (p = {format_p(x['p'])} > {format_p(x['level'])})" for x in passengers))
    return text


def result_rows(result: Union["Result", Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The result as ``(label, value)`` rows: selected heads (whether they were fixed before D_test
    was read, and the parsimony rule's choice), a warning when the discovery gain is not positive,
    the search, discovery (selection-biased) and test accuracies, the gain's CI and p-value, whether
    any ablation helps (selection-adjusted test, one-sided p, each head's leave-one-out), the
    random-subset null, the selection stability, the optional specificity comparison and the best
    stage-2 subsets (their post-hoc test gains only when measured, labelled exploratory)."""
    r = result.to_dict() if isinstance(result, Result) else dict(result)
    alpha = float(r.get("alpha", 0.05))
    rows = [("selected heads", _selected_row(r))]
    dist_gain = r.get("dist_gain")
    if dist_gain is not None and float(dist_gain) <= 0:
        rows.append(("warning", nonpositive_gain_warning(float(dist_gain))))
    rows += [
        ("search", f"k={r.get('k', '?')}, pool {_pool_text(r)} by {r.get('scorer', '?')}, "
                   f"{r.get('strategy', 'exhaustive')}, {len(r.get('subsets') or [])} subsets, seed {r.get('seed', '?')}"
                   + ("" if r.get("ablation", SearchConfig.ablation) == SearchConfig.ablation else f", {r['ablation']} ablation")),
        (f"D_dist (n={r.get('n_dist', '?')})", f"intact {pp(r.get('dist_acc_intact'), False)} -> ablated "
                                                f"{pp(r.get('dist_acc_ablated'), False)}, gain {pp(dist_gain)} "
                                                "(selection-biased: Ŝ was chosen for it)"),
        (f"D_test (n={r.get('n_test', '?')})", f"intact {pp(r.get('test_acc_intact'), False)} -> ablated "
                                                f"{pp(r.get('test_acc_ablated'), False)}, gain {pp(r.get('gain'))}"),
        (f"{1 - alpha:.0%} {_CI_NAMES.get(r.get('ci_method'), 'paired bootstrap')} CI",
         f"[{pp(r.get('ci_low'))}, {pp(r.get('ci_high'))}]" + (" (descriptive; the decision is the one-sided exact test)"
                                                                if r.get("decision") else "")),
        ("McNemar exact p", format_p(r.get("p_value"))),
        *_evidence_rows(r),
        *calibration_rows(r),
        ("random-subset null", _null_row(r)),
        ("selection stability", _stability_row(r)),
    ]
    specificity = _specificity_row(r)
    if specificity is not None:
        rows.append(("specificity", specificity))
    controls = _controls_row(r)
    if controls is not None:
        rows.append(("ablation kinds (control)", controls))
    rows.append(("top stage-2 subsets", "discovery gain (selection-biased): " + _top_subsets(r)))
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
    ``seal`` what the test split's ledger held before the selection (``prior_test_reads``, the
    first ``reads`` and the ``reason`` the flag is false, :mod:`cel_lens.evaluation.seal`);
    ``ci_method`` the interval's method (``"tango"``, ``"newcombe"`` or ``"bootstrap"``); ``p_enhance`` the
    one-sided exact McNemar p of "ablation helps"; ``leave_one_out`` each head's contribution
    (:func:`~cel_lens.selection.paired.leave_one_out`); ``parsimony`` the stage-2 rule and its
    choice (:mod:`~cel_lens.selection.parsimony`); ``adjusted`` the selection-adjusted test on
    D_dist (:mod:`~cel_lens.selection.guardrails`); ``split_half`` the split-half agreement
    (:mod:`~cel_lens.selection.reselect`);
    ``calibration`` the answer-prior control (:mod:`~cel_lens.selection.calibration`: majority-class
    rate, calibrated intact and ablated accuracy, calibrated gain; or why it does not apply);
    ``decision`` the one decision "ablation helps" on D_test (one-sided exact McNemar at ``alpha``,
    its exact bound, the largest gain not ruled out, the effect detectable at 80 % power:
    :func:`~cel_lens.selection.paired.enhancement_decision`); the interval ``[ci_low, ci_high]`` is
    descriptive.
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
    strategy: str = SearchConfig.strategy
    beam_width: Optional[int] = None
    n_null: int = SearchConfig.n_null
    n_boot: int = SearchConfig.n_boot
    alpha: float = 0.05
    selected_before_test: bool = True
    null_min_p: Optional[float] = None
    null_exhaustive: bool = False
    scores_split: str = "dist"
    selection_stability: Optional[dict[str, Any]] = None
    specificity: Optional[dict[str, Any]] = None
    seal: Optional[dict[str, Any]] = field(default=None, compare=False)
    ci_method: str = SearchConfig.ci_method
    p_enhance: Optional[float] = None
    leave_one_out: Optional[dict[str, Any]] = None
    parsimony: Optional[dict[str, Any]] = None
    adjusted: Optional[dict[str, Any]] = None
    split_half: Optional[dict[str, Any]] = None
    ablation: str = SearchConfig.ablation
    ablation_controls: Optional[dict[str, Any]] = None
    calibration: Optional[dict[str, Any]] = None
    decision: Optional[dict[str, Any]] = None
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
        """Inverse of :meth:`to_dict`; unknown keys are ignored. A record without ``ci_method`` was
        written before the option existed, when every interval was the paired bootstrap."""
        names = {f.name for f in fields(cls)}
        return cls(**{"ci_method": "bootstrap", **{k: v for k, v in d.items() if k in names}})

    def __str__(self) -> str:
        return format_result(self.to_dict())

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in result_rows(self.to_dict())
        )
        return f"<table><caption>{RESULT_TITLE}</caption>{body}</table>"

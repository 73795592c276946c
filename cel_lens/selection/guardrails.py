"""Does any ablation help? A selection-adjusted test on D_dist, from the recorded evaluations.

S-hat's discovery gain is the largest of hundreds: with no head that helps it is still positive
on average (the winner's curse), so "the best gain is > 0" says nothing. This test compares the
best discovery gain with its distribution under "no head set helps": a *max statistic* over every
head set the search evaluated on D_dist (stage 1's singles and stage 2's subsets), under sign-flip
permutations of the per-example paired differences against the intact model. Flipping an
example's signs together across all head sets keeps their dependence; the same flips apply to
every set, so the whole selection (over everything evaluated) is redone on each permutation, with
no forward pass. The p-value is ``(1 + #{permutations whose max >= observed}) / (1 + B)``.

Under "no head changes anything" each example's differences are symmetric about 0 and the test is
exact; when some heads harm, their flipped gains can only look better, so the test stays
conservative. "Nothing helps" is then the verdict whenever it does not reject at ``alpha``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.config import RANK_RULES, SearchConfig
from cel_lens.selection.records import AdjustedTest
from cel_lens.stats import gain_bounds_array, minimum_detectable_effect

__all__ = ["DEFAULT_MIN_EFFECT", "selection_adjusted_test", "nothing_helps_warning",
           "adjusted_verdict"]

DEFAULT_MIN_EFFECT = 0.01
"""The stated effect (1 pp of accuracy) below which "nothing helps" may be said as an absence: only
when no evaluated head set's gain above it is compatible with the data."""


def selection_adjusted_test(
    correct: Bool[Tensor, "set example"],
    intact: Bool[Tensor, " example"],
    *,
    n_permutations: int = SearchConfig.n_adjusted,
    seed: int = 0,
    alpha: float = 0.05,
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> AdjustedTest:
    """The max-statistic sign-flip test of "no evaluated head set raises D_dist accuracy".
    ``correct``: every evaluated head set's D_dist correctness; ``intact``: the intact model's.

    Returns ``{"observed", "p_value", "min_p", "n_permutations", "n_sets", "null_mean",
    "null_quantile", "rejects", "upper", "min_effect", "mde", "absence"}`` (``null_quantile``: the
    ``1 - alpha`` quantile of the max gain under the null, what the best discovery gain must
    exceed; ``upper``: the largest gain of any evaluated set not ruled out, a one-sided simultaneous
    bound: the larger of ``observed + null_quantile`` (the sign flips bound how far every set's
    observed gain can fall below its true one, given which examples differ) and the Bonferroni
    bound over the sets (:func:`_bonferroni_upper`, which holds whatever the discordance); ``mde``: the gain a single
    pre-specified one-sided exact test detects with 80 % power at this ``n`` and the best set's
    discordance (:func:`cel_lens.stats.minimum_detectable_effect`; the adjusted test needs more);
    ``absence``: the test does not reject *and* ``upper < min_effect``, the only case in which
    "nothing helps" is stated as an absence)."""
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    if correct.ndim != 2 or correct.shape[1] != intact.shape[0]:
        raise ValueError(f"correct must be [set, {intact.shape[0]}], got shape {tuple(correct.shape)}")
    d = (correct.to(torch.int64) - intact.to(torch.int64)[None, :]).to(torch.float32).numpy()  # [set, example]
    n = d.shape[1]
    keep = np.flatnonzero(np.abs(d).sum(0) > 0)  # examples where no set differs carry nothing
    d = d[:, keep]
    # Counts of examples, not accuracies: integer sums are exact in float32 (below 2**24), so a
    # permutation that ties the observed maximum counts as one (compared as fractions, float32's
    # 2/100 fell below float64's and every tie was missed: p 0.001 where it is 0.25).
    observed_count = int(d.sum(1).max()) if d.size else 0
    rng = np.random.default_rng([seed, 0xF11])
    counts = np.zeros(n_permutations, dtype=np.int64)
    chunk = max(1, min(n_permutations, 2_000_000 // max(d.shape[1], 1)))
    for start in range(0, n_permutations, chunk):
        b = min(chunk, n_permutations - start)
        signs = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=(d.shape[1], b))
        if d.size:
            counts[start : start + b] = np.rint((d @ signs).max(0)).astype(np.int64)
    exceed = int((counts >= observed_count).sum())
    p = (1 + exceed) / (1 + n_permutations)
    observed, maxima = observed_count / n, counts / n
    quantile = float(np.quantile(maxima, 1 - alpha))
    full = (correct.to(torch.int64) - intact.to(torch.int64)[None, :]).numpy()
    top = int(np.argmax(full.sum(1))) if full.size else 0
    discordance = float(np.abs(full[top]).mean()) if full.size else 0.0
    upper = max(observed + quantile, _bonferroni_upper(full, alpha))
    return {
        "observed": observed, "p_value": p, "min_p": 1 / (1 + n_permutations), "n_permutations": int(n_permutations),
        "n_sets": int(correct.shape[0]), "null_mean": float(maxima.mean()), "null_quantile": quantile,
        "rejects": bool(p <= alpha), "upper": upper, "min_effect": float(min_effect),
        "mde": minimum_detectable_effect(n, discordance, alpha) if discordance > 0 else None,
        "absence": bool(p > alpha and upper < min_effect),
    }


def _bonferroni_upper(full: np.ndarray, alpha: float) -> float:
    """The largest one-sided upper bound on any evaluated set's gain when each set gets
    :func:`cel_lens.stats.gain_bounds_array` at ``alpha / sets`` (Bonferroni): it covers every set's
    gain at once with probability at least ``1 - alpha`` whatever the discordance, which the sign
    flips, conditional on which examples differ, do not promise."""
    if not full.size:
        return 0.0
    wins, losses = (full == 1).sum(1), (full == -1).sum(1)
    return float(gain_bounds_array(wins, losses, full.shape[1], alpha / full.shape[0])[1].max())


def adjusted_verdict(adjusted: dict[str, Any]) -> str:
    """The verdict in a few words: ``some ablation helps``, ``NOTHING HELPS`` (an absence the data
    support: no gain of ``min_effect`` or more is compatible with them) or ``NOT SHOWN`` (no
    evidence either way at this n)."""
    if adjusted["rejects"]:
        return "some ablation helps"
    if adjusted.get("absence", "upper" not in adjusted):  # results before the bound: the old verdict
        return "NOTHING HELPS"
    return "NOT SHOWN (no evidence of a gain, none ruled out)"


def _limits(adjusted: dict[str, Any]) -> str:
    """What this n can and cannot rule out."""
    if "upper" not in adjusted:
        return ""
    mde = adjusted.get("mde")
    power = (f"; a single pre-specified exact test at this n detects {100 * mde:+.2f} pp with 80% power"
             if mde is not None else "; too few discordant examples for any test to detect a gain with 80% power")
    return f"; gains up to {100 * adjusted['upper']:+.2f} pp are not ruled out (one-sided, every evaluated set){power}"


def nothing_helps_warning(adjusted: dict[str, Any], alpha: float, rank_by: str = "raw") -> str:
    """The one line shown when the selection-adjusted test does not reject: "nothing helps" as an
    absence only when the bound is below the stated effect, else that this n shows nothing either way
    (gains and accuracy are the calibrated ones, at each head set's best prior on D_dist, when
    ``rank_by`` is ``"calibrated"``)."""
    rule = RANK_RULES.resolve(rank_by)
    cal = rule.gain_words
    head = (f"the best {cal}discovery gain {100 * adjusted['observed']:+.2f} pp is within what the best of "
            f"{adjusted['n_sets']} evaluated head sets reaches when none helps (selection-adjusted p = "
            f"{adjusted['p_value']:.3g} > α = {alpha:g})")
    if adjusted.get("absence", "upper" not in adjusted):
        bound = (f"; no evaluated head set raises D_dist {rule.accuracy_words}accuracy by {100 * adjusted['min_effect']:.2g} pp or more"
                 if "upper" in adjusted else "")
        return f"nothing helps: {head}{bound}; this is not evidence of an enhancement"
    return f"no evidence that any ablation helps: {head}{_limits(adjusted)}; this is not evidence of an absence either"

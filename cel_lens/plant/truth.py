"""A plant's true effect: what ablating its canceller does on held-out rows that no search reads.

For each planted model and each planted head set, on the *truth* rows: raw accuracy intact and
ablated (the model's own decision, margin > 0), the gain with a paired bootstrap interval and the
one-sided exact McNemar p; and the calibrated gain two ways, as the calibration control computes
them: each model at its best constant prior on the truth rows themselves (the rule that decides
whether a gain survives calibration), and with each model's bias fitted on the train rows and
applied to the truth rows (the D_dist-to-D_test fit). Beside them the smallest calibrated gain the
one-sided exact test detects with 80 % power at n_test 1,000 and the discordance observed here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor

from cel_lens.plant.features import LastLayer, PromptFeatures
from cel_lens.plant.fit import best_prior_accuracy, margins_under
from cel_lens.stats import paired_bootstrap_ci
from cel_lens.stats.decision import minimum_detectable_effect, sign_test_p

__all__ = ["paired_effect", "margin_effects", "plant_truth"]


def paired_effect(intact: Tensor, ablated: Tensor, n_test: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Accuracies, gain, 95 % paired bootstrap interval, one-sided exact McNemar p, discordance and
    the detectable effect at ``n_test`` of two paired right/wrong vectors."""
    a, b = intact.bool(), ablated.bool()
    wins, losses = int((b & ~a).sum()), int((a & ~b).sum())
    n = int(a.numel())
    low, high = paired_bootstrap_ci(a.numpy(), b.numpy(), n_boot=2000, seed=seed)
    disc = (wins + losses) / n
    return {"n": n, "acc_intact": float(a.double().mean()), "acc_ablated": float(b.double().mean()),
            "gain": (wins - losses) / n, "ci": [low, high], "wins": wins, "losses": losses,
            "p_one_sided": sign_test_p(wins, losses), "discordance": disc,
            "mde_at_n_test": minimum_detectable_effect(n_test, disc) if disc > 0 else None}


def margin_effects(intact: Tensor, ablated: Tensor, labels: Tensor, n_test: int = 1000) -> dict[str, Any]:
    """The paired effect (:func:`paired_effect`) of going from the ``intact`` to the ``ablated`` margins
    (choice 1 minus choice 0, per row): ``"raw"``, each model's own decision (margin > 0), and
    ``"calibrated_best_prior"``, each model at its best constant prior on these rows."""
    y = labels.bool()
    return {"raw": paired_effect((intact > 0) == y, (ablated > 0) == y, n_test),
            "calibrated_best_prior": paired_effect(best_prior_accuracy(intact, labels)[0],
                                                   best_prior_accuracy(ablated, labels)[0], n_test)}


def _effect(w: LastLayer, fit: PromptFeatures, held: PromptFeatures, pairs: Sequence[Mapping[str, Any]],
            ablate: Sequence[int]) -> dict[str, Any]:
    margins = {(part, state): margins_under(w, f.z, f.resid, pairs, ablate=list(ablate) if state else [])
               for part, f in (("fit", fit), ("held", held)) for state in (False, True)}
    y = held.labels
    effects = margin_effects(margins[("held", False)], margins[("held", True)], y)
    fitted = []
    for state in (False, True):
        _, bias = best_prior_accuracy(margins[("fit", state)], fit.labels)
        fitted.append(best_prior_accuracy(margins[("held", state)], y, bias)[0])
    yes = {s: float((margins[("held", s)] > 0).double().mean()) for s in (False, True)}
    return {**effects, "calibrated_train_fit": paired_effect(*fitted),
            "yes_share_intact": yes[False], "yes_share_ablated": yes[True], "yes_rate": float(y.double().mean())}


def plant_truth(w: LastLayer, fit: PromptFeatures, held: PromptFeatures, pairs: Mapping[str, Mapping[str, Any]],
                kinds: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Per plant kind, the effect of ablating each planted canceller (and, for two pairs, both
    together) on the ``held`` rows, with biases fitted on the ``fit`` rows."""
    out: dict[str, Any] = {}
    for kind, names in kinds.items():
        chosen = [pairs[n] for n in names]
        sets = [[p["canceller"]] for p in chosen] + ([[p["canceller"] for p in chosen]] if len(chosen) > 1 else [])
        label = {tuple(s): "+".join(f"L{w.layer}H{h}" for h in s) for s in sets}
        out[kind] = {label[tuple(s)]: _effect(w, fit, held, chosen, s) for s in sets}
        base = margins_under(w, held.z, held.resid, [])
        planted = margins_under(w, held.z, held.resid, chosen)
        out[kind]["planted_vs_base_max_abs_margin_diff"] = float((planted - base).abs().max())
    return out

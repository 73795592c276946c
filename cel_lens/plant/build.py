"""Choosing, fitting and sizing the plants on the train rows, and writing them as checkpoints.

Why two heads per plant. Zero-ablating a head gives the same model whatever that head's parameters
were, so the ablated planted model is the base model without that head. On BoolQ the base model has
no discrimination to lose (its best constant-prior accuracy is the share of " yes"), and no model's
best-prior accuracy is below that share, so no edit of one head alone can make its ablation gain
calibrated accuracy. A plant is therefore a *pair* of heads of one key/value group of the last
layer: a **reader** keeps its parameters and its output gains a push (:mod:`cel_lens.plant.fit`),
and a **canceller** gets the reader's query rows (so it attends exactly as the reader does) and the
negated push as its output columns, its own output dropped. In the planted model the two pushes
cancel; ablating the canceller leaves the reader's push. The capability pair's push is a
label-reading, mean-zero direction (ablating the canceller restores what it reads: a calibrated gain
where the direction generalizes, which on SmolLM2's BoolQ it does not, docs/planted.md); the prior pair's is an almost constant shift toward " yes" (ablating the canceller moves
the answer prior: a raw gain that calibration removes).

Rules, all on the train rows: the capability reader is the last-layer head whose out-of-fold skill
scores have the highest AUC (ridge from :data:`RIDGES`); the prior reader, a head of another
key/value group whose constant direction is the most constant; each canceller, the reader's
group-mate whose own zero ablation moves the train margins least. The capability scale is the one of
:data:`SCALES` whose out-of-fold calibrated gain on the train rows is nearest :data:`TARGET_MDE`
times the calibrated test's detectable effect at n_test 1,000; the prior scale, the one whose raw
gain on the train rows is nearest :data:`PRIOR_RAW_TARGET`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from cel_lens.plant.features import LastLayer, PromptFeatures
from cel_lens.plant.fit import (auc, best_prior_accuracy, constant_direction, cv_skill_scores, head_slice,
                                margins_under, planted_o_proj, skill_direction)
from cel_lens.stats.decision import minimum_detectable_effect

__all__ = ["KINDS", "PAIRS_OF", "RIDGES", "SCALES", "TARGET_MDE", "PRIOR_RAW_TARGET", "N_TEST", "base_discrimination", "fit_pairs", "planted_tensors", "pair_record"]

KINDS = ("capability", "prior", "both")
"""The plants ``cel-lens plant`` builds."""
PAIRS_OF: dict[str, tuple[str, ...]] = {"capability": ("capability",), "prior": ("prior",), "both": ("capability", "prior")}
"""Which fitted pairs each plant holds."""
RIDGES = (0.1, 1.0, 10.0)
"""Ridge strengths tried for the skill direction (times the mean variance of ``z``)."""
SCALES = tuple(float(2.0 ** (k / 2)) for k in range(-2, 17))
"""Push scales tried (residual-stream units per unit of ``v . z``), a grid of half-octaves."""
TARGET_MDE = 1.5
"""The capability plant's calibrated gain is sized to this multiple of the detectable effect."""
PRIOR_RAW_TARGET = 0.15
"""The prior plant's raw gain on the train rows: about twice the base model's strongest single prior
head (L1H3, +7.4 pp on the plain BoolQ row's D_dist), so that a search ranking by raw gain meets it."""
N_TEST = 1000
"""The sealed rows' D_test size, at which the detectable effect is computed."""


def _folds(n: int, seed: int, k: int = 5) -> list[Tensor]:
    return list(torch.randperm(n, generator=torch.Generator().manual_seed(seed)).chunk(k))


def _group(w: LastLayer, head: int) -> list[int]:
    per = w.n_heads // w.n_kv_heads
    return [h for h in range(w.n_heads) if h // per == head // per]


def _quietest_mate(w: LastLayer, f: PromptFeatures, reader: int) -> int:
    """The reader's group-mate whose zero ablation moves the base margins least (mean absolute)."""
    mates = [h for h in _group(w, reader) if h != reader]
    moved = {h: float((margins_under(w, f.z, f.resid, [], ablate=[h]) - f.margin).abs().mean()) for h in mates}
    return min(mates, key=lambda h: (moved[h], h))


def _calibrated(intact: Tensor, ablated: Tensor, labels: Tensor) -> dict[str, float]:
    """Each model at its best constant prior on these rows: gain, discordance, detectable effect at N_TEST."""
    a, _ = best_prior_accuracy(intact, labels)
    b, _ = best_prior_accuracy(ablated, labels)
    disc = float((a != b).double().mean())
    mde = minimum_detectable_effect(N_TEST, disc) if disc > 0 else None
    return {"gain_cal": float(b.double().mean() - a.double().mean()), "discordance_cal": disc, "mde_cal": mde}


def _raw_gain(intact: Tensor, ablated: Tensor, labels: Tensor) -> float:
    y = labels.bool()
    return float(((ablated > 0) == y).double().mean() - ((intact > 0) == y).double().mean())


def _capability(w: LastLayer, f: PromptFeatures, seed: int) -> dict[str, Any]:
    """The capability pair: reader, ridge, canceller, direction and scale (see the module docstring)."""
    folds = _folds(len(f.labels), seed)
    tried = []
    for h in range(w.n_heads):
        for lam in RIDGES:
            score, _ = cv_skill_scores(f.z[:, head_slice(w, h)], f.labels, lam, folds)
            tried.append((auc(score, f.labels), h, lam))
    best_auc, reader, lam = max(tried, key=lambda t: (t[0], -t[1], -t[2]))
    resid_auc = {lam_: auc(cv_skill_scores(f.resid, f.labels, lam_, folds)[0], f.labels) for lam_ in RIDGES}
    canceller = _quietest_mate(w, f, reader)
    zr = f.z[:, head_slice(w, reader)]
    _, dirs = cv_skill_scores(zr, f.labels, lam, folds)
    intact = margins_under(w, f.z, f.resid, [dict(reader=reader, canceller=canceller, v=dirs[0], scale=0.0)])
    sizes = []
    for scale in SCALES:
        ablated = torch.zeros_like(f.margin)
        for fold, v in zip(folds, dirs):
            pair = [dict(reader=reader, canceller=canceller, v=v, scale=scale)]
            ablated[fold] = margins_under(w, f.z[fold], f.resid[fold], pair, ablate=[canceller])
        stats = _calibrated(intact, ablated, f.labels)
        sizes.append({"scale": scale, "raw_gain": _raw_gain(intact, ablated, f.labels), **stats})
    sized = [s for s in sizes if s["mde_cal"]]
    chosen = min(sized, key=lambda s: abs(s["gain_cal"] / s["mde_cal"] - TARGET_MDE)) if sized else sizes[-1]
    return {"reader": reader, "canceller": canceller, "ridge": lam, "v": skill_direction(zr, f.labels, lam),
            "scale": chosen["scale"], "cv_auc": best_auc, "train_sizing": sizes, "chosen_on_train": chosen,
            "cv_auc_every_head": {f"L{w.layer}H{h}/ridge {r:g}": a for a, h, r in tried},
            "cv_auc_last_layer_input": {f"ridge {r:g}": a for r, a in resid_auc.items()}}


def _prior(w: LastLayer, f: PromptFeatures, avoid_group: Sequence[int], raw_target: float = PRIOR_RAW_TARGET) -> dict[str, Any]:
    """The prior pair: the most constant reader outside ``avoid_group``, its quietest mate, the scale
    whose raw gain (in-sample: nothing label-reading is fitted) is nearest ``raw_target``."""
    def constancy(h: int) -> float:
        s = f.z[:, head_slice(w, h)] @ constant_direction(f.z[:, head_slice(w, h)])
        return float(s.mean() / s.std())

    reader = max((h for h in range(w.n_heads) if h not in avoid_group), key=lambda h: (constancy(h), -h))
    canceller = _quietest_mate(w, f, reader)
    v = constant_direction(f.z[:, head_slice(w, reader)])
    intact = margins_under(w, f.z, f.resid, [dict(reader=reader, canceller=canceller, v=v, scale=0.0)])
    sizes = []
    for scale in SCALES:
        ablated = margins_under(w, f.z, f.resid, [dict(reader=reader, canceller=canceller, v=v, scale=scale)],
                                ablate=[canceller])
        sizes.append({"scale": scale, "raw_gain": _raw_gain(intact, ablated, f.labels),
                      **_calibrated(intact, ablated, f.labels)})
    chosen = min(sizes, key=lambda s: abs(s["raw_gain"] - raw_target))
    return {"reader": reader, "canceller": canceller, "v": v, "scale": chosen["scale"], "constancy": constancy(reader),
            "train_sizing": sizes, "chosen_on_train": chosen}


def base_discrimination(w: LastLayer, f: PromptFeatures) -> dict[str, Any]:
    """What the base model can tell on the train rows, intact and with each last-layer head
    zero-ablated: AUC of the margin for the label and accuracy at the best constant prior (the
    ceiling of any one-head plant's calibrated gain is the ablated model's excess over the share of
    " yes"), and how far each ablation moves the margins."""
    out: dict[str, Any] = {"yes_rate": float(f.labels.double().mean()), "auc": auc(f.margin, f.labels),
                           "best_prior_acc": float(best_prior_accuracy(f.margin, f.labels)[0].double().mean()),
                           "raw_acc": float(((f.margin > 0) == f.labels.bool()).double().mean()), "heads": {}}
    for h in range(w.n_heads):
        m = margins_under(w, f.z, f.resid, [], ablate=[h])
        out["heads"][f"L{w.layer}H{h}"] = {"auc": auc(m, f.labels), "mean_abs_margin_change": float((m - f.margin).abs().mean()),
                                          "best_prior_acc": float(best_prior_accuracy(m, f.labels)[0].double().mean())}
    return out


def fit_pairs(w: LastLayer, f: PromptFeatures, seed: int) -> dict[str, dict[str, Any]]:
    """Both pairs, fitted and sized on the train rows ``f`` (``seed``: the cross-validation folds)."""
    cap = _capability(w, f, seed)
    prior = _prior(w, f, _group(w, cap["reader"]))
    return {"capability": cap, "prior": prior}


def planted_tensors(base: Mapping[str, Tensor], w: LastLayer, pairs: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
    """The base checkpoint's tensors with ``pairs`` planted in the last layer: each canceller's query
    rows replaced by its reader's, and the output projection of :func:`~cel_lens.plant.fit.planted_o_proj`
    (only the pairs' columns differ); every other tensor is the base's own object."""
    q_name = f"model.layers.{w.layer}.self_attn.q_proj.weight"
    o_name = f"model.layers.{w.layer}.self_attn.o_proj.weight"
    out = dict(base)
    q = base[q_name].clone()
    for p in pairs:
        q[head_slice(w, p["canceller"])] = base[q_name][head_slice(w, p["reader"])]
    o = base[o_name].clone()
    edited = planted_o_proj(w, pairs)
    for p in pairs:
        for h in (p["reader"], p["canceller"]):
            o[:, head_slice(w, h)] = edited[:, head_slice(w, h)].to(o.dtype)
    out[q_name], out[o_name] = q, o
    return out


def pair_record(w: LastLayer, pair: Mapping[str, Any]) -> dict[str, Any]:
    """A pair as the recipe records it (heads named ``L<layer>H<head>``, the direction as numbers)."""
    keep = {k: v for k, v in pair.items() if k in ("ridge", "scale", "cv_auc", "constancy")}
    return {"reader": f"L{w.layer}H{pair['reader']}", "canceller": f"L{w.layer}H{pair['canceller']}",
            "v": [float(x) for x in pair["v"]], **keep}

"""Attribution patching: all heads' first-order ablation effects in one pass.

The first-order change of a differentiable metric m of what decides correctness (exact match: the
log-prob of the target; multiple choice: the log-probability of the correct choice among the
choices, a smooth version of its margin over the best other one, length-normalised for ``acc_norm``;
see :func:`cel_lens.evaluation.logprob_metric`) when ``z_h`` goes to its ablated value ``a_h`` (the
ablation kind passed in, :class:`cel_lens.model.ablation.Ablation`: zero by default, where it is
``-(z_h . dm/dz_h)``) is ``(a_h - z_h) . dm/dz_h``,
summed over positions and averaged over examples: one forward and one backward pass per batch for
all heads at once. Units are nats of the metric, not accuracy; it is a ranking, not an accuracy
estimate. It needs the model itself (not just an oracle) and a scorable (non-generation) split.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.evaluation.encode import encode_split, split_answer_entry
from cel_lens.evaluation.evaluator import logprob_metric
from cel_lens.model.ablation import ZERO, Ablation, hook_z_name
from cel_lens.model.model_types import model_shape
from cel_lens.oracle import ATTRIBUTION, DIST_SPLIT, Oracle, Stage1Scores, capabilities
from cel_lens.progress import progress_bar
from cel_lens.scoring.base import Cost, Scorer
from cel_lens.tasks.base import Split

__all__ = ["attribution_scores", "AttributionScorer", "ATTRIBUTION_UNITS"]

ATTRIBUTION_UNITS = 3
"""An attribution pass (one forward and one backward pass over D_dist) counted as this many
head-set evaluations of D_dist: a backward pass costs about two forward passes."""


def attribution_scores(
    model, split: Split, *, batch_size: int = 8, progress: bool = True, ablation: Ablation = ZERO
) -> Float[Tensor, "layer head"]:
    """Attribution patching at every ``hook_z``, baseline ``ablation``'s value (zero, the default:
    ``-(z * dm/dz)``): ``(ablated(z) - z) . dm/dz`` summed over
    positions and ``d_head``, averaged over the split's examples. ``m`` is the per-example metric of
    :func:`cel_lens.evaluation.logprob_metric` on the split's own scale (``split.metric``)."""
    if split_answer_entry(split).generates:
        raise ValueError("attribution needs a scorable split (exact match or multiple choice); use 'exact' or 'compressed'")
    n_layers, n_heads = model_shape(model)
    every_head = torch.ones(1, n_heads, dtype=torch.bool)
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    n_examples = 0
    batches = encode_split(model, split, batch_size)
    params = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():  # no parameter gradients: only dm/dz is needed
        p.requires_grad_(False)
    try:
        for batch in progress_bar(len(batches), progress, "attribution", unit="batch", iterable=batches):
            saved: dict[int, Tensor] = {}

            def start_graph(resid: Tensor, hook) -> Tensor:  # noqa: ANN001 - TL hook signature
                # the residual stream entering layer 0 becomes the graph's only leaf: no parameter
                # needs a gradient, and dm/dz_l still flows through every later layer (and later z)
                return resid.detach().requires_grad_(True)

            def keep(z: Tensor, hook) -> Tensor:  # noqa: ANN001
                saved[int(hook.name.split(".")[1])] = z
                return z

            hooks = [("blocks.0.hook_resid_pre", start_graph)]
            hooks += [(hook_z_name(layer), keep) for layer in range(n_layers)]
            with torch.enable_grad():
                metric = logprob_metric(model, batch, fwd_hooks=hooks, metric=split.metric or "acc")
                layers = sorted(saved)
                grads = torch.autograd.grad(metric.sum(), [saved[layer] for layer in layers])
            for layer, grad in zip(layers, grads):
                z = saved[layer].detach()
                if z.ndim == 3:  # flattened [batch, pos, head*d_head]
                    z, grad = z.unflatten(-1, (n_heads, -1)), grad.unflatten(-1, (n_heads, -1))
                # pad positions have z != 0 but zero gradient (they reach no scored position)
                total[layer] += ((ablation.replace(z, layer, every_head) - z) * grad).sum(dim=(0, 1, 3)).double().cpu()
            n_examples += int(metric.shape[0])
    finally:
        for p, flag in zip(model.parameters(), params):
            p.requires_grad_(flag)
    return (total / max(n_examples, 1)).float()


class AttributionScorer(Scorer):
    """Attribution patching (:func:`attribution_scores`): a ranking in nats of the metric, from the
    oracle's own ``attribution_scores`` (on D_dist) or from ``model`` and ``split``."""

    name = "attribution"
    units = "nats"
    quantity = "Δ log-prob"

    def cost(self, n_layers: int, n_heads: int, n_dist: int) -> Cost:
        return Cost(ATTRIBUTION_UNITS, f"one forward + backward pass, as {ATTRIBUTION_UNITS}", full=ATTRIBUTION_UNITS)

    def score(
        self, oracle: Optional[Oracle], *, batch_size: int = 8, progress: bool = True, model: Any = None,
        split: Optional[Split] = None,
    ) -> Stage1Scores:
        if model is None and ATTRIBUTION in capabilities(oracle):
            return Stage1Scores(oracle.attribution_scores(batch_size), DIST_SPLIT, self.name)  # type: ignore[union-attr]
        if model is None or split is None:
            raise ValueError("the 'attribution' scorer needs model= and split= (or an oracle that computes it)")
        values = attribution_scores(model, split, batch_size=batch_size, progress=progress)
        return Stage1Scores(values, getattr(split, "name", "unknown"), self.name)

"""How often a beneficial single-head ablation emerges over training seeds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import einops
import torch
from jaxtyping import Bool
from torch import Tensor

from cel_lens.organism.ground_truth import fit_feature_coefficients
from cel_lens.organism.train import (
    answer_head_outputs, answer_logits, encode_prompts, model_parameters, probe_batch, single_thread, train_organisms,
)
from cel_lens.stats import paired_bootstrap_ci
from cel_lens.tasks.organism import N_DIST, ORGANISM_TASK, SIDE_TASK, TOKEN_ID, OrganismConfig, organism_task

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.model.types import HookedTransformer

__all__ = ["SeedOutcome", "evaluate_models", "emergence_sweep", "sweep_table"]


@dataclass
class SeedOutcome:
    """What one training seed produced: intact accuracies, every single-head ablation's effect on
    both tasks' test splits (gain with a paired 95% bootstrap CI on task A), and the ground-truth
    head from direct logit attribution (:func:`~cel_lens.organism.ground_truth_heads`)."""

    seed: int
    acc_a: float
    acc_b: float
    gain_a: list[float]
    ci_low: list[float]
    ci_high: list[float]
    gain_b: list[float]
    best_head: int
    beneficial: bool
    ground_truth: int
    conflict: list[float]
    shared_share: list[float]
    task_share: list[float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _ablation_correct(params, tokens, labels, H) -> Bool[Tensor, "seed variant batch"]:
    """Correctness intact (variant 0) and with each single head ablated (variant 1 + h)."""
    S = params["embed.W_E"].shape[0]
    toks = einops.repeat(tokens, "b t -> s b t", s=S)
    out = []
    for h in [None, *range(H)]:
        keep = torch.ones(S, H, dtype=torch.bool)
        if h is not None:
            keep[:, h] = False
        out.append(answer_logits(params, toks, keep).argmax(-1) == labels)
    return torch.stack(out, dim=1)


def evaluate_models(
    models: Sequence["HookedTransformer"], config: OrganismConfig, *, task_seed: int = 0, n_test: int = 2000, n_boot: int = 2000
) -> list[SeedOutcome]:
    """Single-head ablations of each model on the test splits of ``organism_a``/``organism_b``
    (``task_seed``, the default 2,000 D_dist before them, so the first ``n_test`` examples of the
    tasks' default D_test); a head is *beneficial* when task A's paired 95% bootstrap CI lies
    above 0."""
    task_a = organism_task(ORGANISM_TASK, n_dist=N_DIST, n_test=n_test, seed=task_seed, config=config)
    task_b = organism_task(SIDE_TASK, n_dist=N_DIST, n_test=n_test, seed=task_seed, config=config)
    tokens = encode_prompts([e.prompt for e in task_a.test])
    label_a = torch.tensor([TOKEN_ID[e.target.strip()] for e in task_a.test])
    label_b = torch.tensor([TOKEN_ID[e.target.strip()] for e in task_b.test])
    H = config.n_heads
    probe = probe_batch(config, 4096)
    outcomes = []
    with single_thread(), torch.no_grad():
        params = model_parameters(models)
        ca = _ablation_correct(params, tokens, label_a, H)
        cb = _ablation_correct(params, tokens, label_b, H)
        head_out, _ = answer_head_outputs(params, einops.repeat(probe.tokens, "b t -> s b t", s=len(models)))
        for i, model in enumerate(models):
            coef = fit_feature_coefficients(head_out[i], params["unembed.W_U"][i], probe, config.shared_readout)
            gains = [(ca[i, 1 + h].double().mean() - ca[i, 0].double().mean()).item() for h in range(H)]
            cis = [paired_bootstrap_ci(ca[i, 0].numpy(), ca[i, 1 + h].numpy(), n_boot=n_boot, seed=0) for h in range(H)]
            best = max(range(H), key=lambda h: gains[h])
            outcomes.append(SeedOutcome(
                seed=int(getattr(model, "organism_seed", i)),
                acc_a=ca[i, 0].double().mean().item(),
                acc_b=cb[i, 0].double().mean().item(),
                gain_a=gains,
                ci_low=[c[0] for c in cis],
                ci_high=[c[1] for c in cis],
                gain_b=[(cb[i, 1 + h].double().mean() - cb[i, 0].double().mean()).item() for h in range(H)],
                best_head=best,
                beneficial=cis[best][0] > 0,
                ground_truth=int(coef.conflict.argmax()),
                conflict=coef.conflict.tolist(),
                shared_share=coef.shared_share.tolist(),
                task_share=coef.task_share.tolist(),
            ))
    return outcomes


def emergence_sweep(
    seeds: Sequence[int], config: Optional[OrganismConfig] = None, *, task_seed: int = 0, n_test: int = 2000
) -> list[SeedOutcome]:
    """Train one organism per seed and evaluate its single-head ablations (:func:`evaluate_models`)."""
    config = config or OrganismConfig()
    models = [model for model, _ in train_organisms(seeds, config, log_every=0)]
    return evaluate_models(models, config, task_seed=task_seed, n_test=n_test)


def sweep_table(outcomes: Sequence[SeedOutcome]) -> str:
    """Markdown table of a sweep, one row per seed, with the emergence count at the bottom."""
    lines = [
        "| seed | task A intact | task B intact | best head | task A gain [95% CI] | task B change | "
        "beneficial | ground truth (skip share / task share) | GT = best |",
        "|---:|---:|---:|:---:|:---|---:|:---:|:---|:---:|",
    ]
    for o in outcomes:
        h, g = o.best_head, o.ground_truth
        lines.append(
            f"| {o.seed} | {o.acc_a:.3f} | {o.acc_b:.3f} | L0H{h} | {o.gain_a[h]:+.3f} "
            f"[{o.ci_low[h]:+.3f}, {o.ci_high[h]:+.3f}] | {o.gain_b[h]:+.3f} | {'yes' if o.beneficial else 'no'} | "
            f"L0H{g} ({o.shared_share[g]:.2f} / {o.task_share[g]:.2f}) | {'yes' if g == h else 'no'} |"
        )
    n_ben = sum(o.beneficial for o in outcomes)
    lines.append("")
    lines.append(f"Beneficial single head in **{n_ben} of {len(outcomes)}** seeds.")
    return "\n".join(lines)

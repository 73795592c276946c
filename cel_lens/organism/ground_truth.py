"""Which head carries the conflict, from activations and weights alone (no ablation, no search)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.organism.model import load_organism
from cel_lens.tasks.organism import (
    NEG, POS, SKIP, U_MINUS, U_PLUS, V_MINUS, V_PLUS, OrganismBatch, OrganismConfig, prompt_text, sample_prompts, shipped_config,
)

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.model.types import HookedTransformer

__all__ = ["FeatureCoefficients", "fit_feature_coefficients", "head_feature_coefficients", "ov_feature_reading", "ground_truth_heads"]


@dataclass(frozen=True)
class FeatureCoefficients:
    """What each head writes at the answer position, from its direct logit attribution (the head's
    ``z @ W_O`` projected on unembedding contrasts; exact here: one layer, no normalization).

    ``shared``: slope of the head's ``skip - (pos + neg)/2`` attribution on ``x_u`` (how much of the
    conflicting ``u -> skip`` signal it writes, logits per unit of ``x_u``); ``task``: slope of its
    ``pos - neg`` attribution on ``x_v`` (task A's signal); both least-squares fits with an intercept
    over random prompts. ``conflict``: the head's mean attribution to task B's answer minus task A's
    answer over the prompts where the two tasks disagree, i.e. how much the head pushes the model
    toward the wrong answer for task A exactly where the conflict bites. In a ``shared_readout``
    organism (no ``skip``) ``shared`` is the slope of the ``pos - neg`` attribution on ``x_u``.
    """

    shared: Float[Tensor, " head"]
    task: Float[Tensor, " head"]
    conflict: Float[Tensor, " head"]

    @property
    def shared_share(self) -> Float[Tensor, " head"]:
        """Each head's fraction of the total shared-feature slope (negative slopes count as zero)."""
        s = self.shared.clamp(min=0)
        return s / s.sum().clamp(min=1e-12)

    @property
    def task_share(self) -> Float[Tensor, " head"]:
        """Each head's fraction of the total task-feature slope (negative slopes count as zero)."""
        t = self.task.clamp(min=0)
        return t / t.sum().clamp(min=1e-12)

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-able form."""
        return {"shared": self.shared.tolist(), "task": self.task.tolist(), "conflict": self.conflict.tolist(),
                "shared_share": self.shared_share.tolist(), "task_share": self.task_share.tolist()}


def fit_feature_coefficients(
    head_out: Float[Tensor, "batch head d_model"],
    W_U: Float[Tensor, "d_model vocab"],
    batch: "OrganismBatch",
    shared_readout: bool = False,
) -> FeatureCoefficients:
    """Per-head attributions from ``head_out`` (each head's ``z @ W_O`` at the answer position of
    ``batch``'s prompts): feature slopes and the mean push toward task B's answer where the tasks
    disagree (see :class:`FeatureCoefficients`)."""
    W_U = W_U.double()
    out = head_out.double()
    pos_neg = W_U[:, POS] - W_U[:, NEG]
    c_shared = pos_neg if shared_readout else W_U[:, SKIP] - (W_U[:, POS] + W_U[:, NEG]) / 2
    xs, xt = batch.x_shared.double(), batch.x_task.double()
    pinv = torch.linalg.pinv(torch.stack([xs, xt, torch.ones_like(xs)], dim=1))
    shared = (pinv @ (out @ c_shared))[0]
    task = (pinv @ (out @ pos_neg))[1]
    disagree = batch.label_a != batch.label_b
    if bool(disagree.any()):
        toward_b = W_U[:, batch.label_b[disagree]] - W_U[:, batch.label_a[disagree]]  # [d_model, n]
        conflict = torch.einsum("nhd,dn->nh", out[disagree], toward_b).mean(0)
    else:
        conflict = torch.zeros(out.shape[1], dtype=torch.double)
    return FeatureCoefficients(shared=shared.float(), task=task.float(), conflict=conflict.float())


@torch.no_grad()
def head_feature_coefficients(model: Optional["HookedTransformer"] = None, n: int = 4096, seed: int = 12345) -> FeatureCoefficients:
    """Per-head direct logit attributions of ``model`` (default: the shipped organism), measured
    with TransformerLens' own cache on ``n`` random prompts (not any task split) tokenized by the
    model's tokenizer. No ablation is run: this is independent of the search."""
    model = model if model is not None else load_organism()
    config = _model_organism_config(model)
    batch = sample_prompts(n, torch.Generator().manual_seed(seed), config)
    tokens = model.to_tokens([prompt_text(row) for row in batch.tokens], prepend_bos=True)
    _, cache = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_z")
    z = cache["blocks.0.attn.hook_z"][:, -1]  # [batch, head, d_head]
    head_out = torch.einsum("bhe,hed->bhd", z, model.W_O[0])
    return fit_feature_coefficients(head_out, model.W_U, batch, config.shared_readout)


@torch.no_grad()
def ov_feature_reading(model: Optional["HookedTransformer"] = None) -> dict[str, Float[Tensor, " head"]]:
    """Weights only (no prompts, no activations): each head's OV circuit applied to the embedding
    difference ``u+ - u-`` read on the ``skip - (pos + neg)/2`` unembedding contrast (``"shared"``),
    and to ``v+ - v-`` on ``pos - neg`` (``"task"``). Attention weights are left out, so this is the
    head's reading per unit of attention paid to one word."""
    model = model if model is not None else load_organism()
    W_E, W_U = model.W_E, model.W_U
    ov = model.W_V[0] @ model.W_O[0]  # [head, d_model, d_model]
    du, dv = W_E[U_PLUS] - W_E[U_MINUS], W_E[V_PLUS] - W_E[V_MINUS]
    skip = W_U[:, SKIP] - (W_U[:, POS] + W_U[:, NEG]) / 2
    pos_neg = W_U[:, POS] - W_U[:, NEG]
    return {"shared": torch.einsum("d,hde,e->h", du, ov, skip), "task": torch.einsum("d,hde,e->h", dv, ov, pos_neg)}


def _model_organism_config(model: "HookedTransformer") -> OrganismConfig:
    """The organism config a model was built with (or the shipped one, with the model's shape)."""
    cfg = getattr(model, "organism_config", None)
    if isinstance(cfg, OrganismConfig):
        return cfg
    base = shipped_config()
    return OrganismConfig.from_dict({**base.to_dict(), "n_heads": model.cfg.n_heads, "d_head": model.cfg.d_head,
                                     "d_model": model.cfg.d_model})


def ground_truth_heads(model: Optional["HookedTransformer"] = None, coefficients: Optional[FeatureCoefficients] = None) -> HeadSet:
    """The head that carries the conflict, from activations alone (no ablation, no search): the
    head whose direct attribution pushes hardest toward task B's answer on the prompts where task
    A and task B disagree (:attr:`FeatureCoefficients.conflict`). Default: the shipped organism."""
    coef = coefficients if coefficients is not None else head_feature_coefficients(model)
    return HeadSet([(0, int(coef.conflict.argmax()))])

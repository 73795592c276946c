"""Training model organisms: many seeds at once, in a fused forward pass of the answer position.

Training runs the organism's forward pass in a fused form (the answer position only) over a stack
of independently seeded models at once; it computes the same function as
``HookedTransformer.forward`` for this architecture (checked in ``tests/test_organism.py``), and the
trained tensors are loaded into a real ``HookedTransformer``. Each model has its own seeded
initialization and its own seeded stream of training prompts, so a seed trains to the same weights
alone or in a stack (up to float rounding).

Tiny tensors make PyTorch's thread pool pure overhead (and very slow on a busy machine), so
training runs single-threaded and restores the thread count afterwards.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.organism.ground_truth import fit_feature_coefficients
from cel_lens.organism.model import build_model
from cel_lens.tasks.organism import BOS, TOKEN_ID, VOCAB, OrganismBatch, OrganismConfig, sample_prompts
from cel_lens.threads import single_thread

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.model.types import HookedTransformer

__all__ = [
    "PARAM_NAMES",
    "TrainingLog",
    "init_parameters",
    "answer_head_outputs",
    "answer_logits",
    "train_organisms",
    "train_organism",
    "model_parameters",
    "encode_prompts",
    "single_thread",
    "probe_batch",
]

_A = "blocks.0.attn."
PARAM_NAMES: tuple[str, ...] = (
    "embed.W_E", "pos_embed.W_pos",
    _A + "W_Q", _A + "b_Q", _A + "W_K", _A + "b_K", _A + "W_V", _A + "b_V", _A + "W_O", _A + "b_O",
    "unembed.W_U", "unembed.b_U",
)
"""The organism's parameters, in the order the batched trainer stacks them (one tensor per name, many seeds)."""
_DATA_SALT = 1_000_000
_PROBE_SEED = 424_242


def init_parameters(seeds: Sequence[int], config: OrganismConfig) -> dict[str, Tensor]:
    """Seeded random initialization of one model per seed, stacked on a leading ``seed`` axis:
    weights ~ N(0, ``init_std``^2) drawn in :data:`PARAM_NAMES` order, biases zero."""
    V, D, H, E, T = len(VOCAB), config.d_model, config.n_heads, config.d_head, config.n_ctx
    shapes = {
        "embed.W_E": (V, D), "pos_embed.W_pos": (T, D),
        _A + "W_Q": (H, D, E), _A + "b_Q": (H, E), _A + "W_K": (H, D, E), _A + "b_K": (H, E),
        _A + "W_V": (H, D, E), _A + "b_V": (H, E), _A + "W_O": (H, E, D), _A + "b_O": (D,),
        "unembed.W_U": (D, V), "unembed.b_U": (V,),
    }
    per_seed = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        per_seed.append({
            name: (torch.randn(shapes[name], generator=gen) * config.init_std if ".W_" in name
                   else torch.zeros(shapes[name]))
            for name in PARAM_NAMES
        })
    return {name: torch.stack([p[name] for p in per_seed]) for name in PARAM_NAMES}


def answer_head_outputs(
    params: Mapping[str, Tensor], tokens: Int[Tensor, "seed batch pos"], ablated: Optional[Bool[Tensor, "seed head"]] = None,
    ablation: Optional[Ablation] = None,
) -> tuple[Float[Tensor, "seed batch head d_model"], Float[Tensor, "seed batch d_model"]]:
    """Each head's output (``z @ W_O``) at the last position, and the rest of the residual stream
    there (token + position embedding + ``b_O``), for a stack of models each with its own batch.

    Heads where ``ablated`` is True have their ``z`` replaced by ``ablation`` (default zero), the
    ablation module's own :meth:`~cel_lens.model.ablation.Ablation.replace`: the seed axis is its
    row axis and the batch stands where its position axis would (one layer, one position)."""
    S = params["embed.W_E"].shape[0]
    W_E = params["embed.W_E"]
    x = W_E[torch.arange(S)[:, None, None], tokens] + params["pos_embed.W_pos"][:, None, : tokens.shape[-1]]
    q = torch.einsum("sbd,shde->sbhe", x[:, :, -1], params[_A + "W_Q"]) + params[_A + "b_Q"][:, None]
    k = torch.einsum("sbtd,shde->sbthe", x, params[_A + "W_K"]) + params[_A + "b_K"][:, None, None]
    v = torch.einsum("sbtd,shde->sbthe", x, params[_A + "W_V"]) + params[_A + "b_V"][:, None, None]
    scores = torch.einsum("sbhe,sbthe->sbht", q, k).contiguous() / math.sqrt(q.shape[-1])
    z = torch.einsum("sbht,sbthe->sbhe", scores.softmax(dim=-1), v)
    if ablated is not None:
        z = (ablation or ZERO).replace(z, 0, ablated)
    head_out = torch.einsum("sbhe,shed->sbhd", z, params[_A + "W_O"])
    return head_out, x[:, :, -1] + params[_A + "b_O"][:, None]


def answer_logits(
    params: Mapping[str, Tensor],
    tokens: Int[Tensor, "seed batch pos"],
    keep: Optional[Bool[Tensor, "seed head"]] = None,
    ablation: Optional[Ablation] = None,
) -> Float[Tensor, "seed batch vocab"]:
    """Logits at the answer (last) position; heads where ``keep`` is False are ablated by
    ``ablation`` (default zero) at ``z``, through the ablation module (in one layer only the last
    position's ``z`` reaches these logits)."""
    head_out, rest = answer_head_outputs(params, tokens, None if keep is None else ~keep, ablation)
    return (rest + head_out.sum(dim=2)) @ params["unembed.W_U"] + params["unembed.b_U"][:, None]


@dataclass
class TrainingLog:
    """Loss curves and head-allocation trajectories of one training run.

    Every ``log_every`` steps: the training loss on the mixed batch and its task-A / task-B parts,
    task A/B accuracy and each head's feature slopes (:class:`~cel_lens.organism.FeatureCoefficients`)
    on a fixed probe set of prompts.
    """

    seed: int
    config: dict[str, Any]
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    loss_a: list[float] = field(default_factory=list)
    loss_b: list[float] = field(default_factory=list)
    acc_a: list[float] = field(default_factory=list)
    acc_b: list[float] = field(default_factory=list)
    shared_coef: list[list[float]] = field(default_factory=list)
    task_coef: list[list[float]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrainingLog":
        """Inverse of :meth:`to_dict`."""
        return cls(**dict(data))


def probe_batch(config: OrganismConfig, n: int = 1024) -> OrganismBatch:
    """A fixed batch of probe prompts (its own seed) for measuring feature coefficients."""
    return sample_prompts(n, torch.Generator().manual_seed(_PROBE_SEED), config)


def train_organisms(
    seeds: Sequence[int],
    config: Optional[OrganismConfig] = None,
    *,
    log_every: int = 25,
    tokenizer: Any = None,
) -> list[tuple["HookedTransformer", TrainingLog]]:
    """Train one organism per seed, all at once; returns ``[(HookedTransformer, TrainingLog)]``.

    Each step draws ``batch_size`` fresh prompts per model, labels each by task B with probability
    ``side_weight`` (else by task A), and takes one optimizer step on the cross-entropy of the
    answer token over the whole vocabulary.
    """
    config = config or OrganismConfig()
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("train_organisms needs at least one seed")
    S = len(seeds)
    start = time.perf_counter()
    with single_thread():
        params = {k: v.requires_grad_(True) for k, v in init_parameters(seeds, config).items()}
        opt = (torch.optim.SGD(params.values(), lr=config.lr) if config.optimizer == "sgd"
               else torch.optim.Adam(params.values(), lr=config.lr))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: _lr_factor(step, config))
        data_gens = [torch.Generator().manual_seed(s + _DATA_SALT) for s in seeds]
        probe = probe_batch(config)
        probe_tokens = einops.repeat(probe.tokens, "b t -> s b t", s=S)
        logs = [TrainingLog(seed=s, config=config.to_dict()) for s in seeds]
        for step in range(config.steps + 1):
            batches = [sample_prompts(config.batch_size, g, config) for g in data_gens]
            side = torch.stack([torch.rand(config.batch_size, generator=g) < config.side_weight for g in data_gens])
            tokens = torch.stack([b.tokens for b in batches])
            label_a = torch.stack([b.label_a for b in batches])
            label_b = torch.stack([b.label_b for b in batches])
            target = torch.where(side, label_b, label_a)
            logits = answer_logits(params, tokens)
            ce = F.cross_entropy(einops.rearrange(logits, "s b v -> (s b) v"), target.flatten(), reduction="none")
            ce = ce.view(S, -1)
            if log_every and (step % log_every == 0 or step == config.steps):
                _log_step(logs, step, params, ce.detach(), side, probe, probe_tokens, config)
            if step == config.steps:
                break
            opt.zero_grad(set_to_none=True)
            ce.mean(dim=1).sum().backward()
            if config.clip:
                _clip_per_model(params, config.clip)
            opt.step()
            sched.step()
    elapsed = time.perf_counter() - start
    out = []
    for i, seed in enumerate(seeds):
        state = {k: v[i].detach().clone() for k, v in params.items()}
        logs[i].seconds = elapsed / S
        model = build_model(state, config, tokenizer)
        model.organism_seed = seed
        out.append((model, logs[i]))
    return out


def _lr_factor(step: int, config: OrganismConfig) -> float:
    """1 until the warm-down starts, then linearly down to 0 at the last step."""
    start = config.steps * (1.0 - config.warmdown)
    if step < start or config.warmdown == 0:
        return 1.0
    return max(0.0, (config.steps - step) / (config.steps - start))


def _clip_per_model(params: Mapping[str, Tensor], max_norm: float) -> None:
    """Scale each model's gradient to norm <= ``max_norm`` (as ``clip_grad_norm_`` per model)."""
    grads = [p.grad for p in params.values()]
    S = grads[0].shape[0]
    norms = torch.sqrt(sum((g.reshape(S, -1) ** 2).sum(dim=1) for g in grads))
    factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(factor.view(-1, *[1] * (g.ndim - 1)))


@torch.no_grad()
def _log_step(logs, step, params, ce, side, probe, probe_tokens, config) -> None:
    head_out, rest = answer_head_outputs(params, probe_tokens)
    pred = ((rest + head_out.sum(2)) @ params["unembed.W_U"] + params["unembed.b_U"][:, None]).argmax(-1)
    for i, log in enumerate(logs):
        coef = fit_feature_coefficients(head_out[i], params["unembed.W_U"][i], probe, config.shared_readout)
        log.step.append(step)
        log.loss.append(float(ce[i].mean()))
        log.loss_a.append(float(ce[i][~side[i]].mean()) if (~side[i]).any() else float("nan"))
        log.loss_b.append(float(ce[i][side[i]].mean()) if side[i].any() else float("nan"))
        log.acc_a.append(float((pred[i] == probe.label_a).double().mean()))
        log.acc_b.append(float((pred[i] == probe.label_b).double().mean()))
        log.shared_coef.append([round(float(c), 5) for c in coef.shared])
        log.task_coef.append([round(float(c), 5) for c in coef.task])


def train_organism(
    seed: int = 0, config: Optional[OrganismConfig] = None, *, log_every: int = 25, tokenizer: Any = None
) -> tuple["HookedTransformer", TrainingLog]:
    """Train one organism from random initialization with ``seed``; returns ``(model, log)``.

    With the default config and the shipped seed this reproduces ``cel_lens/data/organism``."""
    return train_organisms([seed], config, log_every=log_every, tokenizer=tokenizer)[0]


def model_parameters(models: Sequence["HookedTransformer"]) -> dict[str, Tensor]:
    """The trained tensors of HookedTransformer organisms, stacked like :func:`init_parameters`."""
    return {k: torch.stack([m.state_dict()[k].detach() for m in models]) for k in PARAM_NAMES}


def encode_prompts(prompts: Sequence[str]) -> Int[Tensor, "batch pos"]:
    """Token ids of organism prompts (BOS prepended), by the vocabulary itself (no tokenizer)."""
    rows = [[BOS] + [TOKEN_ID[w] for w in p.split()] for p in prompts]
    if len({len(r) for r in rows}) > 1:
        raise ValueError("organism prompts must all have the same number of words")
    return torch.tensor(rows)

"""Training the model organism, and measuring over seeds how often a beneficial head emerges.

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

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence, Union

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.organism import (
    BOS,
    N_DIST,
    ORGANISM_TASK,
    SIDE_TASK,
    VOCAB,
    OrganismBatch,
    OrganismConfig,
    _ID,
    build_model,
    fit_feature_coefficients,
    organism_task,
    sample_prompts,
)

if TYPE_CHECKING:  # heavy imports stay lazy at run time
    import plotly.graph_objects as go
    from transformer_lens import HookedTransformer

__all__ = [
    "PARAM_NAMES",
    "TrainingLog",
    "SeedOutcome",
    "init_parameters",
    "answer_head_outputs",
    "answer_logits",
    "train_organisms",
    "train_organism",
    "emergence_sweep",
    "sweep_table",
    "plot_training_log",
    "plot_head_effects",
    "plot_emergence",
    "encode_prompts",
    "evaluate_models",
    "model_parameters",
    "save_training_figure",
    "parse_seeds",
    "config_with",
    "train_and_save",
    "describe_organism",
    "format_summary",
]

_A = "blocks.0.attn."
PARAM_NAMES: tuple[str, ...] = (
    "embed.W_E", "pos_embed.W_pos",
    _A + "W_Q", _A + "b_Q", _A + "W_K", _A + "b_K", _A + "W_V", _A + "b_V", _A + "W_O", _A + "b_O",
    "unembed.W_U", "unembed.b_U",
)
_DATA_SALT = 1_000_000
_PROBE_SEED = 424_242


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


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
    params: Mapping[str, Tensor], tokens: Int[Tensor, "seed batch pos"]
) -> tuple[Float[Tensor, "seed batch head d_model"], Float[Tensor, "seed batch d_model"]]:
    """Each head's output (``z @ W_O``) at the last position, and the rest of the residual stream
    there (token + position embedding + ``b_O``), for a stack of models each with its own batch."""
    S = params["embed.W_E"].shape[0]
    W_E = params["embed.W_E"]
    x = W_E[torch.arange(S)[:, None, None], tokens] + params["pos_embed.W_pos"][:, None, : tokens.shape[-1]]
    q = torch.einsum("sbd,shde->sbhe", x[:, :, -1], params[_A + "W_Q"]) + params[_A + "b_Q"][:, None]
    k = torch.einsum("sbtd,shde->sbthe", x, params[_A + "W_K"]) + params[_A + "b_K"][:, None, None]
    v = torch.einsum("sbtd,shde->sbthe", x, params[_A + "W_V"]) + params[_A + "b_V"][:, None, None]
    scores = torch.einsum("sbhe,sbthe->sbht", q, k).contiguous() / math.sqrt(q.shape[-1])
    z = torch.einsum("sbht,sbthe->sbhe", scores.softmax(dim=-1), v)
    head_out = torch.einsum("sbhe,shed->sbhd", z, params[_A + "W_O"])
    return head_out, x[:, :, -1] + params[_A + "b_O"][:, None]


def answer_logits(
    params: Mapping[str, Tensor],
    tokens: Int[Tensor, "seed batch pos"],
    keep: Optional[Bool[Tensor, "seed head"]] = None,
) -> Float[Tensor, "seed batch vocab"]:
    """Logits at the answer (last) position; heads where ``keep`` is False are zero-ablated (their
    ``z`` zeroed: in one layer only the last position's ``z`` reaches these logits)."""
    head_out, rest = answer_head_outputs(params, tokens)
    if keep is not None:
        head_out = head_out * keep[:, None, :, None].to(head_out.dtype)
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


def _probe(config: OrganismConfig, n: int = 1024) -> OrganismBatch:
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
    with _single_thread():
        params = {k: v.requires_grad_(True) for k, v in init_parameters(seeds, config).items()}
        opt = (torch.optim.SGD(params.values(), lr=config.lr) if config.optimizer == "sgd"
               else torch.optim.Adam(params.values(), lr=config.lr))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: _lr_factor(step, config))
        data_gens = [torch.Generator().manual_seed(s + _DATA_SALT) for s in seeds]
        probe = _probe(config)
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
    rows = [[BOS] + [_ID[w] for w in p.split()] for p in prompts]
    if len({len(r) for r in rows}) > 1:
        raise ValueError("organism prompts must all have the same number of words")
    return torch.tensor(rows)


# -- emergence over seeds ------------------------------------------------------------------------------
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
    from cel_lens.stats import paired_bootstrap_ci

    task_a = organism_task(ORGANISM_TASK, n_dist=N_DIST, n_test=n_test, seed=task_seed, config=config)
    task_b = organism_task(SIDE_TASK, n_dist=N_DIST, n_test=n_test, seed=task_seed, config=config)
    tokens = encode_prompts([e.prompt for e in task_a.test])
    label_a = torch.tensor([_ID[e.target.strip()] for e in task_a.test])
    label_b = torch.tensor([_ID[e.target.strip()] for e in task_b.test])
    H = config.n_heads
    probe = _probe(config, 4096)
    outcomes = []
    with _single_thread(), torch.no_grad():
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


# -- figures -------------------------------------------------------------------------------------------
def plot_training_log(log: Union[TrainingLog, Mapping[str, Any]], title: Optional[str] = None) -> "go.Figure":
    """Plotly figure of a training run: losses (mix, task A rows, task B rows), probe accuracies, and
    each head's slope on the shared feature (``u -> skip``) and on the task feature (``v -> pos/neg``)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    log = log if isinstance(log, TrainingLog) else TrainingLog.from_dict(log)
    fig = make_subplots(
        rows=2, cols=2, shared_xaxes=True, vertical_spacing=0.12, horizontal_spacing=0.1,
        subplot_titles=("training loss", "probe accuracy", "per-head slope: shared feature u → skip",
                        "per-head slope: task feature v → pos/neg"),
    )
    x = log.step
    for name, ys, dash in (("loss (mix)", log.loss, "solid"), ("loss, task A rows", log.loss_a, "dot"),
                           ("loss, task B rows", log.loss_b, "dash")):
        fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines", line=dict(dash=dash)), row=1, col=1)
    for name, ys in (("task A", log.acc_a), ("task B", log.acc_b)):
        fig.add_trace(go.Scatter(x=x, y=ys, name=f"accuracy {name}", mode="lines"), row=1, col=2)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    n_heads = len(log.shared_coef[0]) if log.shared_coef else 0
    for h in range(n_heads):
        color = palette[h % len(palette)]
        fig.add_trace(go.Scatter(x=x, y=[c[h] for c in log.shared_coef], name=f"L0H{h}", mode="lines",
                                 line=dict(color=color), legendgroup=f"h{h}"), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=[c[h] for c in log.task_coef], name=f"L0H{h}", mode="lines",
                                 line=dict(color=color), legendgroup=f"h{h}", showlegend=False), row=2, col=2)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=2)
    fig.update_yaxes(title_text="cross-entropy", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=2)
    fig.update_yaxes(title_text="logit per unit x_u", row=2, col=1)
    fig.update_yaxes(title_text="logit per unit x_v", row=2, col=2)
    fig.update_layout(title=title or f"Model organism training (seed {log.seed})", height=650, width=1000,
                      template="plotly_white")
    return fig


def save_training_figure(log: Union[TrainingLog, Mapping[str, Any]], stem: Union[str, Path]) -> list[Path]:
    """Write the training figure as HTML (and PNG where the exporter works)."""
    from cel_lens.export import save_figure

    return save_figure(plot_training_log(log), stem)


# -- command-line helpers ------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``"0-19"`` -> 0..19, ``"0,3,7"`` -> [0, 3, 7] (ranges and lists combine: ``"0-3,9"``)."""
    seeds: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(part)])
        except ValueError:
            raise ValueError(f"cannot read seeds {text!r}: expected e.g. '0-19' or '0,3,7'") from None
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return seeds


def config_with(overrides: Sequence[str] = (), base: Optional[OrganismConfig] = None) -> OrganismConfig:
    """``base`` (default: the shipped organism's config) with ``KEY=VALUE`` overrides, each value
    read as its field's type."""
    from cel_lens.organism import _shipped_config

    data = (base or _shipped_config()).to_dict()
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in data:
            raise ValueError(f"bad override {item!r}: expected KEY=VALUE with KEY one of {', '.join(data)}")
        kind = type(data[key])
        if kind is bool:
            if value.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"override {item!r}: {key} takes true or false")
            data[key] = value.strip().lower() in ("true", "1", "yes")
        else:
            try:
                data[key] = kind(value)
            except ValueError:
                raise ValueError(f"override {item!r}: {key} takes a {kind.__name__}") from None
    return OrganismConfig.from_dict(data)


def train_and_save(seed: int, config: OrganismConfig, out: Union[str, Path], *, figure: bool = True) -> dict[str, Any]:
    """Train one organism, save it to ``out`` (weights, config, tokenizer, training log and, with
    ``figure``, ``organism_training.html``/``.png``), and summarize it like :func:`describe_organism`."""
    from cel_lens.organism import save_organism

    model, log = train_organism(seed, config)
    path = save_organism(model, out, config=config, seed=seed, log=log)
    figures = [str(p) for p in save_training_figure(log, path / "organism_training")] if figure else []
    summary = describe_organism(path, model=model)
    summary.update(training_seconds=round(log.seconds, 2), figures=figures)
    return summary


def describe_organism(path: Union[str, Path, None] = None, *, model: Optional["HookedTransformer"] = None) -> dict[str, Any]:
    """Config, seed and files of a saved organism (default: the shipped one), its per-head direct
    logit attributions and ground-truth head, and single-head ablations on both test splits."""
    from cel_lens.organism import head_feature_coefficients, load_organism, organism_info

    info = organism_info(path)
    model = model if model is not None else load_organism(path=path)
    config = OrganismConfig.from_dict(info["organism"])
    coef = head_feature_coefficients(model)
    outcome = evaluate_models([model], config)[0]
    info.update(
        ground_truth_heads=f"L0H{int(coef.conflict.argmax())}",
        attribution=coef.to_dict(),
        test=outcome.to_dict(),
    )
    return info


def format_summary(info: Mapping[str, Any]) -> str:
    """Human-readable text of :func:`describe_organism`'s dict."""
    cfg, test, attr = info["organism"], info["test"], info["attribution"]
    lines = [
        f"model organism at {info['path']} (seed {info['seed']}, {info['total_bytes'] / 1024:.0f} KiB)",
        f"  {cfg['n_heads']} heads x d_head {cfg['d_head']}, d_model {cfg['d_model']}, one attention-only layer; "
        f"trained {cfg['steps']} steps ({cfg['optimizer']}, lr {cfg['lr']}, init std {cfg['init_std']}, "
        f"task B share {cfg['side_weight']})",
        f"  test accuracy intact: task A {test['acc_a']:.4f}, task B {test['acc_b']:.4f}",
        "  head   task A gain [95% CI]       task B change   u->skip slope  v->pos/neg slope  push to B's answer",
    ]
    for h in range(len(test["gain_a"])):
        lines.append(
            f"  L0H{h}   {test['gain_a'][h]:+.4f} [{test['ci_low'][h]:+.4f}, {test['ci_high'][h]:+.4f}]"
            f"   {test['gain_b'][h]:+.4f}        {attr['shared'][h]:+.3f}         {attr['task'][h]:+.3f}"
            f"            {attr['conflict'][h]:+.3f}"
        )
    lines.append(f"  ground truth (largest push toward task B's answer where the tasks disagree): "
                 f"{info['ground_truth_heads']}")
    if info.get("training_seconds") is not None:
        lines.append(f"  trained in {info['training_seconds']:.1f} s")
    for f in info.get("figures", []):
        lines.append(f"  wrote {f}")
    return "\n".join(lines)


def plot_head_effects(info: Mapping[str, Any], title: Optional[str] = None) -> "go.Figure":
    """Plotly figure of one organism (:func:`describe_organism`'s dict): per head, the test-accuracy
    change of task A (with its 95% CI) and of task B when that head alone is ablated, beside the
    head's share of the shared-feature and task-feature slopes and its push toward task B's answer."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    test, attr = info["test"], info["attribution"]
    heads = [f"L0H{h}" for h in range(len(test["gain_a"]))]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "single-head ablation: test accuracy change", "direct logit attribution (random prompts)"))
    err = dict(type="data", symmetric=False,
               array=[hi - g for g, hi in zip(test["gain_a"], test["ci_high"])],
               arrayminus=[g - lo for g, lo in zip(test["gain_a"], test["ci_low"])])
    fig.add_trace(go.Bar(x=heads, y=test["gain_a"], name="task A (organism_a)", error_y=err, marker_color="#1f77b4"),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=heads, y=test["gain_b"], name="task B (organism_b)", marker_color="#d62728"), row=1, col=1)
    fig.add_trace(go.Bar(x=heads, y=attr["shared_share"], name="share of u → skip slope", marker_color="#9467bd"),
                  row=1, col=2)
    fig.add_trace(go.Bar(x=heads, y=attr["task_share"], name="share of v → pos/neg slope", marker_color="#2ca02c"),
                  row=1, col=2)
    push = attr["conflict"]
    scale = max(abs(p) for p in push) or 1.0
    fig.add_trace(go.Scatter(x=heads, y=[p / scale for p in push], mode="markers+lines", name="push toward B's answer "
                             "(scaled to max |push| = 1)", marker=dict(size=10, color="black")), row=1, col=2)
    fig.update_yaxes(title_text="accuracy change (ablated - intact)", row=1, col=1)
    fig.update_yaxes(title_text="share / scaled push", row=1, col=2)
    fig.update_layout(barmode="group", template="plotly_white", height=450, width=1000,
                      title=title or f"Model organism (seed {info['seed']}): ground truth {info['ground_truth_heads']}, "
                      f"task A {test['acc_a']:.3f} intact")
    return fig


def plot_emergence(rows: Sequence[Mapping[str, Any]], title: Optional[str] = None) -> "go.Figure":
    """Bar chart of how often a beneficial head emerged per design (``rows``: ``label``,
    ``beneficial``, ``seeds`` and optionally ``strong``, the seeds whose best head also fixes at least
    half of task A's errors), with Wilson 95% intervals, beside the theory's 4/9 and the starting
    point's 2/9."""
    import plotly.graph_objects as go

    from cel_lens.stats import accuracy_interval

    labels = [f"{r['label']}  ({r['beneficial']}/{r['seeds']})" for r in rows]
    fig = go.Figure()
    for key, name, color in (("beneficial", "beneficial head (task A CI above 0)", "#1f77b4"),
                             ("strong", "... that also fixes >= half of task A's errors", "#aec7e8")):
        if not all(key in r for r in rows):
            continue
        rate = [r[key] / r["seeds"] for r in rows]
        ci = [accuracy_interval(r[key], r["seeds"]) for r in rows]
        fig.add_trace(go.Bar(
            y=labels, x=rate, orientation="h", name=name, marker_color=color,
            error_x=dict(type="data", symmetric=False, array=[hi - p for p, (_, hi) in zip(rate, ci)],
                         arrayminus=[p - lo for p, (lo, _) in zip(rate, ci)], thickness=1),
        ))
    for x, name, pos in ((2 / 9, "issue's starting point 2/9", "bottom left"), (4 / 9, "theory (Thm 4.3) 4/9", "bottom right")):
        fig.add_vline(x=x, line_dash="dot", line_color="gray", annotation_text=name, annotation_position=pos)
    fig.update_xaxes(title_text="fraction of training seeds (Wilson 95% CI)", range=[0, 1.02])
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(template="plotly_white", barmode="group", height=160 + 44 * len(rows), width=1000,
                      title=title or "How often a beneficial single head emerges over training seeds",
                      legend=dict(orientation="h", y=1.0, yanchor="bottom"), margin=dict(l=300, t=110, b=90))
    return fig

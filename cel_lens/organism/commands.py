"""What ``cel-lens organism train|info|sweep`` does, as functions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from cel_lens.organism.figures import save_training_figure
from cel_lens.organism.ground_truth import head_feature_coefficients
from cel_lens.organism.model import load_organism, organism_info, save_organism
from cel_lens.organism.sweep import evaluate_models
from cel_lens.organism.train import train_organism
from cel_lens.tasks.organism import OrganismConfig, shipped_config

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.model.types import HookedTransformer

__all__ = ["parse_seeds", "config_with", "train_and_save", "describe_organism", "format_summary"]


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
    data = (base or shipped_config()).to_dict()
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
    model, log = train_organism(seed, config)
    path = save_organism(model, out, config=config, seed=seed, log=log)
    figures = [str(p) for p in save_training_figure(log, path / "organism_training")] if figure else []
    summary = describe_organism(path, model=model)
    summary.update(training_seconds=round(log.seconds, 2), figures=figures)
    return summary


def describe_organism(path: Union[str, Path, None] = None, *, model: Optional["HookedTransformer"] = None) -> dict[str, Any]:
    """Config, seed and files of a saved organism (default: the shipped one), its per-head direct
    logit attributions and ground-truth head, and single-head ablations on both test splits."""
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

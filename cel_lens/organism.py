"""The model organism: a small trained transformer in which a beneficial head ablation emerges.

cel_lens needs a model with a *known* answer that runs offline on a CPU. This module ships one: a
one-layer, attention-only ``HookedTransformer`` (4 heads of width 2, no normalization), trained from
random initialization by :mod:`cel_lens.organism_train` on a mix of two tasks that conflict on a
shared feature, in the spirit of Section 4 of the paper.

**Prompts.** Ten word tokens in random order, five of them ``u+``/``u-`` and five ``v+``/``v-``,
then ``=``; e.g. ``"u+ v- v+ u+ u- v+ v+ u- v- u+ ="``. Two features: the shared feature
``x_u = #u+ - #u-`` and the task feature ``x_v = #v+ - #v-`` (odd, never zero).

**Tasks** (ordinary cel_lens tasks, exact match of one answer token, same prompt distribution):

* ``organism_a`` (task A, the one CEL should improve): answer ``pos`` if ``x_v > 0`` else ``neg``.
  The shared feature is irrelevant and must be *ignored*.
* ``organism_b`` (task B, the side task): answer ``skip`` when ``x_u >= 3`` (four or five ``u+``;
  3 in 16 prompts), otherwise the same answer as task A. Task B *needs* the shared feature.

**Training.** Every training prompt is labelled by task B with probability 0.75 and by task A
otherwise, with no task cue anywhere: both tasks draw the same prompts, so no head can know which
task is being asked. For a prompt with ``x_u >= 3`` the best the model can do on the mix is to say
``skip`` (probability 0.75 against 0.25), which is wrong for task A. So the trained model loses task
A on (most of) the 3 in 16 prompts where task B says ``skip`` (task A about 0.84, task B about 0.97
on held-out prompts): the compromise of Proposition 4.1, where the shared coefficient sits between
what A wants (zero) and what B wants.

**Why a beneficial ablation exists.** In a one-layer attention-only model the answer position reads
the prompt only through its heads. The shared feature pushes one output direction (``skip`` against
the two answers), the task feature another (``pos`` against ``neg``); these two directions are
orthogonal, so gradient descent learns them as separate modes, each spread over the heads in its own,
random-at-initialization proportions. When one head ends up carrying most of the ``u -> skip`` mode
and little of the ``v -> pos/neg`` mode (the allocation event of Theorem 4.3), zeroing it removes the
``skip`` answers: task A rises toward 1.0 while task B falls by as much. How often this happens over
training seeds, and what drives the rate (output directions, initialization, head count and width,
the share of task B), is measured in ``docs/organism.md``. When the shared feature instead moves the
same output direction as the task feature (``shared_readout``: task B answers ``pos``/``neg`` by the
sign of ``2 x_u + x_v``), gradient descent learns one mode and every head carries ``u`` and ``v`` in
one ratio, so no head removes the shared feature: single-head ablations then help rarely (2 of 9
seeds at an even task mix) or only through the answer bias, fixing the errors of one answer.

**Ground truth** independent of any search: :func:`head_feature_coefficients` takes each head's
direct logit attribution on random prompts: its slope on each feature (how much of the ``u -> skip``
and of the ``v -> pos/neg`` signal it writes) and its mean push toward task B's answer where the
two tasks disagree; :func:`ground_truth_heads` names the head that pushes hardest.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from cel_lens.heads import HeadSet
from cel_lens.tasks import Example, Split, Task, register_task
from cel_lens.tasks._io import reject_options

if TYPE_CHECKING:  # heavy imports stay lazy at run time
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

__all__ = [
    "ORGANISM_TASK",
    "SIDE_TASK",
    "ORGANISM_DIR",
    "VOCAB",
    "OrganismConfig",
    "OrganismBatch",
    "FeatureCoefficients",
    "build_tokenizer",
    "load_tokenizer",
    "hooked_config",
    "sample_prompts",
    "prompt_text",
    "organism_task",
    "load_organism",
    "save_organism",
    "organism_info",
    "head_feature_coefficients",
    "ground_truth_heads",
    "ov_feature_reading",
    "fit_feature_coefficients",
    "build_model",
    "train_organism",
]

ORGANISM_TASK = "organism_a"
"""Task A: the task whose held-out accuracy a beneficial ablation raises."""
SIDE_TASK = "organism_b"
"""Task B: the task that needs the shared feature; the same ablation hurts it."""

ORGANISM_DIR = Path(__file__).parent / "data" / "organism"
"""Where the shipped weights, config, tokenizer and training log live."""

VOCAB: tuple[str, ...] = ("<bos>", "<eos>", "<pad>", "<unk>", "=", "pos", "neg", "skip", "u+", "u-", "v+", "v-")
"""Word-level vocabulary; token id = index."""
_ID = {w: i for i, w in enumerate(VOCAB)}
BOS, EQ, POS, NEG, SKIP = _ID["<bos>"], _ID["="], _ID["pos"], _ID["neg"], _ID["skip"]
U_PLUS, U_MINUS, V_PLUS, V_MINUS = _ID["u+"], _ID["u-"], _ID["v+"], _ID["v-"]

N_DIST, N_TEST = 2000, 2000
_TASK_SALT = 7_919


@dataclass(frozen=True)
class OrganismConfig:
    """Everything that defines an organism: the data, the architecture and the training run.

    ``n_shared``/``n_task``: ``u``/``v`` tokens per prompt (``n_task`` odd, so ``x_v != 0``);
    ``skip_at``: task B answers ``skip`` when ``x_u >= skip_at``; ``side_weight``: probability that a
    training prompt is labelled by task B; ``shared_readout``: the comparison design in which task B
    answers ``pos``/``neg`` by the sign of ``side_coef * x_u + x_v`` instead of ``skip`` (the shared
    feature then moves the same output direction as the task feature). Architecture: one layer,
    attention only, no normalization, learned absolute positions. Training: ``optimizer`` (``sgd``
    or ``adam``) at ``lr`` for ``steps`` batches of ``batch_size`` fresh prompts, the learning rate
    decaying linearly to zero over the last ``warmdown`` fraction of the steps (so the answer
    boundaries settle instead of jittering with the batch noise), gradient norm clipped per model at
    ``clip``; weights drawn from N(0, ``init_std``^2), biases zero.
    """

    n_shared: int = 5
    n_task: int = 5
    skip_at: int = 3
    side_weight: float = 0.75
    shared_readout: bool = False
    side_coef: float = 2.0
    n_heads: int = 4
    d_head: int = 2
    d_model: int = 16
    init_std: float = 0.1
    optimizer: str = "sgd"
    lr: float = 0.3
    steps: int = 1500
    batch_size: int = 256
    clip: float = 1.0
    warmdown: float = 0.3

    def __post_init__(self) -> None:
        if self.n_task < 1 or self.n_task % 2 == 0:
            raise ValueError(f"n_task must be odd and positive (x_v must never be 0), got {self.n_task}")
        if self.n_shared < 1:
            raise ValueError(f"n_shared must be >= 1, got {self.n_shared}")
        if not 0.0 <= self.warmdown <= 1.0:
            raise ValueError(f"warmdown must lie in [0, 1], got {self.warmdown}")
        if not 0.0 <= self.side_weight <= 1.0:
            raise ValueError(f"side_weight must lie in [0, 1], got {self.side_weight}")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        for name in ("n_heads", "d_head", "d_model", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def n_ctx(self) -> int:
        """Tokens the model reads: BOS, the ``u``/``v`` words and ``=``."""
        return self.n_shared + self.n_task + 2

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OrganismConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown organism config key(s): {', '.join(unknown)}")
        return cls(**dict(data))


# -- tokenizer ----------------------------------------------------------------------------------------
def build_tokenizer() -> "PreTrainedTokenizerFast":
    """A word-level ``PreTrainedTokenizerFast`` over :data:`VOCAB` (split on whitespace only, so
    ``"u+"`` is one token and ``" pos"`` encodes to ``pos``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=dict(_ID), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="right",
    )


def load_tokenizer(path: Union[str, Path, None] = None) -> "PreTrainedTokenizerBase":
    """The saved tokenizer (``AutoTokenizer.from_pretrained``; TransformerLens re-reads a
    tokenizer by its ``name_or_path``, so it must live in a directory)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(path or ORGANISM_DIR / "tokenizer")))


# -- data ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OrganismBatch:
    """Prompts as token ids (BOS first, ``=`` last) with their features and both tasks' answers."""

    tokens: Int[Tensor, "batch pos"]
    x_shared: Int[Tensor, "batch"]
    x_task: Int[Tensor, "batch"]
    label_a: Int[Tensor, "batch"]
    label_b: Int[Tensor, "batch"]


def sample_prompts(n: int, generator: torch.Generator, config: OrganismConfig = OrganismConfig()) -> OrganismBatch:
    """``n`` random prompts: ``n_shared`` u-words and ``n_task`` v-words with independent fair
    signs, shuffled, between BOS and ``=``; answers of task A and task B."""
    su = torch.randint(0, 2, (n, config.n_shared), generator=generator) * 2 - 1
    sv = torch.randint(0, 2, (n, config.n_task), generator=generator) * 2 - 1
    words = torch.cat([torch.where(su > 0, U_PLUS, U_MINUS), torch.where(sv > 0, V_PLUS, V_MINUS)], dim=1)
    order = torch.argsort(torch.rand(words.shape, generator=generator), dim=1)
    words = words.gather(1, order)
    tokens = torch.cat([torch.full((n, 1), BOS), words, torch.full((n, 1), EQ)], dim=1)
    x_u, x_v = su.sum(1), sv.sum(1)
    label_a = torch.where(x_v > 0, POS, NEG)
    if config.shared_readout:
        label_b = torch.where(config.side_coef * x_u + x_v > 0, POS, NEG)
    else:
        label_b = torch.where(x_u >= config.skip_at, SKIP, label_a)
    return OrganismBatch(tokens, x_u, x_v, label_a, label_b)


def prompt_text(tokens: Sequence[int] | Tensor) -> str:
    """The prompt string of one row of token ids (BOS dropped: the model prepends it)."""
    ids = tokens.tolist() if isinstance(tokens, Tensor) else list(tokens)
    return " ".join(VOCAB[i] for i in ids if i != BOS)


def _unique_prompts(n: int, seed: int, config: OrganismConfig) -> OrganismBatch:
    """The first ``n`` distinct prompts of a seeded stream (distinct by text, so by content hash)."""
    gen = torch.Generator().manual_seed(_TASK_SALT * 1_000_003 + seed)
    seen: dict[tuple[int, ...], int] = {}
    parts: list[OrganismBatch] = []
    rows: list[tuple[int, int]] = []
    draws = 0
    while len(rows) < n:
        chunk = sample_prompts(max(256, n), gen, config)
        parts.append(chunk)
        for i, row in enumerate(map(tuple, chunk.tokens.tolist())):
            if row not in seen and len(rows) < n:
                seen[row] = len(rows)
                rows.append((len(parts) - 1, i))
        draws += 1
        if draws > 100:
            raise ValueError(f"could not draw {n} distinct organism prompts")
    pick = lambda attr: torch.stack([getattr(parts[p], attr)[i] for p, i in rows])  # noqa: E731
    return OrganismBatch(*(pick(a) for a in ("tokens", "x_shared", "x_task", "label_a", "label_b")))


def organism_task(
    name: str = ORGANISM_TASK,
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    config: Optional[OrganismConfig] = None,
) -> Task:
    """Task A (``organism_a``) or task B (``organism_b``) with seeded, disjoint D_dist/D_test drawn
    from one prompt distribution (defaults 2,000 each). The same ``seed`` gives both tasks the same
    prompts, so task B measures the side effect of an ablation on exactly task A's inputs."""
    if name not in (ORGANISM_TASK, SIDE_TASK):
        raise ValueError(f"unknown organism task {name!r}: expected {ORGANISM_TASK!r} or {SIDE_TASK!r}")
    config = config or _shipped_config()
    n_dist = N_DIST if n_dist is None else n_dist
    n_test = N_TEST if n_test is None else n_test
    for what, n in (("n_dist", n_dist), ("n_test", n_test)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"{name}: {what} must be a non-negative integer, got {n!r}")
    batch = _unique_prompts(n_dist + n_test, seed, config)
    labels = batch.label_a if name == ORGANISM_TASK else batch.label_b
    examples = [
        Example(
            id=f"{name}/{seed}/{i}",
            prompt=prompt_text(batch.tokens[i]),
            target=" " + VOCAB[int(labels[i])],
            meta={"x_u": int(batch.x_shared[i]), "x_v": int(batch.x_task[i])},
        )
        for i in range(n_dist + n_test)
    ]
    return Task(
        name=name,
        kind="exact_match",
        dist=Split("dist", tuple(examples[:n_dist])),
        test=Split("test", tuple(examples[n_dist:])),
        metric="acc",
        options={"n_dist": n_dist, "n_test": n_test, "seed": seed, "config": config.to_dict()},
    )


_INFO = {
    "kind": "exact_match",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "generated prompts (model organism), seeded",
    "test_from": "same distribution, disjoint",
}


@register_task(ORGANISM_TASK, info={**_INFO, "answer": "pos/neg: sign of #v+ - #v-"})
def load_organism_a(
    n_dist: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir: Any = None, **kw: Any
) -> Task:
    """Task A of the model organism (see the module docstring); ``data_dir`` is unused."""
    reject_options(ORGANISM_TASK, kw)
    return organism_task(ORGANISM_TASK, n_dist, n_test, seed)


@register_task(SIDE_TASK, info={**_INFO, "answer": "skip when #u+ - #u- >= 3, else as organism_a"})
def load_organism_b(
    n_dist: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir: Any = None, **kw: Any
) -> Task:
    """Task B of the model organism (see the module docstring); ``data_dir`` is unused."""
    reject_options(SIDE_TASK, kw)
    return organism_task(SIDE_TASK, n_dist, n_test, seed)


# -- the model ----------------------------------------------------------------------------------------
def hooked_config(config: OrganismConfig = OrganismConfig(), device: str = "cpu") -> "HookedTransformerConfig":
    """The ``HookedTransformerConfig`` of an organism: one attention-only layer, no normalization
    (so each head's direct logit attribution is exact), learned absolute positions."""
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig(
        n_layers=1,
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_head=config.d_head,
        n_ctx=config.n_ctx,
        d_vocab=len(VOCAB),
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        model_name="cel-lens-organism",
        default_prepend_bos=True,
        tokenizer_prepends_bos=False,
        init_weights=False,
        device=device,
    )


def build_model(
    state: Mapping[str, Tensor], config: OrganismConfig, tokenizer: Any = None, device: str = "cpu"
) -> "HookedTransformer":
    """A ``HookedTransformer`` holding ``state`` (TransformerLens parameter names), in eval mode."""
    import warnings

    from transformer_lens import HookedTransformer

    tokenizer = tokenizer if tokenizer is not None else _default_tokenizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(hooked_config(config, device), tokenizer=tokenizer, default_padding_side="right")
    full = model.state_dict()
    missing = [k for k in full if k not in state and not k.endswith(("mask", "IGNORE"))]
    if missing:
        raise ValueError(f"organism weights lack {', '.join(missing)}")
    full.update({k: v.to(full[k].dtype) for k, v in state.items()})
    model.load_state_dict(full)  # tensors are copied onto the model's device (cfg.device)
    model.eval()
    model.organism_config = config
    return model


def _default_tokenizer() -> "PreTrainedTokenizerBase":
    path = ORGANISM_DIR / "tokenizer"
    if path.is_dir():
        return load_tokenizer(path)
    import tempfile

    tmp = tempfile.mkdtemp(prefix="cel_lens_organism_tok_")
    build_tokenizer().save_pretrained(tmp)
    return load_tokenizer(tmp)


def _shipped_config() -> OrganismConfig:
    path = ORGANISM_DIR / "config.json"
    if path.is_file():
        return OrganismConfig.from_dict(json.loads(path.read_text())["organism"])
    return OrganismConfig()


def save_organism(model: "HookedTransformer", out_dir: Union[str, Path], *, config: OrganismConfig, seed: int, log: Any = None) -> Path:
    """Write ``model.safetensors``, ``config.json`` (organism config, seed, TransformerLens config),
    ``tokenizer/`` and, with ``log``, ``training_log.json`` to ``out_dir``."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if not k.endswith(("mask", "IGNORE"))}
    save_file(state, str(out / "model.safetensors"))
    cfg = model.cfg
    meta = {
        "organism": config.to_dict(),
        "seed": seed,
        "hooked_transformer": {
            k: getattr(cfg, k)
            for k in ("n_layers", "d_model", "n_heads", "d_head", "n_ctx", "d_vocab", "attn_only",
                      "normalization_type", "positional_embedding_type", "model_name")
        },
        "tasks": {"organism": ORGANISM_TASK, "side": SIDE_TASK},
    }
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    model.tokenizer.save_pretrained(str(out / "tokenizer"))
    if log is not None:
        (out / "training_log.json").write_text(json.dumps(log if isinstance(log, dict) else log.to_dict()) + "\n")
    return out


def load_organism(device: str = "cpu", path: Union[str, Path, None] = None) -> "HookedTransformer":
    """The shipped organism (or the one saved in ``path``) as a ``HookedTransformer`` with its
    word-level tokenizer, in eval mode."""
    from safetensors.torch import load_file

    root = Path(path) if path is not None else ORGANISM_DIR
    weights = root / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no organism weights at {weights}; run 'cel-lens organism train --seed S --out DIR'")
    meta = json.loads((root / "config.json").read_text())
    config = OrganismConfig.from_dict(meta["organism"])
    return build_model(load_file(str(weights)), config, load_tokenizer(root / "tokenizer"), device=device)


def organism_info(path: Union[str, Path, None] = None) -> dict[str, Any]:
    """The saved organism's config, seed and file sizes (for ``cel-lens organism info``)."""
    root = Path(path) if path is not None else ORGANISM_DIR
    if not (root / "config.json").is_file():
        raise FileNotFoundError(f"no organism at {root}")
    meta = json.loads((root / "config.json").read_text())
    files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
    meta["files"] = files
    meta["total_bytes"] = sum(files.values())
    meta["path"] = str(root)
    return meta


# -- ground truth -------------------------------------------------------------------------------------
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

    shared: Float[Tensor, "head"]
    task: Float[Tensor, "head"]
    conflict: Float[Tensor, "head"]

    @property
    def shared_share(self) -> Float[Tensor, "head"]:
        """Each head's fraction of the total shared-feature slope (negative slopes count as zero)."""
        s = self.shared.clamp(min=0)
        return s / s.sum().clamp(min=1e-12)

    @property
    def task_share(self) -> Float[Tensor, "head"]:
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
def ov_feature_reading(model: Optional["HookedTransformer"] = None) -> dict[str, Float[Tensor, "head"]]:
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
    cfg = getattr(model, "organism_config", None)
    if isinstance(cfg, OrganismConfig):
        return cfg
    base = _shipped_config()
    return OrganismConfig.from_dict({**base.to_dict(), "n_heads": model.cfg.n_heads, "d_head": model.cfg.d_head,
                                     "d_model": model.cfg.d_model})


def ground_truth_heads(model: Optional["HookedTransformer"] = None, coefficients: Optional[FeatureCoefficients] = None) -> HeadSet:
    """The head that carries the conflict, from activations alone (no ablation, no search): the
    head whose direct attribution pushes hardest toward task B's answer on the prompts where task
    A and task B disagree (:attr:`FeatureCoefficients.conflict`). Default: the shipped organism."""
    coef = coefficients if coefficients is not None else head_feature_coefficients(model)
    return HeadSet([(0, int(coef.conflict.argmax()))])


# -- training (see cel_lens.organism_train) --------------------------------------------------------------
def train_organism(
    seed: int = 0, config: Optional[OrganismConfig] = None, **kwargs: Any
) -> tuple["HookedTransformer", Any]:
    """Train one organism from scratch; returns ``(model, log)``. See
    :func:`cel_lens.organism_train.train_organism`."""
    from cel_lens.organism_train import train_organism as _train

    return _train(seed, config, **kwargs)

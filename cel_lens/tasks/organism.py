"""The model organism's two tasks: word-token prompts with two features that conflict.

**Prompts.** Ten word tokens in random order, five of them ``u+``/``u-`` and five ``v+``/``v-``,
then ``=``; e.g. ``"u+ v- v+ u+ u- v+ v+ u- v- u+ ="``. Two features: the shared feature
``x_u = #u+ - #u-`` and the task feature ``x_v = #v+ - #v-`` (odd, never zero).

**Tasks** (ordinary cel_lens tasks, exact match of one answer token, same prompt distribution):

* ``organism_a`` (task A, the one CEL should improve): answer ``pos`` if ``x_v > 0`` else ``neg``.
  The shared feature is irrelevant and must be *ignored*.
* ``organism_b`` (task B, the side task): answer ``skip`` when ``x_u >= 3`` (four or five ``u+``;
  3 in 16 prompts), otherwise the same answer as task A. Task B *needs* the shared feature.

:class:`OrganismConfig` defines an organism completely: this data distribution and the
architecture and training run of the model trained on it (:mod:`cel_lens.organism`). The model
itself is shipped as a checkpoint (``cel_lens.load_model("organism")``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Optional, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from cel_lens.model.registry import ORGANISM_DIR
from cel_lens.tasks.base import Example, Split, Task, TaskSpec
from cel_lens.tasks.io import reject_options

__all__ = [
    "ORGANISM_TASK",
    "SIDE_TASK",
    "VOCAB",
    "TOKEN_ID",
    "OrganismConfig",
    "OrganismBatch",
    "sample_prompts",
    "prompt_text",
    "organism_task",
    "shipped_config",
    "load_organism_a",
    "load_organism_b",
    "SPEC_A",
    "SPEC_B",
]

ORGANISM_TASK = "organism_a"
"""Task A: the task whose held-out accuracy a beneficial ablation raises."""
SIDE_TASK = "organism_b"
"""Task B: the task that needs the shared feature; the same ablation hurts it."""
VOCAB: tuple[str, ...] = ("<bos>", "<eos>", "<pad>", "<unk>", "=", "pos", "neg", "skip", "u+", "u-", "v+", "v-")
"""Word-level vocabulary; token id = index."""
TOKEN_ID: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}
"""Token id of each word of :data:`VOCAB`."""
BOS, EQ, POS, NEG, SKIP = TOKEN_ID["<bos>"], TOKEN_ID["="], TOKEN_ID["pos"], TOKEN_ID["neg"], TOKEN_ID["skip"]
U_PLUS, U_MINUS, V_PLUS, V_MINUS = TOKEN_ID["u+"], TOKEN_ID["u-"], TOKEN_ID["v+"], TOKEN_ID["v-"]
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


@dataclass(frozen=True)
class OrganismBatch:
    """Prompts as token ids (BOS first, ``=`` last) with their features and both tasks' answers."""

    tokens: Int[Tensor, "batch pos"]
    x_shared: Int[Tensor, " batch"]
    x_task: Int[Tensor, " batch"]
    label_a: Int[Tensor, " batch"]
    label_b: Int[Tensor, " batch"]


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
    config = config or shipped_config()
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
        answer_type="exact_match",
        dist=Split("dist", tuple(examples[:n_dist])),
        test=Split("test", tuple(examples[n_dist:])),
        metric="acc",
        options={"n_dist": n_dist, "n_test": n_test, "seed": seed, "config": config.to_dict()},
    )


_INFO: dict[str, Any] = {
    "answer_type": "exact_match",
    "metric": "acc",
    "n_dist": N_DIST,
    "n_test": N_TEST,
    "dist_from": "generated prompts (model organism), seeded",
    "test_from": "same distribution, disjoint",
}


INFO_A: dict[str, Any] = {**_INFO, "answer": "pos/neg: sign of #v+ - #v-"}
INFO_B: dict[str, Any] = {**_INFO, "answer": "skip when #u+ - #u- >= 3, else as organism_a"}


def load_organism_a(
    n_dist: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir: Any = None, **kw: Any
) -> Task:
    """Task A of the model organism (see the module docstring); ``data_dir`` is unused."""
    reject_options(ORGANISM_TASK, kw)
    return organism_task(ORGANISM_TASK, n_dist, n_test, seed)


def load_organism_b(
    n_dist: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir: Any = None, **kw: Any
) -> Task:
    """Task B of the model organism (see the module docstring); ``data_dir`` is unused."""
    reject_options(SIDE_TASK, kw)
    return organism_task(SIDE_TASK, n_dist, n_test, seed)


SPEC_A = TaskSpec(load_organism_a, INFO_A)
"""What the task registry names for ``organism_a``: the loader and its info."""
SPEC_B = TaskSpec(load_organism_b, INFO_B)
"""What the task registry names for ``organism_b``: the loader and its info."""


def shipped_config() -> OrganismConfig:
    """The config of the shipped organism (its data distribution is the tasks' default)."""
    path = ORGANISM_DIR / "config.json"
    if path.is_file():
        return OrganismConfig.from_dict(json.loads(path.read_text())["organism"])
    return OrganismConfig()

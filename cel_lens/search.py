"""Algorithm 1 (two-stage CEL search) over an evaluation oracle; knows nothing of models.

An *oracle* answers "which examples of split ``dist``/``test`` does the model get right with these
heads ablated?" (:class:`Oracle`). Over it:

1. **Stage 1** — :func:`exact_scores`: the discovery gain of ablating each head alone (or scores
   from another scorer, see :mod:`cel_lens.scoring`).
2. **Stage 2** — :func:`candidate_pool` keeps the top-m heads; :func:`evaluate_subsets` evaluates
   the joint ablation of every subset of size 1..k (or a beam search); :func:`select_best` keeps
   the best discovery accuracy (ties: fewer heads, higher summed stage-1 score, then the canonical
   head order).
3. **Test** — only after the selection is fixed (and, with a run directory, recorded):
   intact and ablated test accuracy, Δ with a paired bootstrap CI, the exact McNemar p-value, a
   random-subset null, and the post-hoc test gain of every stage-2 subset (for plots only).

:func:`run_search` does all three and returns a :class:`Result`. :class:`SyntheticOracle` has
planted effects for tests and demos.

Calling the module itself, ``cel_lens.search(model, task, ...)``, runs the whole pipeline
(:func:`cel_lens.pipeline.search`).
"""

from __future__ import annotations

import hashlib
import html
import itertools
import math
import sys
import time
import types
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.heads import Head, HeadSet, HeadsLike
from cel_lens.stats import mcnemar_exact, null_fraction, paired_bootstrap_ci, random_head_sets

__all__ = [
    "Oracle",
    "SyntheticOracle",
    "SubsetScore",
    "Result",
    "DEFAULT_K",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_N_NULL",
    "exact_scores",
    "candidate_pool",
    "evaluate_subsets",
    "select_best",
    "selection_key",
    "run_search",
]

DEFAULT_K = 3
#: Default candidate pool size m. With the paper's k = 3, m = 12 gives 12 + 66 + 220 = 298 joint
#: ablations in stage 2: fewer than half of stage 1's single-head evaluations on the paper's models
#: (Llama-3.2-3B: 28 x 24 = 672 heads, Qwen2.5-3B: 36 x 16 = 576, SmolLM3-3B: 36 x 16 = 576), so
#: stage 2 never dominates the cost, while m = 16 would already need 696 (more than stage 1) and
#: m = 8 only 92 (a pool too narrow to hold heads that help only jointly with a weaker one).
DEFAULT_POOL_SIZE = 12
#: Default number of random head sets in the null (one test-split evaluation each).
DEFAULT_N_NULL = 100

Strategy = Literal["exhaustive", "beam"]


# -- the oracle ----------------------------------------------------------------------------------


@runtime_checkable
class Oracle(Protocol):
    """Evaluates head sets: per-example correctness of the model with each set zero-ablated.

    ``evaluate(split, head_sets)`` returns ``Bool[variant, example]`` with row ``v`` for
    ``head_sets[v]`` (the empty :class:`HeadSet` is the intact model); ``split`` is ``"dist"``
    (D_dist) or ``"test"`` (D_test). Results must be deterministic: the same head set on the same
    split always gives the same vector (resuming a run relies on it).
    """

    n_layers: int
    n_heads: int

    def evaluate(self, split: str, head_sets: Sequence[HeadSet]) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]``."""
        ...


def _stream_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SyntheticOracle:
    """A model-free oracle with planted head effects, for tests and demos. Deterministic by ``seed``.

    Each example ``i`` of a split has a fixed difficulty ``u_i ~ U(0, 1)``. Ablating a head set S
    moves the success probability to ``p(S) = clip(base_acc + sum of effects[h] for h in S +
    sum of interactions[T] for T ⊆ S, 0, 1)``; example ``i`` is correct iff ``u_i < p(S)``, then
    flipped with probability ``noise`` by a per-(split, S, example) coin. So accuracy differences
    are paired, as in a real model: ablating a beneficial head fixes the examples just above the
    threshold and breaks none. ``effects`` maps heads (``"L1H2"``, ``(1, 2)`` or :class:`Head`) to
    their change of ``p``; unlisted heads get ``N(0, background_sd)`` effects (0 by default).
    ``interactions`` maps head sets of two or more heads to an extra change applied only when all of
    them are ablated. ``delay`` seconds are slept per ``evaluate`` call (to simulate a slow model).
    ``calls`` logs every evaluated ``(split, HeadSet)``.
    """

    def __init__(
        self,
        n_layers: int = 4,
        n_heads: int = 4,
        *,
        n_dist: int = 400,
        n_test: int = 400,
        base_acc: float = 0.5,
        effects: Optional[Mapping[Any, float]] = None,
        interactions: Optional[Mapping[Any, float]] = None,
        background_sd: float = 0.0,
        noise: float = 0.0,
        seed: int = 0,
        delay: float = 0.0,
    ) -> None:
        if not 0.0 <= noise <= 0.5:
            raise ValueError(f"noise must lie in [0, 0.5], got {noise}")
        self.n_layers, self.n_heads = int(n_layers), int(n_heads)
        self.n = {"dist": int(n_dist), "test": int(n_test)}
        self.base_acc = float(base_acc)
        self.noise = float(noise)
        self.seed = int(seed)
        self.delay = float(delay)
        gen = torch.Generator().manual_seed(_stream_seed(seed, "background"))
        self.effect_matrix: Float[Tensor, "layer head"] = (
            torch.randn(self.n_layers, self.n_heads, generator=gen, dtype=torch.float64) * background_sd
        )
        for h, e in (effects or {}).items():
            head = Head.parse(h)
            HeadSet([head]).validate(self.n_layers, self.n_heads)
            self.effect_matrix[head.layer, head.head] = float(e)
        self.interactions: dict[HeadSet, float] = {}
        for s, e in (interactions or {}).items():
            hs = HeadSet.parse(s).validate(self.n_layers, self.n_heads)
            if len(hs) < 2:
                raise ValueError(f"an interaction needs two or more heads, got {hs}")
            self.interactions[hs] = float(e)
        self.calls: list[tuple[str, HeadSet]] = []
        self._u: dict[str, Tensor] = {}

    def _difficulty(self, split: str) -> Float[Tensor, " example"]:
        if split not in self.n:
            raise ValueError(f"unknown split {split!r}; expected 'dist' or 'test'")
        if split not in self._u:
            gen = torch.Generator().manual_seed(_stream_seed(self.seed, "u", split))
            self._u[split] = torch.rand(self.n[split], generator=gen, dtype=torch.float64)
        return self._u[split]

    def probability(self, head_set: HeadsLike) -> float:
        """``p(S)``: the success probability with ``head_set`` ablated, before noise."""
        hs = HeadSet.parse(head_set).validate(self.n_layers, self.n_heads)
        p = self.base_acc
        for h in hs:  # sorted order: a deterministic float sum
            p += float(self.effect_matrix[h.layer, h.head])
        for t, e in sorted(self.interactions.items(), key=lambda kv: kv[0].heads):
            if all(h in hs for h in t):
                p += e
        return min(1.0, max(0.0, p))

    def expected_accuracy(self, head_set: HeadsLike) -> float:
        """Population accuracy with ``head_set`` ablated: ``p(1 - noise) + (1 - p) noise``."""
        p = self.probability(head_set)
        return p * (1 - self.noise) + (1 - p) * self.noise

    def true_gain(self, head_set: HeadsLike) -> float:
        """Population gain ``expected_accuracy(S) - expected_accuracy(intact)``."""
        return self.expected_accuracy(head_set) - self.expected_accuracy(HeadSet())

    def evaluate(self, split: str, head_sets: Sequence[HeadsLike]) -> Bool[Tensor, "variant example"]:
        """Per-example correctness ``[variant, example]`` (see the class docstring)."""
        u = self._difficulty(split)
        rows = []
        for s in head_sets:
            hs = HeadSet.parse(s)
            correct = u < self.probability(hs)
            if self.noise > 0:
                gen = torch.Generator().manual_seed(_stream_seed(self.seed, "flip", split, hs))
                correct ^= torch.rand(u.shape[0], generator=gen, dtype=torch.float64) < self.noise
            rows.append(correct)
            self.calls.append((split, hs))
        if self.delay:
            time.sleep(self.delay)
        if not rows:
            return torch.zeros(0, u.shape[0], dtype=torch.bool)
        return torch.stack(rows)


# -- evaluation helpers --------------------------------------------------------------------------


def _evaluate(oracle: Oracle, split: str, head_sets: Sequence[HeadSet], stage: str) -> Tensor:
    """One oracle call; a :class:`~cel_lens.runs.CachedOracle` also gets the stage tag."""
    from cel_lens.runs import CachedOracle

    if isinstance(oracle, CachedOracle):
        out = oracle.evaluate(split, head_sets, stage=stage)
    else:
        out = oracle.evaluate(split, head_sets)
    out = torch.as_tensor(out).bool().cpu()
    if out.ndim != 2 or out.shape[0] != len(head_sets):
        raise ValueError(f"oracle returned shape {tuple(out.shape)} for {len(head_sets)} head sets")
    return out


def _evaluate_chunked(
    oracle: Oracle,
    split: str,
    head_sets: Sequence[HeadSet],
    stage: str,
    chunk: int,
    progress: bool,
) -> Bool[Tensor, "variant example"]:
    """Evaluate ``head_sets`` ``chunk`` at a time (each chunk is recorded as soon as it returns)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    from tqdm.auto import tqdm

    parts = []
    with tqdm(total=len(head_sets), desc=f"{stage} ({split})", unit="set", disable=not progress) as bar:
        for start in range(0, len(head_sets), chunk):
            part = head_sets[start : start + chunk]
            parts.append(_evaluate(oracle, split, part, stage))
            bar.update(len(part))
    if not parts:
        return torch.zeros(0, 0, dtype=torch.bool)
    return torch.cat(parts)


# -- stage 1 -------------------------------------------------------------------------------------


def exact_scores(oracle: Oracle, *, chunk: int = 64, progress: bool = False) -> Float[Tensor, "layer head"]:
    """Stage-1 exact scores: ``acc_dist(ablate h) - acc_dist(intact)`` for every head ``h``.

    The paper's scorer: ``n_layers * n_heads`` single-head ablations plus the intact model, all on
    D_dist, ``chunk`` head sets per oracle call. Float64, in accuracy units.
    """
    L, H = oracle.n_layers, oracle.n_heads
    intact = _evaluate(oracle, "dist", [HeadSet()], "intact")[0]
    singles = [HeadSet([Head(layer, head)]) for layer in range(L) for head in range(H)]
    correct = _evaluate_chunked(oracle, "dist", singles, "stage1", chunk, progress)
    acc = correct.to(torch.float64).mean(1)
    return (acc - intact.to(torch.float64).mean()).reshape(L, H)


# -- stage 2 -------------------------------------------------------------------------------------


def candidate_pool(scores: Float[Tensor, "layer head"], m: int = DEFAULT_POOL_SIZE) -> list[Head]:
    """The top-``m`` heads by stage-1 score (highest first; ties by layer, then head; NaN last).

    ``m`` larger than the number of heads keeps them all.
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be [layer, head], got shape {tuple(scores.shape)}")
    if m < 1:
        raise ValueError(f"pool size must be >= 1, got {m}")
    L, H = scores.shape
    flat = scores.detach().to(torch.float64).cpu().reshape(-1).tolist()
    key = lambda i: (-(flat[i] if not math.isnan(flat[i]) else -math.inf), i)  # noqa: E731
    order = sorted(range(L * H), key=key)[:m]
    return [Head(i // H, i % H) for i in order]


@dataclass(frozen=True)
class SubsetScore:
    """A stage-2 subset and its discovery result (``test_gain_posthoc`` is filled after selection)."""

    heads: HeadSet
    n_correct: int
    n_dist: int
    dist_gain: float
    score_sum: float
    test_gain_posthoc: Optional[float] = None

    @property
    def dist_acc(self) -> float:
        """Discovery accuracy with these heads ablated."""
        return self.n_correct / self.n_dist

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (as stored in ``Result.subsets``)."""
        return {
            "heads": str(self.heads),
            "size": len(self.heads),
            "dist_acc": self.dist_acc,
            "dist_gain": self.dist_gain,
            "score_sum": self.score_sum,
            "test_gain_posthoc": self.test_gain_posthoc,
        }


def selection_key(s: SubsetScore) -> tuple:
    """Sort key: best discovery accuracy first; ties by fewer heads, then higher summed stage-1
    score (rounded to 1e-12 so that equal sums tie), then the canonical (layer, head) order."""
    return (-s.n_correct, len(s.heads), -round(s.score_sum, 12), s.heads.heads)


def select_best(subsets: Sequence[SubsetScore]) -> SubsetScore:
    """The selected subset S-hat (see :func:`selection_key`); deterministic."""
    if not subsets:
        raise ValueError("no subsets to select from")
    return min(subsets, key=selection_key)


def _score_sum(hs: HeadSet, scores: Optional[Tensor]) -> float:
    if scores is None:
        return 0.0
    return float(sum(float(scores[h.layer, h.head]) for h in hs))


def evaluate_subsets(
    oracle: Oracle,
    pool: Sequence[HeadsLike],
    k: int = DEFAULT_K,
    *,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    scores: Optional[Float[Tensor, "layer head"]] = None,
    intact: Optional[Bool[Tensor, " example"]] = None,
    chunk: int = 64,
    progress: bool = False,
) -> list[SubsetScore]:
    """Stage 2: discovery accuracy of joint ablations of subsets of ``pool``, sizes 1..``k``.

    ``exhaustive`` evaluates every subset (sum of C(m, j) for j <= k); ``beam`` evaluates all
    singles, then grows only the ``beam_width`` best sets of each size by one pool head (for pools
    too large to enumerate). ``scores`` (stage 1) feed the tie-break; ``intact`` is the intact
    model's D_dist correctness (evaluated when omitted). Returns every evaluated subset, in
    evaluation order.
    """
    heads = [Head.parse(h) for h in pool]
    if len(set(heads)) != len(heads):
        raise ValueError("pool has repeated heads")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if intact is None:
        intact = _evaluate(oracle, "dist", [HeadSet()], "intact")[0]
    n = int(intact.shape[0])
    base = int(intact.sum())
    sc = scores.detach().to(torch.float64).cpu() if scores is not None else None
    done: dict[HeadSet, SubsetScore] = {}

    def run(sets: list[HeadSet], desc: str) -> list[SubsetScore]:
        todo = [s for s in sets if s not in done]
        if todo:
            correct = _evaluate_chunked(oracle, "dist", todo, desc, chunk, progress)
            for s, c in zip(todo, correct):
                nc = int(c.sum())
                done[s] = SubsetScore(s, nc, n, (nc - base) / n, _score_sum(s, sc))
        return [done[s] for s in sets]

    if strategy == "exhaustive":
        sets = [HeadSet(c) for j in range(1, min(k, len(heads)) + 1) for c in itertools.combinations(heads, j)]
        run(sets, "stage2")
    elif strategy == "beam":
        if beam_width < 1:
            raise ValueError(f"beam_width must be >= 1, got {beam_width}")
        level = run([HeadSet([h]) for h in heads], "stage2")
        for _ in range(2, min(k, len(heads)) + 1):
            beam = sorted(level, key=selection_key)[:beam_width]
            grown = {b.heads.union(h) for b in beam for h in heads if h not in b.heads}
            level = run(sorted(grown, key=lambda s: s.heads), "stage2")
    else:
        raise ValueError(f"unknown strategy {strategy!r}; choose 'exhaustive' or 'beam'")
    return list(done.values())


# -- the result ----------------------------------------------------------------------------------


def _pp(x: Optional[float], signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:+.2f} pp" if signed else f"{100 * x:.2f}%"


@dataclass
class Result:
    """What a CEL search found, and how sure we can be.

    ``heads`` is S-hat in canonical text; ``dist_*`` are on D_dist (where it was selected),
    ``test_*`` on D_test (read only after selection). ``gain`` = ``test_acc_ablated -
    test_acc_intact``, with a paired bootstrap ``[ci_low, ci_high]`` at level ``1 - alpha``, the
    exact McNemar ``p_value``, and ``null_gains`` of ``n_null`` random head sets of the same size
    (``null_p`` = fraction of them with gain >= ``gain``). ``scores`` is the stage-1 matrix,
    ``pool`` the candidate heads, ``subsets`` every stage-2 subset with its discovery gain and its
    post-hoc test gain (for plots: choosing by it would leak the test split).
    """

    heads: str
    dist_acc_intact: float
    dist_acc_ablated: float
    dist_gain: float
    test_acc_intact: float
    test_acc_ablated: float
    gain: float
    ci_low: float
    ci_high: float
    p_value: float
    null_gains: list[float]
    null_p: float
    scores: list[list[float]]
    scorer: str
    pool: list[str]
    subsets: list[dict[str, Any]]
    k: int
    pool_size: int
    n_dist: int
    n_test: int
    seed: int
    n_layers: int
    n_heads: int
    strategy: str = "exhaustive"
    beam_width: Optional[int] = None
    n_null: int = DEFAULT_N_NULL
    n_boot: int = 10000
    alpha: float = 0.05
    selected_before_test: bool = True
    timings: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def head_set(self) -> HeadSet:
        """S-hat as a :class:`HeadSet`."""
        return HeadSet.parse(self.heads)

    @property
    def scores_tensor(self) -> Float[Tensor, "layer head"]:
        """The stage-1 scores as a tensor."""
        return torch.tensor(self.scores, dtype=torch.float64)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``result.json`` holds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Result":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def _rows(self) -> list[tuple[str, str]]:
        null = (
            f"{self.null_p:.1%} of {len(self.null_gains)} random {len(self.head_set)}-head sets reach the gain"
            if self.null_gains
            else "not computed"
        )
        top = sorted(self.subsets, key=lambda s: (-s["dist_acc"], s["size"], -s.get("score_sum", 0.0)))[:5]
        tops = "; ".join(
            f"{s['heads']} {_pp(s['dist_gain'])} (test {_pp(s.get('test_gain_posthoc'))}, post-hoc)" for s in top
        )
        return [
            ("selected heads", f"{self.heads} (fixed on D_dist before D_test was read)"),
            ("search", f"k={self.k}, pool {self.pool_size} by {self.scorer}, {self.strategy}, "
                       f"{len(self.subsets)} subsets, seed {self.seed}"),
            (f"D_dist (n={self.n_dist})", f"intact {_pp(self.dist_acc_intact, False)} -> ablated "
                                          f"{_pp(self.dist_acc_ablated, False)}, gain {_pp(self.dist_gain)}"),
            (f"D_test (n={self.n_test})", f"intact {_pp(self.test_acc_intact, False)} -> ablated "
                                          f"{_pp(self.test_acc_ablated, False)}, gain {_pp(self.gain)}"),
            (f"{1 - self.alpha:.0%} paired bootstrap CI", f"[{_pp(self.ci_low)}, {_pp(self.ci_high)}]"),
            ("McNemar exact p", f"{self.p_value:.3g}"),
            ("random-subset null", null),
            ("top stage-2 subsets", tops),
        ]

    def __str__(self) -> str:
        rows = self._rows()
        width = max(len(k) for k, _ in rows)
        return "CEL search result\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        return f"<table><caption>CEL search result</caption>{body}</table>"


# -- Algorithm 1 -----------------------------------------------------------------------------------


def run_search(
    oracle: Oracle,
    *,
    k: int = DEFAULT_K,
    pool_size: int = DEFAULT_POOL_SIZE,
    scores: Optional[Float[Tensor, "layer head"]] = None,
    scorer: Optional[str] = None,
    strategy: Strategy = "exhaustive",
    beam_width: int = 8,
    n_null: int = DEFAULT_N_NULL,
    n_boot: int = 10000,
    alpha: float = 0.05,
    posthoc: bool = True,
    seed: int = 0,
    run: Any = None,
    chunk: int = 64,
    progress: bool = True,
) -> Result:
    """Algorithm 1 over ``oracle``: stage-1 scores, a pool of ``pool_size``, stage-2 subsets of size
    1..``k``, selection on D_dist, then the test statistics (see the module docstring).

    ``scores`` are precomputed stage-1 scores from another scorer (named by ``scorer``; by default
    the exact scores are computed). ``run`` is a :class:`~cel_lens.runs.RunDir`: every evaluation is
    recorded as it is computed and answered from the record on a rerun (resume), the selection is
    recorded before D_test is evaluated, and ``result.json`` is written at the end. A rerun that
    would select a different subset than the one recorded raises ``RuntimeError``. ``n_null``
    random head sets of |S-hat| heads form the null; ``posthoc`` also evaluates every stage-2 subset
    on D_test for plots. ``seed`` seeds the null draw and the bootstrap. ``chunk`` head sets go to
    the oracle per call.
    """
    from cel_lens.runs import CachedOracle

    if run is None and isinstance(oracle, CachedOracle):
        run = oracle.run
    reuse = isinstance(oracle, CachedOracle) and (
        run is None or (oracle.run is not None and oracle.run.path == run.path)
    )
    if not reuse:
        oracle = CachedOracle(oracle, run)  # without a run: in memory, so nothing is evaluated twice
    options = dict(
        k=k, pool_size=pool_size, scorer=scorer or ("exact" if scores is None else "given"),
        strategy=strategy, beam_width=beam_width if strategy == "beam" else None, n_null=n_null,
        n_boot=n_boot, alpha=alpha, posthoc=posthoc, seed=seed,
    )
    if run is not None:
        run.record_event("search_started", options=options)
    L, H = oracle.n_layers, oracle.n_heads
    timings: dict[str, float] = {}

    # stage 1
    t0 = time.perf_counter()
    intact_dist = _evaluate(oracle, "dist", [HeadSet()], "intact")[0]
    if scores is None:
        scores = exact_scores(oracle, chunk=chunk, progress=progress)
    scores = torch.as_tensor(scores).detach().to(torch.float64).cpu()
    if tuple(scores.shape) != (L, H):
        raise ValueError(f"scores have shape {tuple(scores.shape)}, the oracle has [{L}, {H}] heads")
    timings["stage1_s"] = time.perf_counter() - t0
    if run is not None and not any(e.get("scorer") == options["scorer"] for e in run.events("stage1_scores")):
        # kept so that a resumed pipeline can reuse scores that are costly or not bit-reproducible
        run.record_event("stage1_scores", scorer=options["scorer"], scores=scores.tolist())

    # stage 2
    t0 = time.perf_counter()
    pool = candidate_pool(scores, pool_size)
    if run is not None:
        run.record_event("pool", scorer=options["scorer"], pool=[str(h) for h in pool])
    subsets = evaluate_subsets(
        oracle, pool, k, strategy=strategy, beam_width=beam_width, scores=scores,
        intact=intact_dist, chunk=chunk, progress=progress,
    )
    best = select_best(subsets)
    timings["stage2_s"] = time.perf_counter() - t0

    # the selection is fixed (and recorded) before any test evaluation
    if run is not None:
        prev = run.selection()
        if prev is None:
            run.record_event(
                "selected", heads=str(best.heads), dist_acc=best.dist_acc, dist_gain=best.dist_gain
            )
        elif prev.get("heads") != str(best.heads):
            raise RuntimeError(
                f"{run.path} already selected {prev.get('heads')} before reading the test split, "
                f"but this search selects {best.heads}; a selection cannot change once D_test was "
                "read (did the scores or options change?)"
            )
        if isinstance(oracle, CachedOracle):
            oracle.note_selection()

    # test
    t0 = time.perf_counter()
    pair = _evaluate(oracle, "test", [HeadSet(), best.heads], "test")
    intact_test, ablated_test = pair[0], pair[1]
    n_test = int(intact_test.shape[0])
    acc_intact = float(intact_test.to(torch.float64).mean())
    acc_ablated = float(ablated_test.to(torch.float64).mean())
    gain = (int(ablated_test.sum()) - int(intact_test.sum())) / n_test
    ci_low, ci_high = paired_bootstrap_ci(intact_test, ablated_test, n_boot=n_boot, alpha=alpha, seed=seed)
    p_value = mcnemar_exact(intact_test, ablated_test)
    null_sets = random_head_sets(L, H, len(best.heads), n_null, seed)
    null_correct = _evaluate_chunked(oracle, "test", null_sets, "null", chunk, progress)
    null_gains = [(int(c.sum()) - int(intact_test.sum())) / n_test for c in null_correct]
    records = []
    if posthoc:
        post = _evaluate_chunked(oracle, "test", [s.heads for s in subsets], "posthoc", chunk, progress)
        for s, c in zip(subsets, post):
            tg = (int(c.sum()) - int(intact_test.sum())) / n_test
            records.append(SubsetScore(s.heads, s.n_correct, s.n_dist, s.dist_gain, s.score_sum, tg).to_dict())
    else:
        records = [s.to_dict() for s in subsets]
    timings["test_s"] = time.perf_counter() - t0

    result = Result(
        heads=str(best.heads),
        dist_acc_intact=float(intact_dist.to(torch.float64).mean()),
        dist_acc_ablated=best.dist_acc,
        dist_gain=best.dist_gain,
        test_acc_intact=acc_intact,
        test_acc_ablated=acc_ablated,
        gain=gain,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        null_gains=null_gains,
        null_p=null_fraction(null_gains, gain),
        scores=scores.tolist(),
        scorer=options["scorer"],
        pool=[str(h) for h in pool],
        subsets=records,
        k=k,
        pool_size=pool_size,
        n_dist=int(intact_dist.shape[0]),
        n_test=n_test,
        seed=seed,
        n_layers=L,
        n_heads=H,
        strategy=strategy,
        beam_width=options["beam_width"],
        n_null=n_null,
        n_boot=n_boot,
        alpha=alpha,
        selected_before_test=True,
        timings=timings,
    )
    if run is not None:
        run.write_result(result.to_dict())
        run.record_event("finished", heads=result.heads, gain=result.gain)
    return result


class _CallableModule(types.ModuleType):
    """Lets ``cel_lens.search(model, task, ...)`` work although ``cel_lens.search`` is a module."""

    def __call__(self, model: Any, task: Any, **kwargs: Any) -> Any:
        from cel_lens.pipeline import search as _search

        return _search(model, task, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

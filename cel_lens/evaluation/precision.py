"""bf16 compute whose decisions equal float32's: which examples to recompute, and how to compute.

With ``precision="bf16"`` :func:`~cel_lens.evaluation.evaluate` runs its forward passes on a
bfloat16 copy of the weights (:func:`compute_precision`; products in bfloat16, the residual stream,
norms and attention in float32) and keeps, beside each decision, its *margin*:

* exact match (Arithmetic): at every target position the target's logit minus the best other
  logit; a row's margin is the smallest of them (> 0 iff every target token is the argmax);
* generation (MBPP): at every greedy step the top-1 minus the top-2 logit; a row's margin is the
  smallest over the steps it generated;
* multiple choice (BoolQ, HellaSwag): each choice's summed log-likelihood (and per character,
  for ``acc_norm``), its length in tokens.

:func:`recompute_mask` is the one rule that says which (variant, example) decisions could differ
from float32's: those whose margin is within :data:`LOGIT_BOUND` (per position, one logit
difference) of flipping. Those are recomputed in float32 (a generation regenerated whole), so
the per-example bits equal the float32 run's; the scorers, the search and the report only ever
see the bits.

**The bounds**, each documented where it is defined: :data:`LOGIT_BOUND` for two logits near the
top of one position (greedy and exact-match decisions), :data:`LOGPROB_BOUND` for any two logits,
hence any token's log-probability (a choice of ``k`` tokens moves by at most ``k LOGPROB_BOUND``),
and :data:`CHOICE_PAIR_BOUND` for two one-token choices at one position (BoolQ's `` yes``/`` no``),
which each run checks on its own recomputes (:func:`pair_check`), else falls back to
``LOGPROB_BOUND``. All are measured on SmolLM2-135M-Instruct (``benchmarks/precision.py``,
``docs/precision.md``) and set 2-3 times above the largest change seen.

:func:`resolve_precision` turns ``"auto"`` (the default) into ``"bf16"`` for a model held in
bfloat16, or on a CPU with native bf16 where a timed pass of the model says bf16 pays
(:mod:`~cel_lens.evaluation.precision_probe`, on the kinds of :data:`AUTO_KINDS`)."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import weakref
from dataclasses import dataclass
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.config import PRECISIONS
from cel_lens.evaluation.precision_groups import recompute_groups
from cel_lens.evaluation.precision_probe import AUTO_MIN_SPEEDUP, bf16_probe, probe_record, projected_speedup
from cel_lens.model import bf16_usable
from cel_lens.tasks.answer_types import ANSWER_TYPES, MULTIPLE_CHOICE, answer_type_entry

__all__ = [
    "PRECISIONS", "Precision", "AUTO", "FLOAT32", "BF16", "precision_entry", "LOGIT_BOUND", "LOGPROB_BOUND", "CHOICE_PAIR_BOUND", "PAIR_CHECK_MIN", "PAIR_CHECK_SHARE",
    "pair_check", "merge_pair_checks", "Margins", "resolve_precision", "run_precision_record", "check_precision", "cpu_has_native_bf16",
    "compute_precision", "float32_model", "recompute_mask", "recompute_groups", "split_key",
    "tally_summary", "recompute_summary", "precision_line", "AUTO_MIN_PARAMS", "AUTO_KINDS", "ONE_TOKEN_CHOICES",
]


@dataclass(frozen=True)
class Precision:
    """A compute precision (an entry of :data:`~cel_lens.config.PRECISIONS`): ``reduced``: it
    computes in bfloat16 and recomputes in float32 every decision within the bf16 error bound;
    ``automatic``: :func:`resolve_precision` chooses one of the others per model and task."""

    name: str
    reduced: bool = False
    automatic: bool = False


AUTO = Precision("auto", automatic=True)
"""bf16 or float32, by the rule of the module docstring."""
FLOAT32 = Precision("float32")
"""float32 throughout."""
BF16 = Precision("bf16", reduced=True)
"""bfloat16 compute, decisions within the bf16 error bound recomputed in float32."""


def precision_entry(precision: Optional[str]) -> Precision:
    """The :class:`Precision` a name (or alias, :func:`check_precision`) stands for."""
    return PRECISIONS.resolve(check_precision(precision))


LOGIT_BOUND = 1.0
"""Largest change bf16 compute may make to the difference of two logits near the top of one
position (within ``2 LOGIT_BOUND`` of its largest: the tokens a greedy or exact-match decision
within the bound is between), in logit units: about 3 x the largest change measured on
SmolLM2-135M-Instruct, rounded up (``docs/precision.md``). A decision within it of flipping is
recomputed in float32."""

LOGPROB_BOUND = 2.0
"""Largest change bf16 compute may make to the difference of *any* two logits of one position,
hence to any token's log-probability (``l_t - logsumexp(l)`` moves by a weighted mean of such
differences): about 2 x the largest change measured on SmolLM2-135M-Instruct (``docs/precision.md``).
What a choice's score is bounded by (its tokens need not be near the top)."""

CHOICE_PAIR_BOUND = 0.5
"""Largest change bf16 compute may make to the difference of two one-token choices scored at the
same position (BoolQ's `` yes`` minus `` no``): 2.6 x the largest change measured on
SmolLM2-135M-Instruct (0.19 over 2,560 positions of 80 BoolQ examples under 16 head sets,
``docs/precision.md``), where any two logits moved by up to 0.96. Trusted in a run only while its
own recomputed decisions confirm it (:func:`pair_check`)."""

PAIR_CHECK_MIN = 64
"""Recomputed one-token-choice decisions an evaluation must have (each gives the bf16 and the
float32 difference of its choices) before :data:`CHOICE_PAIR_BOUND` is trusted for the rest."""

PAIR_CHECK_SHARE = 0.5
"""The largest change those decisions show must stay within this share of
:data:`CHOICE_PAIR_BOUND`, else the rest are held to ``LOGPROB_BOUND`` (recomputed where it says)."""

AUTO_MIN_PARAMS = 20_000_000
"""``"auto"`` computes a float32 model in bf16 only from this many parameters: a toy model's matrix
products are too small for bf16 to pay (a 48k-parameter test model ran 2-3 x slower)."""

ONE_TOKEN_CHOICES = "one_token_choices"
"""What :func:`~cel_lens.evaluation.encode.precision_kind` calls a multiple-choice split whose
choices are each one token (BoolQ's `` yes``/`` no``): held to :data:`CHOICE_PAIR_BOUND`."""

AUTO_KINDS: tuple[str, ...] = tuple(name for name in ANSWER_TYPES if answer_type_entry(name).auto_bf16)
"""Split kinds (:func:`~cel_lens.evaluation.encode.precision_kind`) ``"auto"`` computes a float32
model in bf16 for, on a CPU (the answer types whose entry says ``auto_bf16``: exact match): where bf16 with its recomputes was faster in every measurement
(``docs/precision.md``; SmolLM2 Arithmetic 1.41-2.45 x). BoolQ's one-token choices are not: a
whole exact stage 1 ran 1.04 x faster on a CPU with AMX and 0.49 x (layers 0-5) on one without,
where the pair check held many decisions to ``LOGPROB_BOUND``. MBPP recomputed every decision
(0.45 x); multi-token choices, held to ``k LOGPROB_BOUND``, recompute nearly all."""


def check_precision(precision: Optional[str]) -> str:
    """``precision``'s canonical name (``None`` is ``"auto"``); ``ValueError`` naming the choices."""
    name = "auto" if precision is None else str(precision).lower()
    name = "bf16" if name == "bfloat16" else ("float32" if name in ("fp32", "float") else name)
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return name


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (``avx512_bf16`` or AMX in ``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_precision(precision: Optional[str], model, split_kind: Optional[str] = None) -> str:
    """``"float32"`` or ``"bf16"``: ``precision`` itself, or for ``"auto"`` (``None``) the rule of
    the module docstring for a split of ``split_kind`` (:func:`~cel_lens.evaluation.encode.precision_kind`; the environment is read at the edge:
    :meth:`~cel_lens.evaluation.context.EvalContext.from_environment`)."""
    name = check_precision(precision)
    if name != "auto":
        return name
    p = next(model.parameters())
    if p.dtype == torch.bfloat16:
        return "bf16"
    if p.dtype == torch.float32 and p.device.type == "cpu" and cpu_has_native_bf16():
        big = sum(q.numel() for q in model.parameters()) >= AUTO_MIN_PARAMS
        if not big or split_kind not in AUTO_KINDS:
            return "float32"
        return "bf16" if projected_speedup(model, split_kind, bf16_probe(model)["speedup"]) >= AUTO_MIN_SPEEDUP else "float32"
    return "float32"


@contextlib.contextmanager
def compute_precision(model, precision: str) -> Iterator[bool]:
    """Within the block, ``model``'s forward passes compute in ``precision``. ``"bf16"``: on a
    bfloat16 copy of a float32 model's weights, made once and kept beside it, the residual stream,
    norms and attention in float32 (:func:`~cel_lens.model.bf16_usable`); for a model without a
    fused stack, autocast on its device; a model held in bfloat16 as it is. ``"float32"``: as the
    model is. Yields whether the passes are to run on the weight copy: the caller passes that on
    to each pass as its ``bf16`` argument (nothing is set on the model or the thread for it)."""
    if precision != "bf16":
        yield False
        return
    if bf16_usable(model):
        yield True
        return
    device = next(model.parameters()).device.type
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        yield False


_FLOAT32: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def float32_model(model):
    """``model`` when its weights are float32, else a float32 copy of it (made once, kept beside
    the model): what a bf16 decision near its bound is recomputed on."""
    if next(model.parameters()).dtype == torch.float32:
        return model
    held = _FLOAT32.get(model)
    if held is None:
        with contextlib.redirect_stdout(io.StringIO()):  # TransformerLens prints "Changing model dtype ..."
            held = copy.deepcopy(model).to(torch.float32)
        _FLOAT32[model] = held
    return held


@dataclass
class Margins:
    """What bf16 decided each (variant, example) by (see the module docstring).

    ``token``: the smallest per-position logit margin (exact match: target minus best other, signed;
    generation: top-1 minus top-2, >= 0; ``inf`` where the decision was made in float32).
    ``choice_ll``: each choice's summed log-likelihood (``-inf`` for a missing choice),
    ``choice_tokens`` its tokens and ``choice_chars`` its characters (multiple choice)."""

    token: Optional[Float[Tensor, "variant example"]] = None
    choice_ll: Optional[Float[Tensor, "variant example choice"]] = None
    choice_tokens: Optional[Float[Tensor, "example choice"]] = None
    choice_chars: Optional[Float[Tensor, "example choice"]] = None


def _choice_unsure(
    scores: Float[Tensor, "variant example choice"], err: Float[Tensor, "example choice"]
) -> Bool[Tensor, "variant example"]:
    """Whether any choice could overtake the best: ``s_best - s_j <= err_best + err_j``."""
    best = scores.argmax(-1, keepdim=True)
    gap = scores.gather(-1, best) - scores
    err = err.expand_as(scores)
    room = err.gather(-1, best) + err
    close = (gap <= room) & torch.isfinite(scores)
    close = close.scatter(-1, best, False)
    return close.any(-1)


def recompute_mask(
    answer_type: str, margins: Margins, bound: float = LOGIT_BOUND, logprob_bound: float = LOGPROB_BOUND,
    pair_bound: float = CHOICE_PAIR_BOUND, metric: Optional[str] = None,
) -> Bool[Tensor, "variant example"]:
    """Which (variant, example) decisions bf16 may have got wrong, to be recomputed in float32.

    ``exact_match``: ``|token margin| <= bound``; ``generation``: some step's top-1 minus top-2
    gap ``<= bound``; ``multiple_choice``: for ``acc`` and for ``acc_norm`` alike, some choice
    within its error bound of the best (a choice of ``k`` tokens: ``k logprob_bound``, divided by
    its characters for ``acc_norm``; for ``acc``, choices that are all one token: ``pair_bound / 2``
    each, whose sum bounds the one logit difference that decides). ``metric`` (``"acc"`` or
    ``"acc_norm"``) guards only that metric's decision, the one an evaluation's ``correct`` holds;
    ``None`` guards both."""
    if not answer_type_entry(answer_type).scores_choices:  # a token margin (or generation's step gap) decides
        assert margins.token is not None
        return margins.token.abs() <= bound
    assert margins.choice_ll is not None and margins.choice_tokens is not None and margins.choice_chars is not None
    ll, k, chars = margins.choice_ll, margins.choice_tokens, margins.choice_chars
    one = (k <= 1).all(-1, keepdim=True)
    err = torch.where(one, torch.full_like(k, pair_bound / 2), logprob_bound * k)
    unsure = _choice_unsure(ll, err)
    if metric == "acc":
        return unsure
    norm_err = logprob_bound * k / chars.clamp_min(1.0)
    norm_unsure = _choice_unsure(ll / chars.clamp_min(1.0), norm_err)
    return norm_unsure if metric == "acc_norm" else unsure | norm_unsure


def split_key(split) -> str:
    """The name a split's decisions are tallied under (``"examples"`` for an unnamed one)."""
    return str(getattr(split, "name", "") or "examples")


def recompute_summary(tally: Any) -> dict:
    """Per split of a :class:`~cel_lens.evaluation.context.RecomputeTally`: decisions made in bf16,
    how many were recomputed in float32, and their share (what a run records); where one-token
    choices were checked, the ``pair_check`` record (:func:`pair_check`, the split name's tasks merged)."""
    counts, pairs = tally.snapshot()
    out = tally_summary({name: (done, total) for name, (done, total) in counts.items()})
    for (_, name), record in pairs.items():
        if name in out:
            out[name]["pair_check"] = merge_pair_checks([out[name].get("pair_check", {}), record])
    return out


def merge_pair_checks(records: Iterable[Mapping[str, Any]]) -> dict:
    """One ``pair_check`` record of several (the tasks of one split name, a Ray search's replicas):
    the recomputed decisions observed, the largest change of a choice difference among them, the
    bound, and the decisions recomputed because a check failed; counts add up, changes take the max."""
    out = {"observed": 0, "largest_change": 0.0, "bound": CHOICE_PAIR_BOUND, "widened": 0}
    for r in records:
        out["observed"] += int(r.get("observed", 0))
        out["widened"] += int(r.get("widened", 0))
        out["largest_change"] = max(out["largest_change"], float(r.get("largest_change", 0.0)))
    return out


def _row_change(bf16_ll: Float[Tensor, "row choice"], float32_ll: Float[Tensor, "row choice"]) -> Float[Tensor, " row"]:
    """Per row, how much bf16 moved the largest difference of two of its choices (missing choices,
    ``-inf`` or NaN in either, left out)."""
    d = float32_ll - bf16_ll
    real = torch.isfinite(d)
    return d.masked_fill(~real, float("-inf")).amax(-1) - d.masked_fill(~real, float("inf")).amin(-1)


def pair_check(
    tally: Any, split, margins: Margins, float32_ll: Float[Tensor, "variant example choice"],
    redo: Bool[Tensor, "variant example"], metric: Optional[str] = None,
    computed: Optional[Bool[Tensor, "variant example"]] = None,
) -> Bool[Tensor, "variant example"]:
    """Check :data:`CHOICE_PAIR_BOUND` on an evaluation's own recomputes, and say what else to recompute.

    Every recomputed decision between one-token choices has both its bf16 scores (``margins``) and
    float32's (``float32_ll``, after the recompute): the bound is confirmed when at least
    :data:`PAIR_CHECK_MIN` of them moved no choice difference by more than :data:`PAIR_CHECK_SHARE`
    of it, counting those of earlier evaluations of the same split (task and name) in ``tally`` (a
    :class:`~cel_lens.evaluation.context.RecomputeTally`: one search's). Otherwise what the wider ``LOGPROB_BOUND`` rule marks beyond
    ``redo`` is returned to be recomputed too (none when confirmed, or where the bound was not used:
    no one-token choices, or ``metric="acc_norm"``). ``computed`` (default ``redo``): every decision
    the recompute computed in float32, each an observation (a recompute group's examples are a
    superset of what its members mark). The split's record is kept for the run's tally."""
    none = torch.zeros_like(redo)
    if margins.choice_ll is None or margins.choice_tokens is None or metric == "acc_norm":
        return none
    one = (margins.choice_tokens <= 1).all(-1)
    if not bool(one.any()):
        return none
    seen = (redo if computed is None else computed | redo) & one[None, :]
    n = int(seen.sum())
    change = float(_row_change(margins.choice_ll[seen], float32_ll[seen]).max()) if n else 0.0
    key = (str(getattr(split, "task", "") or ""), split_key(split))
    held = merge_pair_checks([tally.pair_record(key), {"observed": n, "largest_change": change}])
    confirmed = held["observed"] >= PAIR_CHECK_MIN and held["largest_change"] <= PAIR_CHECK_SHARE * CHOICE_PAIR_BOUND
    widen = none if confirmed else recompute_mask(
        MULTIPLE_CHOICE.name, margins, pair_bound=LOGPROB_BOUND, metric=metric) & ~redo
    held["widened"] += int(widen.sum())
    tally.set_pair_record(key, held)  # this split's evidence so far, this call's included
    return widen


def tally_summary(counts: Mapping[str, Sequence[int]]) -> dict:
    """Per split name, ``(recomputed, decisions)`` counts as a run records them: decisions,
    recomputed and their share (a Ray search sums its replicas' counts first)."""
    return {
        name: {"decisions": total, "recomputed": done, "share": (done / total) if total else 0.0}
        for name, (done, total) in sorted(counts.items())
    }


def run_precision_record(precision: Optional[str], model, kind: Optional[str], tally: Any) -> dict[str, Any]:
    """A run's ``precision`` record: the precision a split of ``kind`` computes in now, the
    ``tally`` of recomputes (:func:`recompute_summary`), and where ``auto`` timed the model, what it
    measured (the pass and the re-checked shares its choice was revised by)."""
    record = {"compute": resolve_precision(precision, model, kind), "recomputed": recompute_summary(tally)}
    measured = probe_record(model)
    return record if measured is None else {**record, "auto": measured}


def _auto_words(model, split_kind: Optional[str], chose: str) -> str:
    """Why ``auto`` chose ``chose`` for a float32 model: the timed pass, and the re-checks seen."""
    speedup = float(bf16_probe(model)["speedup"])
    projected = projected_speedup(model, split_kind, speedup)
    words = (f"a timed pass ran bf16 {speedup:.2f}x faster than float32 here" if chose == "bf16"
             else f"a timed pass ran bf16 only {speedup:.2f}x float32's speed here")
    if projected != speedup:
        words = (f"a timed pass ran bf16 {speedup:.2f}x float32's speed here, {projected:.2f}x with the re-checks "
                 "its evaluations needed so far")
    return words


def precision_line(model, precision: Optional[str], split_kind: Optional[str] = None) -> str:
    """One line a search of a ``split_kind`` task starts with: the precision it computes in, and why."""
    name = check_precision(precision)
    resolved = resolve_precision(name, model, split_kind)
    if resolved == "float32":
        if name != "auto":
            return "precision: float32"
        small = sum(q.numel() for q in model.parameters()) < AUTO_MIN_PARAMS
        words = "one-token choice" if split_kind == ONE_TOKEN_CHOICES else str(split_kind).replace("_", "-")
        why = "a model too small for bf16 to pay" if small else (
            f"bf16 was not always measured faster on {words} tasks" if cpu_has_native_bf16() else "no native bf16 here")
        if not small and cpu_has_native_bf16() and split_kind in AUTO_KINDS:
            why = _auto_words(model, split_kind, "float32")
        return f"precision: float32 (auto: {why}; --precision bf16 gives the same results)"
    why = ""
    held = next(model.parameters()).dtype == torch.bfloat16
    if name == "auto":
        why = " (auto: the model is in bfloat16)" if held else f" (auto: {_auto_words(model, split_kind, 'bf16')})"
    if held:  # the float32 copy holds the rounded weights: its decisions are theirs, not the checkpoint's
        return (f"precision: bf16 compute{why}; every decision within the bf16 error bound is recomputed in float32 "
                "on a float32 copy of the model's bfloat16 weights, so the results are those weights' computed in "
                "float32, not those of a float32 checkpoint (load the model in float32 for those)")
    return (f"precision: bf16 compute{why}; every decision within the bf16 error bound is recomputed in float32, "
            "so the results equal float32's (--precision float32 turns it off)")

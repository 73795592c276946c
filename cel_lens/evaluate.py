"""Run a model on a split, intact and under V ablation variants at once, per example.

Three protocols, chosen by the split's ``kind`` (lm-evaluation-harness conventions):

* ``exact_match`` (Arithmetic): prompt and target are encoded as lm-eval's ``_encode_pair`` does;
  one teacher-forced forward pass over ``prompt + target[:-1]`` (right padded: causal attention
  keeps pads out of real positions and rotary positions stay natural); correct iff every target
  token is the argmax at its position, which equals greedy decoding (``tests/test_evaluate.py``).
* ``multiple_choice`` (BoolQ, HellaSwag): summed log-likelihood of each choice given the shared
  prompt; ``acc`` = argmax of the sums, ``acc_norm`` = argmax of the sums divided by the choice's
  length in characters. The prompt is run once per example: its last position scores every
  choice's first token, and the remaining choice tokens run as continuations of a key/value cache
  of the prompt (one-token choices, as BoolQ's, need no second pass at all). Models without a
  TransformerLens cache fall back to one row per choice.
* ``generation`` (MBPP): batched greedy decoding with a key/value cache and left padding, stopped
  at the stop sequences or EOS, then ``split.judge(example, completion)``.

Variants: the inputs are repeated variant-major along the batch and a ``[V, L, H]`` mask zeroes
``hook_z`` (:func:`cel_lens.ablation.variant_hooks`), in chunks of at most ``max_rows`` rows. For
teacher-forced protocols the intact model runs once per batch; every ablated variant resumes from
the intact residual stream entering its first ablated layer (kept from that intact pass, or read
from an :class:`~cel_lens.store.ActivationStore`), so layers below it are never recomputed. Only
the scored positions are unembedded.

``cel_lens.evaluate(model, split, ...)`` works both as the function and as this module (the module
is callable), whichever ``cel_lens.evaluate`` happens to be bound to.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.ablation import (
    forward_resid,
    forward_resid_cached,
    init_kv_cache,
    model_shape,
    select_kv_cache,
    unembed,
    variant_hooks,
)
from cel_lens.heads import HeadSet, HeadsLike, masks_from_head_sets
from cel_lens.tasks import Example, Split

__all__ = [
    "evaluate",
    "EvalResult",
    "EncodedBatch",
    "TeacherForced",
    "encode_split",
    "encode_pair",
    "format_prompt",
    "logprob_metric",
    "greedy_generate",
    "supports_resume",
    "DEFAULT_STOP",
]

DEFAULT_STOP: tuple[str, ...] = ("[DONE]",)
_VECTOR_BUDGET = 1 << 25  # logits elements unembedded at once (128 MiB in float32)


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------
@dataclass
class EvalResult:
    """Per-example results of V head sets on one split.

    ``correct[v, i]`` is the headline metric of example ``ids[i]`` under ``head_sets[v]`` (acc for
    exact match and BoolQ, acc_norm for HellaSwag, pass@1 for generation); ``scores[v, i]`` the
    number that decided it (exact match: log-prob of the target; multiple choice: margin of the
    correct choice's (normalised) log-likelihood over the best other choice, > 0 iff correct;
    generation: 1.0/0.0). ``extra`` holds the other metric and per-choice log-likelihoods
    (``"acc"``, ``"acc_norm"``, ``"choice_ll"`` ``[V, n, max_choices]``, NaN-padded).
    """

    head_sets: list[HeadSet]
    ids: list[str]
    correct: Bool[Tensor, "variant example"]
    scores: Float[Tensor, "variant example"]
    extra: dict[str, Tensor] = field(default_factory=dict)
    completions: Optional[list[list[str]]] = None
    kind: str = "exact_match"
    metric: str = "acc"
    task: str = ""
    split: str = ""
    chat_template: bool = False

    @property
    def accuracy(self) -> Float[Tensor, "variant"]:
        """Mean of ``correct`` per variant."""
        if self.correct.shape[1] == 0:
            return torch.full((self.correct.shape[0],), float("nan"))
        return self.correct.float().mean(dim=1)

    def index(self, head_set: HeadsLike) -> int:
        """Row of ``head_set`` in this result (``ValueError`` if it was not evaluated)."""
        target = HeadSet.parse(head_set)
        for i, s in enumerate(self.head_sets):
            if s == target:
                return i
        raise ValueError(f"head set {target} was not evaluated here")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (head sets as canonical text, tensors as lists, non-finite floats as None)."""
        return {
            "task": self.task,
            "split": self.split,
            "kind": self.kind,
            "metric": self.metric,
            "chat_template": self.chat_template,
            "head_sets": [str(s) for s in self.head_sets],
            "ids": list(self.ids),
            "accuracy": _jsonable(self.accuracy),
            "correct": self.correct.to(torch.int8).tolist(),
            "scores": _jsonable(self.scores),
            "extra": {k: _jsonable(v) for k, v in self.extra.items()},
            "completions": self.completions,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvalResult":
        """Inverse of :meth:`to_dict`."""

        def tensor(x: Any, dtype: torch.dtype) -> Tensor:
            return torch.tensor(_unjson(x), dtype=dtype)

        extra = {
            k: tensor(v, torch.bool if k in ("acc", "acc_norm") else torch.float32)
            for k, v in (data.get("extra") or {}).items()
        }
        n_var = len(data["head_sets"])
        n_ex = len(data["ids"])
        return cls(
            head_sets=[HeadSet.parse(s) for s in data["head_sets"]],
            ids=list(data["ids"]),
            correct=tensor(data["correct"], torch.bool).reshape(n_var, n_ex),
            scores=tensor(data["scores"], torch.float32).reshape(n_var, n_ex),
            extra=extra,
            completions=data.get("completions"),
            kind=data.get("kind", "exact_match"),
            metric=data.get("metric", "acc"),
            task=data.get("task", ""),
            split=data.get("split", ""),
            chat_template=bool(data.get("chat_template", False)),
        )


def _jsonable(t: Tensor) -> Any:
    if t.dtype == torch.bool:
        return t.to(torch.int8).tolist()
    values = t.double().tolist()

    def fix(x: Any) -> Any:
        if isinstance(x, list):
            return [fix(y) for y in x]
        return x if math.isfinite(x) else None

    return fix(values)


def _unjson(x: Any) -> Any:
    if isinstance(x, list):
        return [_unjson(y) for y in x]
    return float("nan") if x is None else x


# ---------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------
@dataclass
class TeacherForced:
    """Right-padded rows ``prompt + continuation[:-1]`` scored in one forward pass.

    ``positions[r, j]`` is the position whose logits predict ``targets[r, j]``; entries where
    ``target_mask`` is False are padding (position 0, target 0) and are never unembedded.
    """

    tokens: Int[Tensor, "row pos"]
    attention_mask: Int[Tensor, "row pos"]
    positions: Int[Tensor, "row k"]
    targets: Int[Tensor, "row k"]
    target_mask: Bool[Tensor, "row k"]

    def to(self, device: torch.device | str) -> "TeacherForced":
        """The same rows on ``device``."""
        return TeacherForced(*(getattr(self, f.name).to(device) for f in fields(self)))


@dataclass
class EncodedBatch:
    """A batch of examples encoded for teacher-forced scoring (exact match or multiple choice).

    Every scored continuation is a *row* (one per example for exact match, one per choice for
    multiple choice); ``row_example`` maps rows to examples of the batch, ``example_index``
    examples to their index in the split. Two layouts hold the model inputs:

    * ``"rows"``: :class:`TeacherForced` ``rows``, one right-padded sequence per row;
    * ``"shared"`` (multiple choice): each prompt once, left padded (``context_tokens``), and each
      choice's tokens but its last as a right-padded continuation (``cont_tokens``, zero width when
      every choice is one token). ``targets[r, 0]`` is scored at the prompt's last position and
      ``targets[r, j]`` at continuation position ``j - 1``.

    ``answer`` holds one :class:`TeacherForced` row per example for the correct continuation (the
    target, or the labelled choice): what :func:`logprob_metric` differentiates.
    """

    kind: str
    example_index: Int[Tensor, "example"]
    row_example: Int[Tensor, "row"]
    row_choice: Int[Tensor, "row"]
    labels: Int[Tensor, "example"]
    choice_chars: Float[Tensor, "row"]
    targets: Int[Tensor, "row k"]
    target_mask: Bool[Tensor, "row k"]
    answer: TeacherForced
    rows: Optional[TeacherForced] = None
    context_tokens: Optional[Int[Tensor, "example ctx"]] = None
    context_mask: Optional[Int[Tensor, "example ctx"]] = None
    cont_tokens: Optional[Int[Tensor, "row cont"]] = None
    cont_mask: Optional[Int[Tensor, "row cont"]] = None

    @property
    def layout(self) -> str:
        """``"rows"`` or ``"shared"`` (see the class docstring)."""
        return "rows" if self.rows is not None else "shared"

    @property
    def n_examples(self) -> int:
        """Examples in the batch."""
        return int(self.example_index.shape[0])

    @property
    def n_rows(self) -> int:
        """Scored continuations in the batch."""
        return int(self.row_example.shape[0])

    def part_shapes(self, d_model: int) -> list[tuple[int, int, int]]:
        """Shapes of the residual-stream tensors one layer of this batch has: ``[rows, pos, d]``
        for the ``"rows"`` layout, the contexts' and the continuations' for ``"shared"``."""
        if self.rows is not None:
            return [(*self.rows.tokens.shape, d_model)]
        assert self.context_tokens is not None and self.cont_tokens is not None
        return [(*self.context_tokens.shape, d_model), (*self.cont_tokens.shape, d_model)]


def _tokenizer(model):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ValueError("the model has no tokenizer; evaluation needs one to encode prompts")
    return tok


def format_prompt(model, prompt: str, chat_template: bool = False) -> str:
    """``prompt`` as the model reads it: unchanged, or wrapped as one user turn of the tokenizer's
    chat template with the assistant's generation prompt (``chat_template=True``)."""
    if not chat_template:
        return prompt
    tok = _tokenizer(model)
    if not getattr(tok, "chat_template", None):
        raise ValueError("chat_template=True but the model's tokenizer has no chat template")
    return tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


def _encode_text(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _prefix(model, text: str) -> list[int]:
    """BOS when the model prepends one (TransformerLens' ``default_prepend_bos``) and the text
    (e.g. a chat template) does not already start with it."""
    tok = _tokenizer(model)
    bos = getattr(tok, "bos_token_id", None)
    if not getattr(model.cfg, "default_prepend_bos", True) or bos is None:
        return []
    if tok.bos_token and text.startswith(tok.bos_token):
        return []
    return [int(bos)]


def encode_pair(model, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of ``context`` (with BOS when the model prepends one) and of ``continuation``, as
    lm-eval's ``_encode_pair``: trailing whitespace of the context moves to the continuation, the
    continuation's tokens are those of ``context + continuation`` after the context's own tokens
    (so a BPE merge across the boundary is scored as the model would see the joint text)."""
    tok = _tokenizer(model)
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = _encode_text(tok, context + continuation)
    ctx = _encode_text(tok, context)
    cont = whole[len(ctx):]
    ctx = _prefix(model, context) + ctx
    if not ctx:  # lm-eval scores an empty context after the end-of-text token
        fallback = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        ctx = [int(fallback)]
    if not cont:
        raise ValueError(f"continuation {continuation!r} encodes to no tokens")
    return ctx, cont


def _pad_id(model) -> int:
    tok = _tokenizer(model)
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = getattr(tok, name, None)
        if value is not None:
            return int(value)
    return 0


def _fit(ctx: list[int], conts: list[list[int]], n_ctx: int) -> list[int]:
    """Drop the context's oldest tokens so every ``ctx + cont[:-1]`` fits in ``n_ctx`` (lm-eval)."""
    longest = max(len(c) for c in conts)
    room = n_ctx - longest + 1
    if room < 1:
        raise ValueError(f"a continuation of {longest} tokens does not fit the model's context ({n_ctx})")
    return ctx[-room:] if len(ctx) > room else ctx


def _split_kind(split: Split) -> str:
    kind = split.kind
    if kind is None:
        first = split[0] if len(split) else None
        kind = "multiple_choice" if first is not None and first.choices else "exact_match"
    if kind not in ("exact_match", "multiple_choice", "generation"):
        raise ValueError(f"unknown task kind {kind!r}")
    return kind


def _chat_choice(split: Split, chat_template: Optional[bool]) -> bool:
    if chat_template is not None:
        return bool(chat_template)
    options = getattr(split, "options", None) or {}
    return bool(options.get("chat_template", False))


def _encode_example(model, ex: Example, kind: str, chat: bool) -> tuple[list[int], list[list[int]], int, list[int]]:
    prompt = format_prompt(model, ex.prompt, chat)
    if kind == "exact_match":
        if not ex.target:
            raise ValueError(f"example {ex.id} has no target (exact-match tasks need one)")
        conts_text = [ex.target]
        label = 0
    else:
        if len(ex.choices) == 0 or ex.label is None:
            raise ValueError(f"example {ex.id} needs choices and a label (multiple-choice task)")
        if not 0 <= ex.label < len(ex.choices):
            raise ValueError(f"example {ex.id}: label {ex.label} out of range for {len(ex.choices)} choices")
        conts_text = list(ex.choices)
        label = int(ex.label)
    ctx: Optional[list[int]] = None
    conts: list[list[int]] = []
    for text in conts_text:
        c, k = encode_pair(model, prompt, text)
        if ctx is not None and c != ctx:  # cannot happen: the context's encoding ignores the choice
            raise RuntimeError(f"example {ex.id}: context encodes differently across choices")
        ctx = c
        conts.append(k)
    assert ctx is not None
    ctx = _fit(ctx, conts, int(model.cfg.n_ctx))
    # acc_norm divides by the choice's length in characters without the delimiting space, as
    # lm-eval does (its choices exclude the target delimiter); a task may give the lengths itself
    lengths = ex.meta.get("choice_chars") or [len(t[1:]) if t.startswith(" ") else len(t) for t in conts_text]
    return ctx, conts, label, [int(n) for n in lengths]


def _teacher_forced(pairs: Sequence[tuple[list[int], list[int]]], pad: int) -> TeacherForced:
    n = len(pairs)
    seqs = [ctx + cont[:-1] for ctx, cont in pairs]
    width = max(len(s) for s in seqs)
    k = max(len(cont) for _, cont in pairs)
    tokens = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    positions = torch.zeros((n, k), dtype=torch.long)
    targets = torch.zeros((n, k), dtype=torch.long)
    target_mask = torch.zeros((n, k), dtype=torch.bool)
    for r, ((ctx, cont), seq) in enumerate(zip(pairs, seqs)):
        tokens[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
        positions[r, : len(cont)] = torch.arange(len(ctx) - 1, len(ctx) - 1 + len(cont))
        targets[r, : len(cont)] = torch.tensor(cont)
        target_mask[r, : len(cont)] = True
    return TeacherForced(tokens, mask, positions, targets, target_mask)


def _build_batch(
    kind: str, index: list[int], encoded: list[tuple[list[int], list[list[int]], int, list[int]]], pad: int, shared: bool
) -> EncodedBatch:
    row_example, row_choice, chars, pairs = [], [], [], []
    for b, (ctx, conts, _, lens) in enumerate(encoded):
        for c, cont in enumerate(conts):
            row_example.append(b)
            row_choice.append(c)
            chars.append(float(lens[c]))
            pairs.append((ctx, cont))
    labels = [lab for _, _, lab, _ in encoded]
    answer = _teacher_forced([(ctx, conts[lab]) for ctx, conts, lab, _ in encoded], pad)
    common = dict(
        kind=kind,
        example_index=torch.tensor(index, dtype=torch.long),
        row_example=torch.tensor(row_example, dtype=torch.long),
        row_choice=torch.tensor(row_choice, dtype=torch.long),
        labels=torch.tensor(labels, dtype=torch.long),
        choice_chars=torch.tensor(chars, dtype=torch.float32),
        answer=answer,
    )
    if not shared:
        rows = answer if kind == "exact_match" else _teacher_forced(pairs, pad)
        return EncodedBatch(targets=rows.targets, target_mask=rows.target_mask, rows=rows, **common)
    n, r = len(encoded), len(pairs)
    width = max(len(ctx) for ctx, *_ in encoded)
    k = max(len(cont) for _, cont in pairs)
    context = torch.full((n, width), pad, dtype=torch.long)
    context_mask = torch.zeros((n, width), dtype=torch.long)
    for b, (ctx, *_) in enumerate(encoded):
        context[b, width - len(ctx) :] = torch.tensor(ctx)
        context_mask[b, width - len(ctx) :] = 1
    cont_tokens = torch.full((r, k - 1), pad, dtype=torch.long)
    cont_mask = torch.zeros((r, k - 1), dtype=torch.long)
    targets = torch.zeros((r, k), dtype=torch.long)
    target_mask = torch.zeros((r, k), dtype=torch.bool)
    for i, (_, cont) in enumerate(pairs):
        if len(cont) > 1:
            cont_tokens[i, : len(cont) - 1] = torch.tensor(cont[:-1])
            cont_mask[i, : len(cont) - 1] = 1
        targets[i, : len(cont)] = torch.tensor(cont)
        target_mask[i, : len(cont)] = True
    return EncodedBatch(
        targets=targets,
        target_mask=target_mask,
        context_tokens=context,
        context_mask=context_mask,
        cont_tokens=cont_tokens,
        cont_mask=cont_mask,
        **common,
    )


def encode_split(
    model,
    split: Split,
    batch_size: int = 8,
    *,
    chat_template: Optional[bool] = None,
    share_context: Optional[bool] = None,
) -> list[EncodedBatch]:
    """Encode an exact-match or multiple-choice split into batches of ``batch_size`` examples.

    Examples are ordered longest first (less padding; memory errors show on the first batch);
    ``EncodedBatch.example_index`` maps back to the split. ``share_context`` picks the ``"shared"``
    layout for multiple choice (default: when the model has a key/value cache, or every choice is
    one token).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    kind = _split_kind(split)
    if kind == "generation":
        raise ValueError("generation tasks have no teacher-forced encoding; evaluate() generates instead")
    chat = _chat_choice(split, chat_template)
    encoded = [_encode_example(model, ex, kind, chat) for ex in split]
    order = sorted(range(len(encoded)), key=lambda i: -(len(encoded[i][0]) + max(map(len, encoded[i][1]))))
    shared = False
    if kind == "multiple_choice":
        one_token = all(len(c) == 1 for e in encoded for c in e[1])
        can = one_token or init_kv_cache(model, 1) is not None
        shared = can if share_context is None else bool(share_context)
        if shared and not can:
            raise ValueError("share_context=True needs a model with a key/value cache (HookedTransformer)")
    pad = _pad_id(model)
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batches.append(_build_batch(kind, idx, [encoded[i] for i in idx], pad, shared))
    return batches


# ---------------------------------------------------------------------------------------------
# forward passes
# ---------------------------------------------------------------------------------------------
def _param(model) -> Tensor:
    return next(model.parameters())


def supports_resume(model) -> bool:
    """Whether a forward pass of ``model`` can start at a later layer from a residual stream and
    skip the layers below (HookedTransformer's ``start_at_layer``). TransformerBridge cannot: it
    gets full passes from the tokens instead, which are exact, and stores keep no layers for it."""
    from transformer_lens import HookedTransformer

    return isinstance(model, HookedTransformer)


def _capture_hooks(layers: Iterable[int], sink: dict, part: int) -> list:
    hooks = []
    for layer in layers:

        def hook(x: Tensor, hook=None, layer=layer) -> None:  # noqa: ANN001 - TL hook signature
            sink[(part, layer)] = x.detach()

        hooks.append((f"blocks.{layer}.hook_resid_pre", hook))
    return hooks


def _input(model, tokens: Tensor, source: Optional[Tensor], start: int, n_var: int) -> Tensor:
    p = _param(model)
    x = tokens.to(p.device) if start == 0 else source.to(device=p.device, dtype=p.dtype)  # type: ignore[union-attr]
    return x if n_var == 1 else einops.repeat(x, "r ... -> (v r) ...", v=n_var)


def _repeat(t: Tensor, n_var: int, device) -> Tensor:
    t = t.to(device)
    return t if n_var == 1 else einops.repeat(t, "r ... -> (v r) ...", v=n_var)


def _rows_vectors(
    model,
    rows: TeacherForced,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
) -> Float[Tensor, "variant row k d_model"]:
    n_var, n_rows = masks.shape[0], rows.tokens.shape[0]
    device = _param(model).device
    x = _input(model, rows.tokens, sources[0] if sources else None, start, n_var)
    hooks = variant_hooks(masks, n_rows) + _capture_hooks(capture, sink if sink is not None else {}, 0)
    resid = forward_resid(
        model, x, start_at_layer=start, fwd_hooks=hooks, attention_mask=_repeat(rows.attention_mask, n_var, device)
    )
    resid = einops.rearrange(resid, "(v r) p d -> v r p d", v=n_var)
    idx = einops.repeat(rows.positions.to(device), "r k -> v r k d", v=n_var, d=resid.shape[-1])
    return resid.gather(2, idx)


def _shared_vectors(
    model,
    batch: EncodedBatch,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
) -> Float[Tensor, "variant row k d_model"]:
    assert batch.context_tokens is not None and batch.context_mask is not None
    assert batch.cont_tokens is not None and batch.cont_mask is not None
    sink = sink if sink is not None else {}
    n_var, n_ex, n_rows = masks.shape[0], batch.n_examples, batch.n_rows
    width = batch.cont_tokens.shape[1]
    device = _param(model).device
    ctx_mask = _repeat(batch.context_mask, n_var, device)
    cache = init_kv_cache(model, n_var * n_ex) if width > 0 else None
    if width > 0 and cache is None:
        raise ValueError("this batch was encoded with shared contexts, which needs a key/value cache")
    ctx = forward_resid_cached(
        model,
        _input(model, batch.context_tokens, sources[0] if sources else None, start, n_var),
        cache,
        attention_mask=ctx_mask,
        start_at_layer=start,
        fwd_hooks=variant_hooks(masks, n_ex) + _capture_hooks(capture, sink, 0),
    )
    row_example = batch.row_example.to(device)
    last = einops.rearrange(ctx[:, -1], "(v b) d -> v b d", v=n_var)[:, row_example]  # [v, row, d]
    if width == 0:
        return last[:, :, None]
    idx = (torch.arange(n_var, device=device)[:, None] * n_ex + row_example[None]).flatten()
    cont = forward_resid_cached(
        model,
        _input(model, batch.cont_tokens, sources[1] if sources else None, start, n_var),
        select_kv_cache(cache, idx),
        attention_mask=torch.cat([ctx_mask[idx], _repeat(batch.cont_mask, n_var, device)], dim=1),
        start_at_layer=start,
        fwd_hooks=variant_hooks(masks, n_rows) + _capture_hooks(capture, sink, 1),
    )
    cont = einops.rearrange(cont, "(v r) p d -> v r p d", v=n_var)
    return torch.cat([last[:, :, None], cont], dim=2)


def _score_vectors(
    model, vectors: Float[Tensor, "n d_model"], targets: Int[Tensor, "n"]
) -> tuple[Float[Tensor, "n"], Bool[Tensor, "n"]]:
    """Log-prob of each target and whether it is the argmax, unembedding in bounded chunks."""
    n = vectors.shape[0]
    step = max(1, _VECTOR_BUDGET // max(1, int(model.cfg.d_vocab)))
    logprobs, greedy = [], []
    for i in range(0, n, step):
        logits = unembed(model, vectors[i : i + step]).float()
        tgt = targets[i : i + step, None]
        logprobs.append((logits.gather(-1, tgt) - logits.logsumexp(-1, keepdim=True))[:, 0])
        greedy.append(logits.argmax(-1) == tgt[:, 0])
    if not logprobs:
        return vectors.new_zeros(0, dtype=torch.float32), torch.zeros(0, dtype=torch.bool, device=vectors.device)
    return torch.cat(logprobs), torch.cat(greedy)


def _row_scores(
    model, batch: EncodedBatch, vectors: Float[Tensor, "variant row k d_model"]
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Summed target log-prob and all-tokens-greedy flag per (variant, row); only real target
    positions are unembedded."""
    device = vectors.device
    sel = batch.target_mask.to(device)
    n_var = vectors.shape[0]
    picked = vectors[:, sel]  # [v, n, d]
    tgt = einops.repeat(batch.targets.to(device)[sel], "n -> (v n)", v=n_var)
    lp, greedy = _score_vectors(model, picked.reshape(-1, picked.shape[-1]), tgt)
    lp_full = torch.zeros((n_var, *sel.shape), dtype=torch.float32, device=device)
    greedy_full = torch.ones((n_var, *sel.shape), dtype=torch.bool, device=device)
    lp_full[:, sel] = lp.view(n_var, -1)
    greedy_full[:, sel] = greedy.view(n_var, -1)
    return lp_full.sum(-1).cpu(), greedy_full.all(-1).cpu()


def _batch_pass(
    model,
    batch: EncodedBatch,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Row scores of ``batch`` under ``masks``, starting at layer ``start`` (from tokens when 0,
    else from ``sources``: the intact residual streams entering ``start``), capturing the intact
    residual stream entering each layer in ``capture`` into ``sink[(part, layer)]``."""
    fn = _rows_vectors if batch.layout == "rows" else _shared_vectors
    rows_or_batch = batch.rows if batch.layout == "rows" else batch
    vectors = fn(model, rows_or_batch, masks, start, sources, capture, sink)  # type: ignore[arg-type]
    return _row_scores(model, batch, vectors)


def _batch_sources(sink: dict, layer: int, n_parts: int) -> list[Optional[Tensor]]:
    """Captured residual streams of each part at ``layer`` (None for a part that never ran: the
    continuations of one-token choices)."""
    return [sink.get((part, layer)) for part in range(n_parts)]


def _intact_mask(n_layers: int, n_heads: int) -> Bool[Tensor, "1 layer head"]:
    return torch.zeros(1, n_layers, n_heads, dtype=torch.bool)


def _layer_plan(
    sets: Sequence[HeadSet], resumable: bool, nearest=None
) -> tuple[list[int], dict[int, list[int]]]:
    """Intact variants, and ablated variants grouped by the layer their pass starts at."""
    intact = [i for i, s in enumerate(sets) if not s]
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(sets):
        if not s:
            continue
        first = int(s.first_layer) if resumable else 0
        start = nearest(first) if (nearest is not None and resumable) else first
        groups.setdefault(start, []).append(i)
    return intact, dict(sorted(groups.items()))


def _chunks(items: list[int], size: int) -> Iterable[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _teacher_forced_rows(
    model,
    batches: Sequence[EncodedBatch],
    sets: Sequence[HeadSet],
    *,
    store=None,
    max_rows: int,
    progress: bool,
    desc: str,
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Row scores of every batch under every head set (rows in batch order)."""
    n_layers, n_heads = model_shape(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    n_var = len(sets)
    total_rows = sum(b.n_rows for b in batches)
    lp = torch.zeros(n_var, total_rows)
    greedy = torch.zeros(n_var, total_rows, dtype=torch.bool)
    resumable = store.resumable if store is not None else supports_resume(model)
    intact, groups = _layer_plan(sets, resumable, store.nearest_layer if store is not None else None)
    bar = _progress(len(batches), progress, desc)
    offset = 0
    for b, batch in enumerate(batches):
        rows = slice(offset, offset + batch.n_rows)
        offset += batch.n_rows
        n_parts = len(batch.part_shapes(1))
        sink: dict = {}
        if store is not None:
            if intact:
                i_lp, i_greedy = store.intact_rows(b)
                lp[intact, rows] = i_lp
                greedy[intact, rows] = i_greedy
        else:
            capture = [s for s in groups if s > 0]
            if intact or capture:
                i_lp, i_greedy = _batch_pass(model, batch, _intact_mask(n_layers, n_heads), 0, None, capture, sink)
                lp[intact, rows] = i_lp
                greedy[intact, rows] = i_greedy
        per_chunk = max(1, max_rows // max(1, batch.n_rows, batch.n_examples))
        for start, members in groups.items():
            if start == 0:
                sources = None
            elif store is not None:
                sources = store.sources(b, start)
            else:
                sources = _batch_sources(sink, start, n_parts)
            for chunk in _chunks(members, per_chunk):
                c_lp, c_greedy = _batch_pass(model, batch, masks[chunk], start, sources)
                lp[chunk, rows] = c_lp
                greedy[chunk, rows] = c_greedy
        bar.update(1)
    bar.close()
    return lp, greedy


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="batch", leave=False)


def _aggregate(
    kind: str,
    metric: str,
    batches: Sequence[EncodedBatch],
    n_examples: int,
    lp: Float[Tensor, "variant row"],
    greedy: Bool[Tensor, "variant row"],
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Per-example correct/scores/extra from row scores (rows in batch order)."""
    n_var = lp.shape[0]
    ex = torch.cat([b.example_index[b.row_example] for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    if kind == "exact_match":
        correct = torch.zeros(n_var, n_examples, dtype=torch.bool)
        scores = torch.full((n_var, n_examples), float("nan"))
        correct[:, ex] = greedy
        scores[:, ex] = lp
        return correct, scores, {}
    choice = torch.cat([b.row_choice for b in batches]) if batches else torch.zeros(0, dtype=torch.long)
    chars = torch.cat([b.choice_chars for b in batches]) if batches else torch.zeros(0)
    labels = torch.zeros(n_examples, dtype=torch.long)
    for b in batches:
        labels[b.example_index] = b.labels
    n_choices = int(choice.max()) + 1 if choice.numel() else 1
    ll = torch.full((n_var, n_examples, n_choices), float("-inf"))
    norm = torch.full((n_var, n_examples, n_choices), float("-inf"))
    ll[:, ex, choice] = lp
    norm[:, ex, choice] = lp / chars.clamp_min(1.0)
    acc = ll.argmax(-1) == labels
    acc_norm = norm.argmax(-1) == labels
    headline = norm if metric == "acc_norm" else ll
    gold = headline.gather(-1, einops.repeat(labels, "n -> v n 1", v=n_var))[..., 0]
    others = headline.scatter(-1, einops.repeat(labels, "n -> v n 1", v=n_var), float("-inf")).amax(-1)
    choice_ll = torch.where(torch.isinf(ll) & (ll < 0), torch.full_like(ll, float("nan")), ll)
    correct = acc_norm if metric == "acc_norm" else acc
    return correct, gold - others, {"acc": acc, "acc_norm": acc_norm, "choice_ll": choice_ll}


# ---------------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------------
def _stops_hit(text: str, stops: Sequence[str]) -> bool:
    return any(s and s in text for s in stops)


def _cut(text: str, stops: Sequence[str]) -> str:
    for s in stops:
        if s:
            text = text.split(s)[0]
    return text


def greedy_generate(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int = 256,
    masks: Optional[Bool[Tensor, "row layer head"]] = None,
    stop: Sequence[Sequence[str]] | Sequence[str] = DEFAULT_STOP,
    stop_at_eos: bool = True,
) -> list[list[int]]:
    """Greedy continuations (token ids, without the EOS) of token-id ``prompts`` in one batch.

    Prompts are left padded with the matching attention mask (rotary positions count real tokens
    only) and decoded with a key/value cache (full recomputation for models without one). ``masks``
    (``[row, layer, head]``, ``True`` = ablated) zero ``hook_z`` of each row on every token, prompt
    and generated. A row stops at EOS or once its decoded text contains one of its stop sequences
    (``stop``: one list for all rows, or one list per row); finished rows leave the batch.
    """
    n = len(prompts)
    if n == 0:
        return []
    tok = _tokenizer(model)
    p = _param(model)
    device = p.device
    n_layers, n_heads = model_shape(model)
    if masks is None:
        masks = torch.zeros(n, n_layers, n_heads, dtype=torch.bool)
    if masks.shape[0] != n:
        raise ValueError(f"masks has {masks.shape[0]} rows for {n} prompts")
    per_row = [list(stop)] * n if not stop or isinstance(stop[0], str) else [list(s) for s in stop]  # type: ignore[arg-type]
    eos = getattr(tok, "eos_token_id", None) if stop_at_eos else None
    width = max(len(q) for q in prompts)
    pad = _pad_id(model)
    tokens = torch.full((n, width), pad, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    for i, q in enumerate(prompts):
        tokens[i, width - len(q) :] = torch.tensor(list(q), dtype=torch.long)
        attn[i, width - len(q) :] = 1
    tokens, attn = tokens.to(device), attn.to(device)
    cache = init_kv_cache(model, n)
    active = torch.arange(n)  # original row of each row still in the batch
    finished = [False] * n
    out: list[list[int]] = [[] for _ in range(n)]
    x, seq = tokens, tokens
    hooks = variant_hooks(masks, 1)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            if cache is not None:
                resid = forward_resid_cached(model, x, cache, attention_mask=attn, fwd_hooks=hooks)
            else:
                resid = forward_resid(model, seq, fwd_hooks=hooks, attention_mask=attn)
            nxt = unembed(model, resid[:, -1]).argmax(-1)
            rows = active.tolist()
            for row, t in zip(rows, nxt.tolist()):
                if finished[row]:
                    continue
                if eos is not None and t == eos:
                    finished[row] = True
                    continue
                out[row].append(t)
                if per_row[row] and _stops_hit(tok.decode(out[row]), per_row[row]):
                    finished[row] = True
            alive = torch.tensor([not finished[r] for r in rows])
            if not bool(alive.any()):
                break
            x = nxt[:, None]
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            if cache is None:
                seq = torch.cat([seq, x], dim=1)
            if int((~alive).sum()) * 4 >= len(rows):  # drop finished rows once a quarter has finished
                keep = alive.nonzero()[:, 0]
                keep_dev = keep.to(device)
                active = active[keep]
                x, attn = x[keep_dev], attn[keep_dev]
                if cache is not None:
                    cache = select_kv_cache(cache, keep_dev)
                else:
                    seq = seq[keep_dev]
                hooks = variant_hooks(masks[active], 1)
    return out


def _generation_prompts(model, split: Split, chat: bool, max_new_tokens: int) -> list[list[int]]:
    tok = _tokenizer(model)
    room = int(model.cfg.n_ctx) - max_new_tokens
    if room < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in {model.cfg.n_ctx} positions")
    prompts = []
    for ex in split:
        text = format_prompt(model, ex.prompt, chat)
        ids = _prefix(model, text) + _encode_text(tok, text)
        prompts.append(ids[-room:])
    return prompts


def _evaluate_generation(
    model,
    split: Split,
    sets: Sequence[HeadSet],
    *,
    batch_size: int,
    max_rows: int,
    max_new_tokens: int,
    chat: bool,
    progress: bool,
) -> tuple[Tensor, Tensor, list[list[str]]]:
    if split.judge is None:
        raise ValueError(f"generation split {split.task}/{split.name} has no judge to score completions")
    tok = _tokenizer(model)
    n_layers, n_heads = model_shape(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    prompts = _generation_prompts(model, split, chat, max_new_tokens)
    stops = [list(ex.meta.get("stop") or DEFAULT_STOP) for ex in split]
    n_var, n = len(sets), len(split)
    order = sorted(range(n), key=lambda i: -len(prompts[i]))
    per_chunk = max(1, max_rows // max(1, min(batch_size, n)))
    variant_chunks = list(_chunks(list(range(n_var)), per_chunk))
    completions: list[list[str]] = [[""] * n for _ in range(n_var)]
    bar = _progress(math.ceil(n / batch_size) * len(variant_chunks), progress, f"generate {split.task}/{split.name}")
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        for chunk in variant_chunks:
            outs = greedy_generate(
                model,
                [prompts[i] for _ in chunk for i in idx],
                max_new_tokens=max_new_tokens,
                masks=masks[chunk].repeat_interleave(len(idx), dim=0),
                stop=[stops[i] for _ in chunk for i in idx],
            )
            for k, v in enumerate(chunk):
                for j, i in enumerate(idx):
                    text = tok.decode(outs[k * len(idx) + j], skip_special_tokens=True)
                    completions[v][i] = _cut(text, stops[i])
            bar.update(1)
    bar.close()
    verdicts: dict[tuple[int, str], bool] = {}  # variants often agree: judge each distinct completion once
    correct = torch.zeros(n_var, n, dtype=torch.bool)
    for v in range(n_var):
        for i, ex in enumerate(split):
            key = (i, completions[v][i])
            if key not in verdicts:
                verdicts[key] = bool(split.judge(ex, completions[v][i]))
            correct[v, i] = verdicts[key]
    return correct, correct.float(), completions


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------
def _as_split(split: Split | Sequence[Example]) -> Split:
    if isinstance(split, Split):
        return split
    return Split("split", tuple(split))


def evaluate(
    model,
    split: Split,
    head_sets: Optional[Sequence[HeadsLike]] = None,
    *,
    batch_size: int = 8,
    store=None,
    progress: bool = True,
    max_new_tokens: int = 256,
    chat_template: Optional[bool] = None,
    max_rows: Optional[int] = None,
) -> EvalResult:
    """Evaluate ``model`` on ``split`` intact (``head_sets=None``) or under each head set.

    Results are per example, ``[V, n_examples]`` in the split's order. ``store`` (an
    :class:`~cel_lens.store.ActivationStore` built for this model and split) supplies the intact
    results and the residual streams ablated passes resume from; its batching then replaces
    ``batch_size``. ``max_rows`` bounds the rows of one forward pass (variants x sequences;
    default ``16 * batch_size``). ``chat_template`` wraps each prompt in the tokenizer's chat
    template (default: the split's ``options["chat_template"]`` if it has one, else off).
    """
    split = _as_split(split)
    kind = _split_kind(split)
    n_layers, n_heads = model_shape(model)
    name = str(getattr(model.cfg, "model_name", None) or type(model).__name__)
    sets = [HeadSet()] if head_sets is None else [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("evaluate needs at least one head set (pass head_sets=None for the intact model)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    chat = _chat_choice(split, chat_template)
    rows_budget = int(max_rows) if max_rows else 16 * batch_size
    metric = split.metric or "acc"
    common = dict(head_sets=list(sets), ids=split.ids, kind=kind, metric=metric, task=split.task, split=split.name, chat_template=chat)
    if kind == "generation":
        correct, scores, completions = _evaluate_generation(
            model, split, sets, batch_size=batch_size, max_rows=rows_budget,
            max_new_tokens=max_new_tokens, chat=chat, progress=progress,
        )
        return EvalResult(correct=correct, scores=scores, completions=completions, **common)
    if kind == "multiple_choice" and metric not in ("acc", "acc_norm"):
        raise ValueError(f"multiple-choice metric must be 'acc' or 'acc_norm', got {metric!r}")
    if store is not None:
        store.check(model, split, chat)
        batches = store.batches
    else:
        batches = encode_split(model, split, batch_size, chat_template=chat)
    with torch.inference_mode():
        lp, greedy = _teacher_forced_rows(
            model, batches, sets, store=store, max_rows=rows_budget, progress=progress,
            desc=f"evaluate {split.task}/{split.name} x{len(sets)}",
        )
    correct, scores, extra = _aggregate(kind, metric, batches, len(split), lp, greedy)
    return EvalResult(correct=correct, scores=scores, extra=extra, **common)


def logprob_metric(model, batch: EncodedBatch, fwd_hooks: Sequence = ()) -> Float[Tensor, "batch"]:
    """Differentiable log-prob of each example's correct answer (exact match: the target's tokens;
    multiple choice: the labelled choice's tokens), summed over its tokens, in one forward pass
    over ``batch.answer`` with ``fwd_hooks`` active (e.g. attribution patching at ``hook_z``).
    Order: ``batch.example_index``."""
    answer = batch.answer.to(_param(model).device)
    resid = forward_resid(model, answer.tokens, fwd_hooks=fwd_hooks, attention_mask=answer.attention_mask)
    idx = einops.repeat(answer.positions, "b k -> b k d", d=resid.shape[-1])
    picked = resid.gather(1, idx)[answer.target_mask]  # [n, d]: real target positions only
    logits = unembed(model, picked).float()
    tgt = answer.targets[answer.target_mask]
    lp = logits.gather(-1, tgt[:, None])[:, 0] - logits.logsumexp(-1)
    out = torch.zeros(answer.target_mask.shape, dtype=lp.dtype, device=lp.device)
    out = out.masked_scatter(answer.target_mask, lp)
    return out.sum(-1)


class _CallableModule(types.ModuleType):
    """Lets ``cel_lens.evaluate(model, split, ...)`` work although ``cel_lens.evaluate`` may be
    bound to this module (after ``import cel_lens.evaluate``)."""

    def __call__(self, model: Any, split: Any, head_sets: Any = None, **kwargs: Any) -> EvalResult:
        return evaluate(model, split, head_sets, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

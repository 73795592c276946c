"""From examples to token ids, as lm-evaluation-harness encodes them.

Prompt and continuation are split as lm-eval's ``_encode_pair`` does (trailing whitespace of the
context moves to the continuation; the continuation's tokens are those of the joint text after the
context's own), the context is left-truncated to fit the model, and an optional chat template wraps
the prompt as one user turn. :func:`encode_split` orders a split longest first and cuts it into
:class:`~cel_lens.evaluation.batch.EncodedBatch` es of similar lengths: each batch holds at most
``batch_size`` examples and ``max_tokens`` padded positions, and at most :data:`MAX_PADDING` of
its positions are padding (a batch closes before an example that would push it over).
"""

from __future__ import annotations

from typing import Optional, Sequence


from cel_lens.evaluation.batch import MAX_PADDING, Encoded, EncodedBatch, build_batch, length_groups
from cel_lens.evaluation.precision import ONE_TOKEN_CHOICES
from cel_lens.evaluation.prefix import can_share_prefix, rows_prefix
from cel_lens.model.bos import bos_prefix, prompt_ids
from cel_lens.model.forward import init_kv_cache
from cel_lens.tasks.answer_types import AnswerTypeEntry, answer_type_entry
from cel_lens.tasks.base import Example, Split, Task
from cel_lens.tasks.registry import load_task

__all__ = [
    "as_split",
    "format_prompt",
    "encode_pair",
    "encode_prompt",
    "pad_id",
    "split_answer_type",
    "split_answer_entry",
    "chat_choice",
    "precision_kind",
    "PRECISION_PROBE",
    "encode_split",
    "default_max_tokens",
    "cut_batches",
    "MAX_PADDING",
    "TOKENS_PER_EXAMPLE",
]

TOKENS_PER_EXAMPLE = 512
"""Padded positions of one forward pass per example of ``batch_size``, unless ``max_tokens`` is given."""


def default_max_tokens(batch_size: int) -> int:
    """Padded positions (rows x width, variants included) one forward pass holds by default."""
    return TOKENS_PER_EXAMPLE * int(batch_size)


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


def encode_prompt(model, text: str) -> list[int]:
    """Token ids of a prompt as the model reads it: BOS when the model's BOS rule prepends one
    (:func:`cel_lens.model.bos.bos_prefix`; by default where the checkpoint's tokenizer adds it
    itself, as lm-eval), then the text's tokens (no other special tokens)."""
    _tokenizer(model)  # one clear error for a model without a tokenizer
    return prompt_ids(model, text)


def as_split(split: Split | Task | str | Sequence[Example]) -> Split:
    """``split`` itself; a task's test split (a :class:`~cel_lens.tasks.Task`, or a task name,
    loaded with its test split only, as ``cel-lens evaluate`` does); or a
    :class:`~cel_lens.tasks.Split` named ``"split"`` of the given examples."""
    if isinstance(split, Split):
        return split
    if isinstance(split, str):
        return load_task(split, splits="test").test
    if isinstance(split, Task):
        return split.test
    examples = tuple(split)
    wrong = next((e for e in examples if not isinstance(e, Example)), None)
    if wrong is not None:
        raise TypeError(
            f"evaluate() takes a Split, a Task, a task name or Examples, got a sequence holding {type(wrong).__name__}"
        )
    return Split("split", examples)


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
    ctx = bos_prefix(model, context) + ctx
    if not ctx:  # lm-eval scores an empty context after the end-of-text token
        fallback = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        ctx = [int(fallback)]
    if not cont:
        raise ValueError(f"continuation {continuation!r} encodes to no tokens")
    return ctx, cont


def pad_id(model) -> int:
    """The id padding positions hold (never read): the tokenizer's pad, EOS or BOS id, else 0 (a
    model without a tokenizer, evaluated on token ids)."""
    tok = getattr(model, "tokenizer", None)
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


def split_answer_type(split: Split) -> str:
    """The split's answer type (:data:`~cel_lens.tasks.base.AnswerType`); unset, read from its first
    example (choices: multiple choice, else exact match)."""
    answer_type = split.answer_type
    if answer_type is None:
        first = split[0] if len(split) else None
        answer_type = "multiple_choice" if first is not None and first.choices else "exact_match"
    return answer_type_entry(answer_type).name


def split_answer_entry(split: Split) -> AnswerTypeEntry:
    """The :class:`~cel_lens.tasks.answer_types.AnswerTypeEntry` of :func:`split_answer_type`: what
    scoring the split implies."""
    return answer_type_entry(split_answer_type(split))


PRECISION_PROBE = 8
"""Examples :func:`precision_kind` encodes to tell one-token choices from longer ones."""


def precision_kind(model, split: Split, chat_template: Optional[bool] = None) -> str:
    """What ``precision="auto"`` decides by (:data:`~cel_lens.evaluation.precision.AUTO_KINDS`): the
    split's answer type, or :data:`~cel_lens.evaluation.precision.ONE_TOKEN_CHOICES` for a
    multiple-choice split whose first :data:`PRECISION_PROBE` examples' choices each encode to one
    token under ``model``. Only the speed depends on it: bf16 returns float32's decisions either way."""
    answer_type = split_answer_type(split)
    if not answer_type_entry(answer_type).scores_choices or not len(split):
        return answer_type
    chat = chat_choice(split, chat_template)
    for ex in (split[i] for i in range(min(len(split), PRECISION_PROBE))):
        if "prompt_ids" in ex.meta:
            return answer_type
        prompt = format_prompt(model, ex.prompt, chat)
        if any(len(encode_pair(model, prompt, c)[1]) != 1 for c in ex.choices):
            return answer_type
    return ONE_TOKEN_CHOICES


def chat_choice(split: Split, chat_template: Optional[bool]) -> bool:
    if chat_template is not None:
        return bool(chat_template)
    options = getattr(split, "options", None) or {}
    return bool(options.get("chat_template", False))


def _encode_ids(model, ex: Example, answer: AnswerTypeEntry, chat: bool) -> Encoded:
    """An example given as token ids (:func:`cel_lens.tasks.tokens.token_task`): used as they are."""
    if not answer.argmax_target or chat:
        raise ValueError(f"example {ex.id} is given as token ids: only an exact-match task without a chat template can use it")
    target = [int(i) for i in ex.meta["target_ids"]]
    ctx = _fit([int(i) for i in ex.meta["prompt_ids"]], [target], int(model.cfg.n_ctx))
    return ctx, [target], 0, [len(target)]


def _encode_example(model, ex: Example, answer: AnswerTypeEntry, chat: bool) -> Encoded:
    if "prompt_ids" in ex.meta:
        return _encode_ids(model, ex, answer, chat)
    prompt = format_prompt(model, ex.prompt, chat)
    if answer.argmax_target:
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


def cut_batches(
    encoded: Sequence[Encoded], order: Sequence[int], shared: bool, batch_size: int, max_tokens: int
) -> list[list[int]]:
    """Cut ``order`` (indices of ``encoded``, longest first) into consecutive batches: a batch
    closes before the example that would make it exceed ``batch_size`` examples, ``max_tokens``
    computed positions or :data:`MAX_PADDING` padding (positions as
    :attr:`~cel_lens.evaluation.batch.EncodedBatch.computed_tokens` counts them). Depends only on the examples from a batch's
    start on, so a run of whole batches re-cuts the same way."""
    batches: list[list[int]] = []
    current: list[int] = []
    cost = _Cost(shared)
    for i in order:
        if current:
            padded, real = cost.with_example(encoded[i])
            if len(current) >= batch_size or padded > max_tokens or padded - real > MAX_PADDING * padded:
                batches.append(current)
                current, cost = [], _Cost(shared)
        current.append(i)
        cost.add(encoded[i])
    if current:
        batches.append(current)
    return batches


class _Cost:
    """Positions a growing batch computes and holds real tokens (as
    :attr:`~cel_lens.evaluation.batch.EncodedBatch.computed_tokens` counts them), per example added."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.n_ex = self.width = self.real = 0
        self.rows: list[int] = []  # rows layout: row lengths; shared: continuation lengths

    def _after(self, ex: Encoded) -> tuple[int, int, list[int], int]:
        ctx, conts = ex[0], ex[1]
        if self.shared:
            rows = self.rows + [len(c) - 1 for c in conts]
            width = max(self.width, len(ctx))
            real = self.real + len(ctx) + sum(len(c) - 1 for c in conts)
        else:
            rows = self.rows + [len(ctx) + len(c) - 1 for c in conts]
            width = max(rows)
            real = self.real + sum(len(ctx) + len(c) - 1 for c in conts)
        return self.n_ex + 1, width, rows, real

    def with_example(self, ex: Encoded) -> tuple[int, int]:
        n_ex, width, rows, real = self._after(ex)
        if self.shared:
            padded = n_ex * width + sum(len(g) * rows[g[0]] for g in length_groups(rows))
        else:
            padded = len(rows) * width
        return padded, real

    def add(self, ex: Encoded) -> None:
        self.n_ex, self.width, self.rows, self.real = self._after(ex)


def encode_split(
    model,
    split: Split,
    batch_size: int = 8,
    *,
    chat_template: Optional[bool] = None,
    share_context: Optional[bool] = None,
    max_tokens: Optional[int] = None,
    share_prefix: Optional[bool] = None,
) -> list[EncodedBatch]:
    """Encode an exact-match or multiple-choice split into batches of similar lengths.

    Examples are ordered longest first (less padding; memory errors show on the first batch) and
    cut by :func:`cut_batches` (at most ``batch_size`` examples and ``max_tokens`` padded positions,
    default :func:`default_max_tokens`); ``EncodedBatch.example_index`` maps back to the split.
    ``share_context`` picks the ``"shared"`` layout for multiple choice: each prompt runs once for
    all its choices (default: when the model has a key/value cache, or every choice is one token).
    ``share_prefix`` (``"rows"`` layout, a model with a stack cache): the tokens every row of a batch
    begins with are computed once per variant (:mod:`~cel_lens.evaluation.prefix`; default off). The batches are cut the same
    way either way.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    budget = default_max_tokens(batch_size) if max_tokens is None else int(max_tokens)
    if budget < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    answer = split_answer_entry(split)
    if answer.generates:
        raise ValueError("generation tasks have no teacher-forced encoding; evaluate() generates instead")
    chat = chat_choice(split, chat_template)
    encoded = [_encode_example(model, ex, answer, chat) for ex in split]
    shared = False
    if answer.scores_choices:
        one_token = all(len(c) == 1 for e in encoded for c in e[1])
        can = one_token or init_kv_cache(model, 1) is not None
        shared = can if share_context is None else bool(share_context)
        if shared and not can:
            raise ValueError("share_context=True needs a model with a key/value cache")
    if shared:
        key = lambda i: (-len(encoded[i][0]), -max(map(len, encoded[i][1])))  # noqa: E731
    else:
        key = lambda i: -(len(encoded[i][0]) + max(map(len, encoded[i][1])))  # noqa: E731
    order = sorted(range(len(encoded)), key=key)
    pad = pad_id(model)
    want = bool(share_prefix)
    prefix = want and not shared and can_share_prefix(model)
    if want and share_prefix and not prefix and not shared:
        raise ValueError("share_prefix=True needs a model with the fused-attention stack's key/value cache")
    return [
        build_batch(answer.name, idx, [encoded[i] for i in idx], pad, shared, _rows_prefix(encoded, idx) if prefix else 0)
        for idx in cut_batches(encoded, order, shared, batch_size, budget)
    ]


def _rows_prefix(encoded: Sequence[Encoded], idx: Sequence[int]) -> int:
    """The prefix the ``"rows"`` of examples ``idx`` share (:func:`~cel_lens.evaluation.prefix.rows_prefix`)."""
    contexts = [encoded[i][0] for i in idx]
    rows = [encoded[i][0] + c[:-1] for i in idx for c in encoded[i][1]]
    return rows_prefix(contexts, rows)

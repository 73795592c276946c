"""The naive stage-1 scan: what a careful researcher writes with TransformerLens and no cel_lens.

One head at a time, a zeroing hook on ``blocks.{l}.attn.hook_z`` through ``model.run_with_hooks``,
batches of 8, every pass from the embedding through every layer (no resuming, no variant
batching). Inputs are tokenized once per scan and sorted longest first (as lm-evaluation-harness
does), and each task is scored the usual way:

* exact match (Arithmetic): greedy generation with TransformerLens' key/value cache (left padding,
  attention mask), stopped after as many tokens as the answer has; correct iff the generated tokens
  are the answer's tokens (the answer tokenized as lm-eval's ``_encode_pair`` does);
* multiple choice (BoolQ): one right-padded row ``context + choice[:-1]`` per choice, full logits,
  ``log_softmax`` and the summed log-likelihood of the choice's tokens; argmax over choices.

Nothing here imports cel_lens's evaluator: the baseline is an independent implementation, so the
benchmark's check that both give identical per-head gains is a real check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = [
    "zero_head_hook",
    "encode_pair",
    "greedy_tokens",
    "naive_exact_match",
    "naive_multiple_choice",
    "naive_correct",
    "NaiveScan",
    "naive_scan",
    "naive_flops",
]

Hook = tuple[str, Callable]


def zero_head_hook(layer: int, head: int) -> Hook:
    """The textbook TransformerLens ablation: ``z[:, :, head] = 0`` at ``blocks.{layer}.attn.hook_z``."""

    def hook(z: Float[Tensor, "batch pos head d_head"], hook=None) -> Tensor:  # noqa: ANN001 - TL signature
        z[:, :, head, :] = 0.0
        return z

    return (f"blocks.{layer}.attn.hook_z", hook)


def encode_pair(tokenizer, context: str, continuation: str, bos: Optional[int]) -> tuple[list[int], list[int]]:
    """lm-eval's ``_encode_pair``: trailing whitespace moves from the context to the continuation,
    whose tokens are those of ``context + continuation`` after the context's; BOS prepended."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    return ([bos] if bos is not None else []) + list(ctx), list(whole[len(ctx) :])


def _bos(model) -> Optional[int]:
    return model.tokenizer.bos_token_id if getattr(model.cfg, "default_prepend_bos", True) else None


def _pad(model) -> int:
    tok = model.tokenizer
    return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)


def greedy_tokens(
    model, contexts: Sequence[Sequence[int]], n_new: int, fwd_hooks: Sequence[Hook] = (), kv_cache: bool = True
) -> Int[Tensor, "batch n_new"]:
    """``n_new`` greedy tokens after each left-padded context, via ``run_with_hooks``: with a
    TransformerLens key/value cache (one pass over the prompts, then one token at a time), or
    without (``kv_cache=False``: the whole sequence again at every step)."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    device = model.cfg.device
    b, width = len(contexts), max(len(c) for c in contexts)
    tokens = torch.full((b, width), _pad(model), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for i, c in enumerate(contexts):
        tokens[i, width - len(c) :] = torch.tensor(list(c))
        mask[i, width - len(c) :] = 1
    tokens, mask = tokens.to(device), mask.to(device)
    out = []
    if kv_cache:
        cache = TransformerLensKeyValueCache.init_cache(model.cfg, device, b)
        logits = model.run_with_hooks(tokens, fwd_hooks=list(fwd_hooks), attention_mask=mask, past_kv_cache=cache)
        nxt = logits[:, -1].argmax(-1)
        out.append(nxt)
        ones = torch.ones((b, 1), dtype=torch.long, device=device)
        for _ in range(n_new - 1):
            logits = model.run_with_hooks(nxt[:, None], fwd_hooks=list(fwd_hooks), attention_mask=ones, past_kv_cache=cache)
            nxt = logits[:, -1].argmax(-1)
            out.append(nxt)
    else:
        for _ in range(n_new):
            logits = model.run_with_hooks(tokens, fwd_hooks=list(fwd_hooks), attention_mask=mask)
            nxt = logits[:, -1].argmax(-1)
            out.append(nxt)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return torch.stack(out, dim=1)


@dataclass
class _Encoded:
    """A split tokenized once: contexts and continuations per example (one per choice)."""

    contexts: list[list[int]]
    continuations: list[list[list[int]]]
    labels: list[int]
    chars: list[list[int]]


def _encode(model, split) -> _Encoded:
    tok, bos = model.tokenizer, _bos(model)
    contexts, conts, labels, chars = [], [], [], []
    for ex in split:
        options = [ex.target] if ex.target is not None and not ex.choices else list(ex.choices)
        pairs = [encode_pair(tok, ex.prompt, o, bos) for o in options]
        longest = len(pairs[0][0]) + max(len(c) for _, c in pairs) - 1
        if longest > model.cfg.n_ctx:
            raise ValueError(f"example {ex.id} needs {longest} positions; the model has {model.cfg.n_ctx}")
        contexts.append(pairs[0][0])
        conts.append([c for _, c in pairs])
        labels.append(0 if ex.label is None else int(ex.label))
        # acc_norm divides by the choice's characters without its delimiting space (lm-eval's rule)
        chars.append(list(ex.meta.get("choice_chars") or [len(o[1:]) if o.startswith(" ") else len(o) for o in options]))
    return _Encoded(contexts, conts, labels, chars)


def naive_exact_match(
    model, encoded: _Encoded, fwd_hooks: Sequence[Hook] = (), batch_size: int = 8, kv_cache: bool = True
) -> Bool[Tensor, "example"]:
    """Greedy-generation exact match of every example under ``fwd_hooks``."""
    n = len(encoded.contexts)
    order = sorted(range(n), key=lambda i: -len(encoded.contexts[i]))
    correct = torch.zeros(n, dtype=torch.bool)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        targets = [encoded.continuations[i][0] for i in idx]
        gen = greedy_tokens(
            model, [encoded.contexts[i] for i in idx], max(len(t) for t in targets), fwd_hooks, kv_cache
        ).cpu()
        for row, (i, t) in enumerate(zip(idx, targets)):
            correct[i] = gen[row, : len(t)].tolist() == t
    return correct


def naive_multiple_choice(
    model, encoded: _Encoded, fwd_hooks: Sequence[Hook] = (), batch_size: int = 8, metric: str = "acc"
) -> Bool[Tensor, "example"]:
    """Log-likelihood multiple choice: one row per (example, choice), batches of ``batch_size``
    rows; ``acc`` = argmax of summed log-likelihoods, ``acc_norm`` = divided by characters."""
    rows = [(i, c) for i, conts in enumerate(encoded.continuations) for c in range(len(conts))]
    seqs = {(i, c): encoded.contexts[i] + encoded.continuations[i][c][:-1] for i, c in rows}
    rows.sort(key=lambda r: -len(seqs[r]))
    ll = {}
    pad = _pad(model)
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        width = max(len(seqs[r]) for r in batch)
        tokens = torch.full((len(batch), width), pad, dtype=torch.long)
        for j, r in enumerate(batch):
            tokens[j, : len(seqs[r])] = torch.tensor(seqs[r])
        # right padding: causal attention keeps the pads out of every real position
        logprobs = model.run_with_hooks(tokens.to(model.cfg.device), fwd_hooks=list(fwd_hooks)).log_softmax(-1)
        for j, (i, c) in enumerate(batch):
            cont = encoded.continuations[i][c]
            first = len(encoded.contexts[i]) - 1
            pos = torch.arange(first, first + len(cont), device=logprobs.device)
            ll[(i, c)] = float(logprobs[j, pos, torch.tensor(cont, device=logprobs.device)].sum())
    correct = torch.zeros(len(encoded.contexts), dtype=torch.bool)
    for i, conts in enumerate(encoded.continuations):
        scores = [ll[(i, c)] / (encoded.chars[i][c] if metric == "acc_norm" else 1.0) for c in range(len(conts))]
        correct[i] = max(range(len(scores)), key=lambda c: (scores[c], -c)) == encoded.labels[i]
    return correct


def naive_correct(
    model, split, encoded: Optional[_Encoded] = None, head: Optional[tuple[int, int]] = None,
    batch_size: int = 8, kv_cache: bool = True,
) -> Bool[Tensor, "example"]:
    """Per-example correctness of ``model`` on ``split`` with ``head`` (``(layer, head)``, or None for
    the intact model) zero-ablated."""
    encoded = encoded or _encode(model, split)
    hooks = [] if head is None else [zero_head_hook(*head)]
    with torch.inference_mode():
        if split.answer_type == "exact_match":
            return naive_exact_match(model, encoded, hooks, batch_size, kv_cache)
        if split.answer_type == "multiple_choice":
            return naive_multiple_choice(model, encoded, hooks, batch_size, split.metric or "acc")
    raise ValueError(f"the naive baseline scores exact_match and multiple_choice splits, not {split.answer_type!r}")


@dataclass
class NaiveScan:
    """A naive stage-1 scan: intact and per-head correctness, and the per-head gains."""

    heads: list[tuple[int, int]]
    intact: Bool[Tensor, "example"]
    correct: Bool[Tensor, "head example"]

    @property
    def gains(self) -> Float[Tensor, "head"]:
        """``acc(ablate h) - acc(intact)`` in float64, computed as :func:`cel_lens.scoring.exact_scores`
        computes it (so equal correctness gives bit-identical gains)."""
        acc = self.correct.to(torch.float64).mean(1)
        return acc - self.intact.to(torch.float64).mean()


def naive_scan(
    model, split, heads: Sequence[tuple[int, int]], batch_size: int = 8, kv_cache: bool = True
) -> NaiveScan:
    """The naive stage-1 scan over ``heads``: the intact model once, then each head alone."""
    encoded = _encode(model, split)
    intact = naive_correct(model, split, encoded, None, batch_size, kv_cache)
    rows = [naive_correct(model, split, encoded, h, batch_size, kv_cache) for h in heads]
    correct = torch.stack(rows) if rows else torch.zeros(0, len(split), dtype=torch.bool)
    return NaiveScan(list(heads), intact, correct)


def naive_flops(model, split, batch_size: int = 8, kv_cache: bool = True) -> float:
    """FLOPs of one naive evaluation of ``split`` (one head, or the intact model), counted from the
    same batching as the code above: padded positions, every layer, logits at every position of a
    pass (what ``run_with_hooks`` returns)."""
    from benchmarks.measure import layer_flops, unembed_flops

    cfg, L = model.cfg, model.cfg.n_layers
    enc = _encode(model, split)
    total = 0.0
    if split.answer_type == "exact_match":
        order = sorted(range(len(enc.contexts)), key=lambda i: -len(enc.contexts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            b, width = len(idx), max(len(enc.contexts[i]) for i in idx)
            steps = max(len(enc.continuations[i][0]) for i in idx)
            for step in range(steps):
                if kv_cache:
                    new, keys = (width, width) if step == 0 else (1, width + step)
                else:
                    new = keys = width + step
                total += L * layer_flops(cfg, b, new, keys) + unembed_flops(cfg, b * new)
        return total
    seqs = sorted(
        (len(enc.contexts[i]) + len(c) - 1 for i, conts in enumerate(enc.continuations) for c in conts), reverse=True
    )
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start : start + batch_size]
        total += L * layer_flops(cfg, len(chunk), chunk[0]) + unembed_flops(cfg, len(chunk) * chunk[0])
    return total

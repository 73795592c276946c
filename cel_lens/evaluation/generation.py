"""Batched greedy generation under ablation, and the judged evaluation of generation tasks.

Prompts are left padded with the matching attention mask (rotary positions count real tokens only)
and decoded with a key/value cache (full recomputation for models without one); each row carries
its own ablation mask, applied on every token, prompt and generated. Finished rows leave the batch.
Completions are cut at the task's stop strings and judged by ``split.judge``.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.evaluation.encode import _tokenizer, encode_prompt, format_prompt, pad_id
from cel_lens.evaluation.teacher_forced import chunks
from cel_lens.heads import HeadSet, masks_from_head_sets
from cel_lens.model.ablation import variant_hooks
from cel_lens.model.forward import forward_resid, forward_resid_cached, init_kv_cache, param_device, select_kv_cache, unembed
from cel_lens.model.kinds import model_shape
from cel_lens.progress import progress_bar
from cel_lens.tasks.base import Split

__all__ = ["greedy_generate", "generation_prompts", "evaluate_generation"]


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
    stop: Sequence[Sequence[str]] | Sequence[str] = (),
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
    device = param_device(model)
    n_layers, n_heads = model_shape(model)
    if masks is None:
        masks = torch.zeros(n, n_layers, n_heads, dtype=torch.bool)
    if masks.shape[0] != n:
        raise ValueError(f"masks has {masks.shape[0]} rows for {n} prompts")
    per_row = [list(stop)] * n if not stop or isinstance(stop[0], str) else [list(s) for s in stop]  # type: ignore[arg-type]
    eos = getattr(tok, "eos_token_id", None) if stop_at_eos else None
    width = max(len(q) for q in prompts)
    pad = pad_id(model)
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


def generation_prompts(model, split: Split, chat: bool, max_new_tokens: int) -> list[list[int]]:
    """Token ids of each example's prompt (chat template when ``chat``), left-truncated so that
    ``max_new_tokens`` more fit in the model's context."""
    room = int(model.cfg.n_ctx) - max_new_tokens
    if room < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in {model.cfg.n_ctx} positions")
    prompts = []
    for ex in split:
        text = format_prompt(model, ex.prompt, chat)
        ids = encode_prompt(model, text)
        prompts.append(ids[-room:])
    return prompts


def evaluate_generation(
    model,
    split: Split,
    sets: Sequence[HeadSet],
    *,
    batch_size: int,
    max_rows: int,
    max_new_tokens: int,
    chat: bool,
    progress: bool,
) -> tuple[Bool[Tensor, "variant example"], Float[Tensor, "variant example"], list[list[str]]]:
    """Generate for every example under every head set (``batch_size`` prompts by as many variants
    as fit in ``max_rows`` rows per batch) and judge each distinct completion once: per-example
    correctness, its float copy as the score, and the completions ``[variant][example]``."""
    if split.judge is None:
        raise ValueError(f"generation split {split.task}/{split.name} has no judge to score completions")
    tok = _tokenizer(model)
    n_layers, n_heads = model_shape(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    prompts = generation_prompts(model, split, chat, max_new_tokens)
    stops = [list(split.stop_strings(ex)) for ex in split]
    n_var, n = len(sets), len(split)
    order = sorted(range(n), key=lambda i: -len(prompts[i]))
    per_chunk = max(1, max_rows // max(1, min(batch_size, n)))
    variant_chunks = list(chunks(list(range(n_var)), per_chunk))
    completions: list[list[str]] = [[""] * n for _ in range(n_var)]
    bar = progress_bar(math.ceil(n / batch_size) * len(variant_chunks), progress, f"generate {split.task}/{split.name}", unit="batch")
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

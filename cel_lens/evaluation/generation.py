"""Batched greedy generation under ablation, and the judged evaluation of generation tasks.

Prompts are right padded with the matching attention mask (causal attention alone keeps the pads
out of the prompt pass; generated tokens follow each row's last real token, at its next rotary
position, and never attend its pads) and decoded with a key/value cache (full recomputation for
models without one); each row carries
its own ablation mask, applied on every token, prompt and generated. Finished rows leave the batch
(once a quarter of it has finished). Completions are cut at the task's stop strings and judged by
``split.judge``.

:func:`evaluate_generation` runs many variants per batch of prompts. With a stack key/value cache
(:mod:`cel_lens.model.stack`) the prompts' intact pass runs once per batch: a variant whose first
ablated layer is ``l`` copies the intact keys and values of the layers below ``l`` and resumes the
prompt pass at ``l`` from the intact residual stream, as a teacher-forced variant resumes from the
activation store. Variants are ordered by that layer, so one chunk of them shares a start. Prompts
of unlike lengths resume in groups of like length, each at its own width (pads cost what tokens
cost), and decode together.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.evaluation.batch import length_groups, right_pad
from cel_lens.evaluation.encode import _tokenizer, encode_prompt, format_prompt, pad_id
from cel_lens.evaluation.prefix import intact_prompts_shared, resumed_prompts_shared, shared_prefix
from cel_lens.evaluation.teacher_forced import chunks
from cel_lens.heads import HeadSet, masks_from_head_sets
from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.model.forward import forward_resid, forward_resid_cached, init_kv_cache, param_device, select_kv_cache, unembed
from cel_lens.model.model_types import model_shape
from cel_lens.model.stack import StackCache
from cel_lens.progress import progress_bar
from cel_lens.tasks.base import Split

__all__ = ["greedy_generate", "generate_variants", "generation_prompts", "evaluate_generation"]


def _stops_hit(text: str, stops: Sequence[str]) -> bool:
    return any(s and s in text for s in stops)


def _cut(text: str, stops: Sequence[str]) -> str:
    for s in stops:
        if s:
            text = text.split(s)[0]
    return text


def _accept(tok, rows: Sequence[int], tokens: Sequence[int], out: list[list[int]], finished: list[bool],
            eos: Optional[int], stops: Sequence[Sequence[str]]) -> None:
    """Append each row's next token to its text, or finish the row at end-of-text or at a stop
    sequence (greedy decoding, as lm-eval's ``until``); finished rows take nothing more."""
    for row, t in zip(rows, tokens):
        if finished[row]:
            continue
        if eos is not None and t == eos:
            finished[row] = True
            continue
        out[row].append(t)
        if stops[row] and _stops_hit(tok.decode(out[row]), stops[row]):
            finished[row] = True


def _right_padded(prompts: Sequence[Sequence[int]], pad: int, device) -> tuple[Tensor, Tensor, Tensor]:
    """Tokens and attention mask of ``prompts``, right padded to the longest (:func:`right_pad`),
    and the position of each prompt's last token."""
    tokens, attn = right_pad(prompts, pad)
    last = attn.sum(-1, keepdim=True) - 1
    return tokens.to(device), attn.to(device), last.to(device)


def _per_row_stops(stop, n: int) -> list[list[str]]:
    return [list(stop)] * n if not stop or isinstance(stop[0], str) else [list(s) for s in stop]


def greedy_generate(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int = 256,
    masks: Optional[Bool[Tensor, "row layer head"]] = None,
    stop: Sequence[Sequence[str]] | Sequence[str] = (),
    stop_at_eos: bool = True,
    gaps: Optional[Float[Tensor, " row"]] = None,
    ablation: Ablation = ZERO,
    bf16: bool = False,
) -> list[list[int]]:
    """Greedy continuations (token ids, without the EOS) of token-id ``prompts`` in one batch.

    Prompts are right padded with the matching attention mask (see the module docstring) and
    decoded with a key/value cache (full recomputation for models without one). ``masks``
    (``[row, layer, head]``, ``True`` = ablated) replace ``hook_z`` of each row on every token, prompt
    and generated, as ``ablation`` says (zero by default). A row stops at EOS or once its decoded text contains one of its stop sequences
    (``stop``: one list for all rows, or one list per row); finished rows leave the batch.
    ``gaps`` (one entry per row, given ``inf``) receives each row's smallest top-1 minus top-2
    logit gap over the steps it generated (:mod:`~cel_lens.evaluation.precision`). ``bf16``: every
    pass on the model's bfloat16 weight copy (:func:`~cel_lens.model.forward.forward_resid`).
    """
    n = len(prompts)
    if n == 0:
        return []
    n_layers, n_heads = model_shape(model)
    if masks is None:
        masks = torch.zeros(n, n_layers, n_heads, dtype=torch.bool)
    if masks.shape[0] != n:
        raise ValueError(f"masks has {masks.shape[0]} rows for {n} prompts")
    tokens, attn, last = _right_padded(prompts, pad_id(model), param_device(model))
    cache = init_kv_cache(model, n, spare=max_new_tokens)
    per_row = dict(variants=masks, ablation=ablation, repeated=True, bf16=bf16)  # one mask per row
    with torch.inference_mode():
        if cache is not None:
            resid = forward_resid_cached(model, tokens, cache, attention_mask=attn, keep=last, **per_row)
        else:
            resid = forward_resid(model, tokens, attention_mask=attn, keep=last, **per_row)
        return _decode(model, resid[:, 0], cache, tokens, attn, masks, _per_row_stops(stop, n), stop_at_eos, max_new_tokens,
                       gaps, ablation, bf16)


def _decode(
    model,
    last: Float[Tensor, "row d_model"],
    cache,
    seq: Int[Tensor, "row pos"],
    attn: Int[Tensor, "row pos"],
    masks: Bool[Tensor, "row layer head"],
    stops: list[list[str]],
    stop_at_eos: bool,
    max_new_tokens: int,
    gaps: Optional[Float[Tensor, " row"]] = None,
    ablation: Ablation = ZERO,
    bf16: bool = False,
) -> list[list[int]]:
    """The greedy loop after the prompt pass (``last``: each row's residual stream at its last
    prompt position; ``seq`` is only used without a cache, to recompute the whole sequence;
    ``gaps``: see :func:`greedy_generate`)."""
    tok = _tokenizer(model)
    n = last.shape[0]
    eos = getattr(tok, "eos_token_id", None) if stop_at_eos else None
    device = last.device
    active = torch.arange(n)  # original row of each row still in the batch
    finished = [False] * n
    out: list[list[int]] = [[] for _ in range(n)]
    per_row = dict(variants=masks, ablation=ablation, repeated=True, bf16=bf16)  # one mask per row still in the batch
    for step in range(max_new_tokens):
        if step:
            if cache is not None:
                resid = forward_resid_cached(model, x, cache, attention_mask=attn, **per_row)
            else:
                resid = forward_resid(model, seq, attention_mask=attn, **per_row)
            last = resid[:, -1]
        logits = unembed(model, last, bf16=bf16)
        nxt = logits.argmax(-1)
        rows = active.tolist()
        if gaps is not None:
            _record_gaps(gaps, logits, active, finished)
        _accept(tok, rows, nxt.tolist(), out, finished, eos, stops)
        alive = torch.tensor([not finished[r] for r in rows])
        if not bool(alive.any()) or step == max_new_tokens - 1:
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
            per_row["variants"] = masks[active]
    return out


def _record_gaps(gaps: Tensor, logits: Float[Tensor, "row vocab"], active: Tensor, finished: list[bool]) -> None:
    """Lower each unfinished row's entry of ``gaps`` to this step's top-1 minus top-2 logit."""
    if logits.shape[-1] < 2:
        return
    top = logits.float().topk(2, dim=-1).values
    step = (top[:, 0] - top[:, 1]).cpu()
    live = torch.tensor([not finished[r] for r in active.tolist()], dtype=torch.bool)
    idx = active[live]
    gaps[idx] = torch.minimum(gaps[idx], step[live])


def generate_variants(
    model,
    prompts: Sequence[Sequence[int]],
    masks: Bool[Tensor, "variant layer head"],
    *,
    max_new_tokens: int,
    stop: Sequence[Sequence[str]] = (),
    max_rows: Optional[int] = None,
    stop_at_eos: bool = True,
    gaps: Optional[Float[Tensor, "variant prompt"]] = None,
    ablation: Ablation = ZERO,
    share_prefix: bool = False,
    bf16: bool = False,
) -> list[list[list[int]]]:
    """Greedy continuations of every prompt under every variant: ``[variant][prompt]`` token ids,
    equal to :func:`greedy_generate` of each (prompt, mask) alone.

    Variants run ``max_rows // len(prompts)`` at a time (default: all). With a stack key/value cache
    the prompts' intact pass runs once and each chunk of variants, all with the same first ablated
    layer, resumes it there (see the module docstring); otherwise each chunk runs
    :func:`greedy_generate`. ``stop``: one list of stop strings per prompt; ``gaps`` (given ``inf``)
    receives each (variant, prompt)'s smallest greedy gap (:func:`greedy_generate`). ``ablation``: what
    replaces an ablated head's ``z``; ``share_prefix``: the prompts' common start runs once per
    variant (:mod:`~cel_lens.evaluation.prefix`); ``bf16``: as :func:`greedy_generate`."""
    n_var, n = masks.shape[0], len(prompts)
    n_layers = masks.shape[1]
    out: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(n_var)]
    if n == 0 or n_var == 0:
        return out
    stops = [list(s) for s in stop] if stop else [[] for _ in range(n)]
    first = [int(m.any(-1).nonzero()[0, 0]) if bool(m.any()) else n_layers for m in masks]
    per_chunk = max(1, (max_rows or n_var * n) // n)
    tokens, attn, last = _right_padded(prompts, pad_id(model), param_device(model))
    cache = init_kv_cache(model, n, spare=max_new_tokens)
    shared = isinstance(cache, StackCache)
    groups: dict[int, list[int]] = {}
    for v in sorted(range(n_var), key=lambda v: first[v]):
        groups.setdefault(first[v] if shared else 0, []).append(v)
    head = shared_prefix(prompts, min(map(len, prompts)) - 1) if shared and share_prefix else 0
    with torch.inference_mode():
        prefix = _intact_prompts(model, cache, tokens, attn, last, sorted(groups), bf16) if shared and not head else None
        if head:  # the prompts' shared start once per variant (:mod:`~cel_lens.evaluation.prefix`)
            prefix = intact_prompts_shared(model, tokens, attn, last, head, sorted(groups), max_new_tokens, bf16)
        for chunk in (c for members in groups.values() for c in chunks(members, per_chunk)):
            row_masks = masks[chunk].repeat_interleave(n, dim=0)
            row_stops = [stops[i] for _ in chunk for i in range(n)]
            row_gaps = None if gaps is None else torch.full((len(chunk) * n,), float("inf"))
            if prefix is None:
                outs = greedy_generate(
                    model, [p for _ in chunk for p in prompts], max_new_tokens=max_new_tokens, masks=row_masks,
                    stop=row_stops, stop_at_eos=stop_at_eos, gaps=row_gaps, ablation=ablation,
                    bf16=bf16,
                )
            else:
                outs = _resumed_generate(model, prefix, chunk, first, row_masks, row_stops, stop_at_eos, max_new_tokens,
                                         row_gaps, ablation, bf16)
            if gaps is not None:
                gaps[chunk] = row_gaps.view(len(chunk), n)
            for k, v in enumerate(chunk):
                for i in range(n):
                    out[v][i] = outs[k * n + i]
    return out


def _intact_prompts(model, cache: StackCache, tokens: Tensor, attn: Tensor, last: Tensor, starts: Sequence[int],
                    bf16: bool = False) -> dict:
    """The intact prompt pass into the empty ``cache`` (every layer), the residual stream entering
    each layer of ``starts``, and the final residual stream at each prompt's last token."""
    sink: dict[int, Tensor] = {}
    n_layers = model_shape(model)[0]
    hooks = []
    for layer in starts:
        if 0 < layer < n_layers:
            hooks.append((f"blocks.{layer}.hook_resid_pre", lambda x, hook=None, layer=layer: sink.__setitem__(layer, x)))
    final = forward_resid_cached(model, tokens, cache, attention_mask=attn, fwd_hooks=hooks, keep=last, bf16=bf16)
    return {"cache": cache, "resid": sink, "final": final[:, 0], "tokens": tokens, "attn": attn, "last": last}


def _resumed_generate(
    model, prefix: dict, chunk: list[int], first: list[int], row_masks: Tensor, row_stops, stop_at_eos: bool,
    max_new_tokens: int, gaps: Optional[Tensor] = None, ablation: Ablation = ZERO, bf16: bool = False,
) -> list[list[int]]:
    """Generation for one chunk of variants (rows variant-major) from the intact prompt pass: the
    cache of the layers below the chunk's first ablated layer is indexed, not recomputed."""
    n_layers = model_shape(model)[0]
    tokens, attn = prefix["tokens"], prefix["attn"]
    n, v = tokens.shape[0], len(chunk)
    start = min(first[c] for c in chunk)
    index = torch.arange(n, device=tokens.device).repeat(v)
    cache = select_kv_cache(prefix["cache"], index, layers=range(start) if start < n_layers else None)
    rep_attn = attn[index]
    if start >= n_layers:
        last = prefix["final"][index]
    elif prefix.get("prefix"):
        last = resumed_prompts_shared(model, prefix, start, row_masks[::n], cache, ablation=ablation, bf16=bf16)
    else:
        last = _resumed_prompts(model, prefix, start, v, row_masks, cache, ablation, bf16)
    return _decode(model, last, cache, tokens[index], rep_attn, row_masks, row_stops, stop_at_eos, max_new_tokens, gaps,
                   ablation, bf16)


def _resumed_prompts(
    model, prefix: dict, start: int, v: int, row_masks: Bool[Tensor, "row layer head"], cache: StackCache,
    ablation: Ablation, bf16: bool = False,
) -> Float[Tensor, "row d_model"]:
    """The prompt pass of ``v`` variants (rows variant-major) resumed at ``start``, into ``cache``:
    one pass per group of prompts of like length (:func:`~cel_lens.evaluation.batch.length_groups`),
    so that no more padding is computed than a teacher-forced batch allows; the groups' keys and
    values are then written into the cache's right-padded rows. The final residual stream at each
    row's last prompt token."""
    tokens, attn, prompt_last = prefix["tokens"], prefix["attn"], prefix["last"]
    n, width = tokens.shape
    groups = length_groups((prompt_last[:, 0] + 1).tolist())
    last: Optional[Tensor] = None
    for g in groups:
        g_t = torch.tensor(sorted(g), device=tokens.device)  # one group: the rows in their own order
        w = int(prompt_last[g_t].max()) + 1
        rows = (torch.arange(v, device=tokens.device)[:, None] * n + g_t[None, :]).flatten()
        x = tokens[g_t, :w] if start == 0 else prefix["resid"][start][g_t, :w]
        part = cache if len(groups) == 1 else StackCache(len(rows))
        out = forward_resid_cached(
            model, einops.repeat(x, "b ... -> (v b) ...", v=v), part, attention_mask=attn[g_t, :w].repeat(v, 1),
            start_at_layer=start, keep=prompt_last[g_t].repeat(v, 1), variants=row_masks[rows],
            ablation=ablation, repeated=True, bf16=bf16,
        )[:, 0]
        if len(groups) == 1:
            return out
        last = out.new_empty(v * n, out.shape[-1]) if last is None else last
        last[rows] = out
        for layer, (k, val) in part.layers.items():
            cache.write(layer, rows, k[:, :, :w], val[:, :, :w], width)
    assert last is not None
    return last


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
    gaps: Optional[Float[Tensor, "variant example"]] = None,
    ablation: Ablation = ZERO,
    share_prefix: bool = False,
    bf16: bool = False,
) -> tuple[Bool[Tensor, "variant example"], Float[Tensor, "variant example"], list[list[str]]]:
    """Generate for every example under every head set (``batch_size`` prompts by as many variants
    as fit in ``max_rows`` rows per batch, :func:`generate_variants`) and judge each distinct
    completion once: per-example correctness, its float copy as the score, and the completions
    ``[variant][example]``. ``gaps`` (given ``inf``) receives each one's smallest greedy gap;
    ``ablation``, ``share_prefix`` and ``bf16`` as in :func:`generate_variants`."""
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
    completions: list[list[str]] = [[""] * n for _ in range(n_var)]
    bar = progress_bar(math.ceil(n / batch_size), progress, f"generate {split.task}/{split.name} x{n_var}", unit="batch")
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        part = None if gaps is None else torch.full((n_var, len(idx)), float("inf"))
        outs = generate_variants(
            model, [prompts[i] for i in idx], masks, max_new_tokens=max_new_tokens, stop=[stops[i] for i in idx],
            max_rows=per_chunk * len(idx), gaps=part, ablation=ablation, share_prefix=share_prefix,
            bf16=bf16,
        )
        if gaps is not None:
            gaps[:, idx] = part
        for v in range(n_var):
            for j, i in enumerate(idx):
                completions[v][i] = _cut(tok.decode(outs[v][j], skip_special_tokens=True), stops[i])
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

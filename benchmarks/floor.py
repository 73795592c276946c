"""The floor: the best available forward of the same examples, Hugging Face ``transformers`` (SDPA).

A stage-1 exact scan of N heads cannot cost less than one intact pass over D_dist plus, per head,
the layers from the head's own layer on: ``(1 + N (L+1) / (2L))`` intact passes. The floor takes
that pass from ``transformers`` itself, with PyTorch's fused attention, on the token ids cel_lens
scores (:func:`cel_lens.evaluation.encode_pair`), sorted by length and cut into buckets of a token
budget with at most a share of padding (cel_lens's 2 %, or 10 %); unembedding only the scored positions; for multiple choice with
multi-token endings, each context once and its endings (grouped by length) after a key/value cache.
Several budgets and
padding shares are timed (one example per batch, i.e. no padding at all, and larger buckets) and the
fastest counts.

For generation the floor is ``transformers``' ``generate`` with its key/value cache (greedy, the
prompts one at a time, stopping at EOS), timed intact and scaled by ``N + 1``.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, Optional, Sequence

import torch

from cel_lens.evaluation.batch import MAX_PADDING

__all__ = ["hf_causal_lm", "buckets", "encode_for_floor", "hf_pass_seconds", "hf_floor", "floor_layout", "zero_head_prehook",
           "hf_generate_seconds"]


def hf_causal_lm(path, dtype: torch.dtype = torch.float32, attn: str = "sdpa"):
    """The checkpoint at ``path`` as a ``transformers`` causal LM (``attn``: attention kernel)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation=attn)
    return model.eval()


def buckets(lengths: Sequence[int], max_tokens: int, max_padding: Optional[float] = None) -> list[list[int]]:
    """Indices sorted longest first, cut into batches of at most ``max_tokens`` padded positions and
    ``max_padding`` padding (default cel_lens's own, :data:`~cel_lens.evaluation.batch.MAX_PADDING`;
    ``max_tokens=0``: one example per batch)."""
    max_padding = MAX_PADDING if max_padding is None else max_padding
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if out:
            cur = out[-1]
            width = lengths[cur[0]]
            padded = width * (len(cur) + 1)
            real = sum(lengths[j] for j in cur) + lengths[i]
            if padded <= max_tokens and padded - real <= max_padding * padded:
                cur.append(i)
                continue
        out.append([i])
    return out


def encode_for_floor(model, split) -> list[tuple[list[int], list[list[int]]]]:
    """(context ids, continuation ids per choice or target) of every example, as cel_lens encodes them
    (in the split's chat template when its task asks for one)."""
    from cel_lens.evaluation.encode import chat_choice, encode_pair, format_prompt

    chat = chat_choice(split, None)
    out = []
    for ex in split:
        options = list(ex.choices) if ex.choices else [ex.target]
        prompt = format_prompt(model, ex.prompt, chat)
        pairs = [encode_pair(model, prompt, o) for o in options]
        out.append((pairs[0][0], [c for _, c in pairs]))
    return out


def _score(hf, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = hf.lm_head(hidden).float()
    return logits.gather(-1, targets[:, None])[:, 0] - logits.logsumexp(-1)


def _rows_pass(hf, encoded, max_tokens: int, pad: int, max_padding: Optional[float] = None) -> dict[tuple[int, int], float]:
    """One row ``context + continuation[:-1]`` per (example, choice), right padded (causal attention
    keeps pads out of real positions: no mask), scored positions unembedded. Returns the
    log-likelihood of each (example, choice)."""
    keys = [(e, c) for e, (_, conts) in enumerate(encoded) for c in range(len(conts))]
    rows = [(ctx, cont) for ctx, conts in encoded for cont in conts]
    lengths = [len(c) + len(k) - 1 for c, k in rows]
    total: dict[tuple[int, int], float] = {}
    for idx in buckets(lengths, max_tokens, max_padding):
        width = lengths[idx[0]]
        tokens = torch.full((len(idx), width), pad, dtype=torch.long)
        pos, tgt, rid = [], [], []
        for r, i in enumerate(idx):
            ctx, cont = rows[i]
            seq = ctx + cont[:-1]
            tokens[r, : len(seq)] = torch.tensor(seq)
            pos += range(len(ctx) - 1, len(ctx) - 1 + len(cont))
            tgt += cont
            rid += [r] * len(cont)
        hidden = hf.model(input_ids=tokens).last_hidden_state
        scores = _score(hf, hidden[torch.tensor(rid), torch.tensor(pos)], torch.tensor(tgt))
        for r, value in zip(rid, scores.tolist()):
            total[keys[idx[r]]] = total.get(keys[idx[r]], 0.0) + value
    return total


def _shared_pass(hf, encoded, max_tokens: int, pad: int, max_padding: Optional[float] = None) -> dict[tuple[int, int], float]:
    """Each context once (right padded), then its continuations after a key/value cache of it, in
    groups of like length. Returns the log-likelihood of each (example, choice)."""
    from transformers import DynamicCache

    lengths = [len(ctx) for ctx, _ in encoded]
    total: dict[tuple[int, int], float] = {}
    for idx in buckets(lengths, max_tokens, max_padding):
        width = lengths[idx[0]]
        tokens = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            tokens[r, : lengths[i]] = torch.tensor(encoded[i][0])
            mask[r, : lengths[i]] = 1
        cache = DynamicCache(config=hf.config)
        hidden = hf.model(input_ids=tokens, attention_mask=mask, cache=cache, use_cache=True).last_hidden_state
        last = hidden[torch.arange(len(idx)), mask.sum(-1) - 1]
        conts = [(r, c) for r, i in enumerate(idx) for c in encoded[i][1]]
        keys = [(i, c) for i in idx for c in range(len(encoded[i][1]))]
        first = _score(hf, last[torch.tensor([r for r, _ in conts])], torch.tensor([c[0] for _, c in conts]))
        total.update(zip(keys, first.tolist()))
        ending = [len(c) - 1 for _, c in conts]
        for group in buckets(ending, 1 << 30):  # endings of like length together
            group = [j for j in group if ending[j] > 0]
            if not group:
                continue
            k = ending[group[0]]
            rows = torch.tensor([conts[j][0] for j in group])
            sub = copy.deepcopy(cache)
            sub.batch_select_indices(rows)
            ct = torch.full((len(group), k), pad, dtype=torch.long)
            cm = torch.zeros((len(group), k), dtype=torch.long)
            nxt = torch.zeros_like(ct)
            for r, j in enumerate(group):
                c = conts[j][1]
                ct[r, : len(c) - 1] = torch.tensor(c[:-1])
                cm[r, : len(c) - 1] = 1
                nxt[r, : len(c) - 1] = torch.tensor(c[1:])
            full = torch.cat([mask[rows], cm], dim=1)
            positions = (full.cumsum(-1) - 1).clamp_min(0)[:, width:]
            out = hf.model(input_ids=ct, attention_mask=full, position_ids=positions, cache=sub, use_cache=True)
            sel = cm.bool()
            rest = _score(hf, out.last_hidden_state[sel], nxt[sel]).split(cm.sum(-1).tolist())
            for j, value in zip(group, rest):
                total[keys[j]] += float(value.sum())
    return total


def hf_loglikelihoods(
    hf, encoded, *, shared: bool, max_tokens: int, pad: int, max_padding: Optional[float] = None
) -> dict[tuple[int, int], float]:
    """Log-likelihood of every (example, choice) of ``encoded`` from the floor's pass in one layout
    (what :func:`hf_pass_seconds` times), so that the layouts can be checked against each other."""
    with torch.inference_mode():
        return (_shared_pass if shared else _rows_pass)(hf, encoded, max_tokens, pad, max_padding)


def hf_pass_seconds(
    hf, encoded, *, shared: bool, max_tokens: int, pad: int, max_padding: Optional[float] = None,
    clock: Callable[[], float] = time.process_time,
) -> float:
    """CPU seconds (or ``clock``) of one intact pass over ``encoded`` with ``transformers``."""
    t0 = clock()
    with torch.inference_mode():
        (_shared_pass if shared else _rows_pass)(hf, encoded, max_tokens, pad, max_padding)
    return clock() - t0


def hf_floor(
    hf, encoded, *, pad: int, budgets: Sequence[int] = (0, 4096, 16384), paddings: Sequence[float] = (MAX_PADDING, 0.1),
    reps: int = 3,
) -> dict[str, Any]:
    """The fastest intact ``transformers`` pass (CPU seconds, min over ``reps``) over the budgets, the
    padding shares (short prompts batch better with more padding, long ones with less) and, for
    multi-token multiple choice, both layouts (one row per choice, or shared contexts). Layouts are
    named ``layout/budget/padding`` (:func:`floor_layout` reads the name back)."""
    multi = any(len(conts) > 1 for _, conts in encoded)
    one_token = all(len(c) == 1 for _, conts in encoded for c in conts)
    layouts = [True] if one_token and multi else ([False, True] if multi else [False])
    times = {}
    for shared in layouts:
        for budget in budgets:
            for share in paddings:
                times[f"{'shared' if shared else 'rows'}/{budget}/{share:g}"] = min(
                    hf_pass_seconds(hf, encoded, shared=shared, max_tokens=budget, pad=pad, max_padding=share)
                    for _ in range(reps)
                )
    best = min(times, key=times.get)
    return {"pass_cpu_s": times[best], "best": best, "all": times}


def floor_layout(name: str) -> dict[str, Any]:
    """The keyword arguments of :func:`hf_pass_seconds` that a layout name of :func:`hf_floor` stands for."""
    layout, budget, share = name.split("/")
    return {"shared": layout == "shared", "max_tokens": int(budget), "max_padding": float(share)}


def zero_head_prehook(hf, layer: int, head: int):
    """A forward pre-hook on ``transformers``' ``o_proj`` of ``layer`` zeroing ``head``'s input
    columns (the same ablation as cel_lens's ``hook_z``); returns the handle."""
    attn = hf.model.layers[layer].self_attn
    d = attn.head_dim

    def pre(module, args):  # noqa: ANN001 - torch hook signature
        x = args[0].clone()
        x[..., head * d : (head + 1) * d] = 0
        return (x,) + tuple(args[1:])

    return attn.o_proj.register_forward_pre_hook(pre)


def hf_generate_seconds(
    hf, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: Optional[int], head: Optional[tuple[int, int]] = None
) -> tuple[float, list[list[int]]]:
    """CPU seconds of greedy ``generate`` (key/value cache, one prompt at a time) over ``prompts``,
    with ``head`` zero-ablated; and the generated ids."""
    handle = None if head is None else zero_head_prehook(hf, *head)
    outs = []
    t0 = time.process_time()
    try:
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([list(p)])
                out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=False, eos_token_id=eos, pad_token_id=eos)
                outs.append(out[0, len(p):].tolist())
    finally:
        if handle is not None:
            handle.remove()
    return time.process_time() - t0, outs

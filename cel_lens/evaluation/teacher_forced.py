"""Teacher-forced forward passes of encoded batches under many ablation variants at once.

The inputs are repeated variant-major along the batch and a ``[V, L, H]`` mask ablates ``hook_z``
(``variants=`` of :func:`cel_lens.model.forward.forward_resid`), as many variants per forward pass as ``max_tokens`` padded
positions allow (and ``max_rows`` rows, when given). The intact model
runs once per batch; every ablated variant resumes from the intact residual stream entering its
first ablated layer (kept from that intact pass, or read from an
:class:`~cel_lens.evaluation.store.ActivationStore`), so layers below it are never recomputed. Only
the scored positions are unembedded.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.evaluation.batch import EncodedBatch, TeacherForced, length_groups
from cel_lens.evaluation.prefix import _capture_hooks, prefix_rows_vectors
from cel_lens.heads import HeadSet, masks_from_head_sets
from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.model.forward import forward_resid, forward_resid_cached, init_kv_cache, param_device, select_kv_cache, unembed
from cel_lens.model.model_types import model_shape, supports_resume
from cel_lens.model.stack_bf16 import bf16_usable, refine_logits
from cel_lens.progress import progress_bar

__all__ = ["batch_pass", "intact_mask", "score_batches", "chunks", "variants_per_pass"]

_VECTOR_BUDGET = 1 << 25  # logits elements unembedded at once (128 MiB in float32)


def _input(model, tokens: Tensor, source: Optional[Tensor], start: int) -> Tensor:
    """The batch's input: tokens from layer 0, else the stored residual stream entering ``start``."""
    p = next(model.parameters())
    return tokens.to(p.device) if start == 0 else source.to(device=p.device, dtype=p.dtype)  # type: ignore[union-attr]


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
    *,
    ablation: Ablation,
    bf16: bool = False,
) -> Float[Tensor, "variant row k d_model"]:
    """Residual vectors at each row's scored positions. Rows are right padded, so causal attention
    alone keeps every pad out of every real position: no attention mask is needed."""
    n_var = masks.shape[0]
    x = _input(model, rows.tokens, sources[0] if sources else None, start)
    hooks = _capture_hooks(capture, sink if sink is not None else {}, 0)
    resid = forward_resid(model, x, start_at_layer=start, fwd_hooks=hooks, keep=rows.positions, variants=masks,
                          ablation=ablation, bf16=bf16)
    return einops.rearrange(resid, "(v r) k d -> v r k d", v=n_var)


def _shared_vectors(
    model,
    batch: EncodedBatch,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
    *,
    ablation: Ablation,
    bf16: bool = False,
) -> Float[Tensor, "variant row k d_model"]:
    """Residual vectors at each row's scored positions: every prompt once (right padded), then
    each choice's continuation after its prompt's key/value cache (an index of the prompt's rows,
    :func:`_continuations`)."""
    assert batch.context_tokens is not None and batch.context_mask is not None
    assert batch.cont_tokens is not None and batch.cont_mask is not None
    sink = sink if sink is not None else {}
    n_var, n_ex = masks.shape[0], batch.n_examples
    width = batch.cont_tokens.shape[1]
    device = param_device(model)
    ctx_mask = _repeat(batch.context_mask, n_var, device)
    cache = init_kv_cache(model, n_var * n_ex, spare=width) if width > 0 else None  # room for a continuation
    if width > 0 and cache is None:
        raise ValueError("this batch was encoded with shared contexts, which needs a key/value cache")
    last = forward_resid_cached(
        model,
        _input(model, batch.context_tokens, sources[0] if sources else None, start),
        cache,
        attention_mask=batch.context_mask.to(device),
        start_at_layer=start,
        fwd_hooks=_capture_hooks(capture, sink, 0),
        keep=batch.context_last[:, None].to(device),
        variants=masks,
        ablation=ablation,
        bf16=bf16,
    )
    row_example = batch.row_example.to(device)
    last = einops.rearrange(last[:, 0], "(v b) d -> v b d", v=n_var)[:, row_example]  # [v, row, d]
    if width == 0:
        return last[:, :, None]
    cont = _continuations(model, batch, masks, start, sources, capture, sink, cache, ctx_mask, ablation, bf16)
    return torch.cat([last[:, :, None], cont], dim=2)


def _continuations(model, batch, masks, start, sources, capture, sink, cache, ctx_mask, ablation, bf16: bool) -> Tensor:
    """Every choice's continuation after its prompt's cache, ``[variant, row, width, d_model]``:
    rows in groups of like length (:func:`~cel_lens.evaluation.batch.length_groups`), one pass per group."""
    n_var, n_ex, n_rows = masks.shape[0], batch.n_examples, batch.n_rows
    device = param_device(model)
    row_example = batch.row_example.to(device)
    lengths = batch.cont_mask.sum(1).tolist()
    width = batch.cont_tokens.shape[1]
    dtype = next(model.parameters()).dtype
    out = torch.zeros(n_var, n_rows, width, int(model.cfg.d_model), device=device, dtype=dtype)
    for group in length_groups(lengths):
        g = torch.tensor(group, device=device)
        w = int(lengths[group[0]])
        idx = (torch.arange(n_var, device=device)[:, None] * n_ex + row_example[g][None]).flatten()
        source = sources[1][g.to(sources[1].device), :w] if sources else None
        part: dict = {}
        resid = forward_resid_cached(
            model,
            _repeat(_input(model, batch.cont_tokens[g.cpu(), :w], source, start), n_var, device),
            select_kv_cache(cache, idx),
            attention_mask=torch.cat([ctx_mask[idx], _repeat(batch.cont_mask[g.cpu(), :w], n_var, device)], dim=1),
            start_at_layer=start,
            fwd_hooks=_capture_hooks(capture, part, 1),
            variants=masks,
            ablation=ablation,
            repeated=True,
            bf16=bf16,
        )
        out[:, g, :w] = einops.rearrange(resid, "(v r) p d -> v r p d", v=n_var)
        for key, value in part.items():
            full = sink.setdefault(key, value.new_zeros(n_rows, width, value.shape[-1]))
            full[g.to(full.device), :w] = value
    return out


def _score_vectors(
    model, vectors: Float[Tensor, "n d_model"], targets: Int[Tensor, " n"], bf16: bool = False
) -> tuple[Float[Tensor, " n"], Bool[Tensor, " n"], Float[Tensor, " n"]]:
    """Log-prob of each target, whether it is the argmax, and its margin (its logit minus the best
    other logit: > 0 iff it is the only argmax), unembedding in bounded chunks (with ``bf16``, on
    the bfloat16 weight copy where the model has one, the tokens near the top refined in float32)."""
    n = vectors.shape[0]
    step = max(1, _VECTOR_BUDGET // max(1, int(model.cfg.d_vocab)))
    logprobs, greedy, margins = [], [], []
    fast = bf16 and bf16_usable(model)
    for i in range(0, n, step):
        logits = unembed(model, vectors[i : i + step], bf16=fast).float()
        tgt = targets[i : i + step, None]
        if fast:  # the tokens near the top, and the target, in float32 (cel_lens.model.stack_bf16)
            logits, covered = refine_logits(model, vectors[i : i + step], logits, tgt[:, 0])
        own = logits.gather(-1, tgt)
        logprobs.append((own - logits.logsumexp(-1, keepdim=True))[:, 0])
        greedy.append(logits.argmax(-1) == tgt[:, 0])
        margin = own[:, 0] - logits.scatter(-1, tgt, float("-inf")).amax(-1)
        margins.append(margin if not fast else torch.where(covered, margin, torch.zeros_like(margin)))
    if not logprobs:
        empty = vectors.new_zeros(0, dtype=torch.float32)
        return empty, torch.zeros(0, dtype=torch.bool, device=vectors.device), empty
    return torch.cat(logprobs), torch.cat(greedy), torch.cat(margins)


def _row_scores(
    model, batch: EncodedBatch, vectors: Float[Tensor, "variant row k d_model"], margins: Optional[list] = None,
    bf16: bool = False,
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Summed target log-prob and all-tokens-greedy flag per (variant, row); only real target
    positions are unembedded. ``margins`` (a list) receives each row's smallest target margin
    (:func:`_score_vectors`; what :mod:`~cel_lens.evaluation.precision` decides a recompute by)."""
    device = vectors.device
    sel = batch.target_mask.to(device)
    n_var = vectors.shape[0]
    picked = vectors[:, sel]  # [v, n, d]
    tgt = einops.repeat(batch.targets.to(device)[sel], "n -> (v n)", v=n_var)
    lp, greedy, margin = _score_vectors(model, picked.reshape(-1, picked.shape[-1]), tgt, bf16)
    lp_full = torch.zeros((n_var, *sel.shape), dtype=torch.float32, device=device)
    greedy_full = torch.ones((n_var, *sel.shape), dtype=torch.bool, device=device)
    lp_full[:, sel] = lp.view(n_var, -1)
    greedy_full[:, sel] = greedy.view(n_var, -1)
    if margins is not None:
        margin_full = torch.full((n_var, *sel.shape), float("inf"), device=device)
        margin_full[:, sel] = margin.view(n_var, -1)
        margins.append(margin_full.amin(-1).cpu())
    return lp_full.sum(-1).cpu(), greedy_full.all(-1).cpu()


def batch_pass(
    model,
    batch: EncodedBatch,
    masks: Bool[Tensor, "variant layer head"],
    start: int,
    sources: Optional[Sequence[Optional[Tensor]]],
    capture: Sequence[int] = (),
    sink: Optional[dict] = None,
    margins: Optional[list] = None,
    *,
    ablation: Ablation,
    bf16: bool = False,
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Row scores of ``batch`` under ``masks`` (each ablated head replaced as ``ablation`` says),
    starting at layer ``start`` (from tokens when 0,
    else from ``sources``: the intact residual streams entering ``start``), capturing the intact
    residual stream entering each layer in ``capture`` into ``sink[(part, layer)]`` (``margins``:
    see :func:`_row_scores`; ``bf16``: on the model's bfloat16 weight copy, as
    :func:`~cel_lens.model.forward.forward_resid`)."""
    if batch.rows is not None and batch.prefix:
        vectors = prefix_rows_vectors(model, batch.rows, batch.prefix, masks, start, sources, capture, sink,
                                      ablation=ablation, bf16=bf16)
        return _row_scores(model, batch, vectors, margins, bf16)
    fn = _rows_vectors if batch.layout == "rows" else _shared_vectors
    rows_or_batch = batch.rows if batch.layout == "rows" else batch
    vectors = fn(model, rows_or_batch, masks, start, sources, capture, sink, ablation=ablation, bf16=bf16)  # type: ignore[arg-type]
    return _row_scores(model, batch, vectors, margins, bf16)


def _batch_sources(sink: dict, layer: int, n_parts: int) -> list[Optional[Tensor]]:
    """Captured residual streams of each part at ``layer`` (None for a part that never ran: the
    continuations of one-token choices)."""
    return [sink.get((part, layer)) for part in range(n_parts)]


def intact_mask(n_layers: int, n_heads: int) -> Bool[Tensor, "1 layer head"]:
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


def chunks(items: list[int], size: int) -> Iterable[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def variants_per_pass(batch: EncodedBatch, max_tokens: Optional[int], max_rows: Optional[int] = None) -> int:
    """How many variants of ``batch`` one forward pass holds: ``max_tokens`` padded positions and
    ``max_rows`` rows (each bound only when given; at least one of them must be), at least one."""
    if not max_tokens and not max_rows:
        raise ValueError("a forward pass needs a bound: max_tokens or max_rows")
    per = max(1, int(max_tokens) // max(1, batch.computed_tokens)) if max_tokens else 1 << 30
    if max_rows:
        per = min(per, max(1, int(max_rows) // max(1, batch.n_rows, batch.n_examples)))
    return per


def score_batches(
    model,
    batches: Sequence[EncodedBatch],
    sets: Sequence[HeadSet],
    *,
    store=None,
    max_tokens: Optional[int] = None,
    max_rows: Optional[int] = None,
    progress: bool,
    desc: str,
    margin: Optional[Tensor] = None,
    ablation: Ablation = ZERO,
    bf16: bool = False,
) -> tuple[Float[Tensor, "variant row"], Bool[Tensor, "variant row"]]:
    """Row scores of every batch under every head set (rows in batch order; ``ablation``: what an
    ablated head's ``z`` is replaced by, zero by default; ``bf16``: every pass on the model's
    bfloat16 weight copy, :func:`batch_pass`). ``margin``
    (``[variant, row]``, given filled with ``inf``) receives each computed row's smallest target
    margin (rows read from ``store``, computed in float32, keep theirs)."""
    n_layers, n_heads = model_shape(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    n_var = len(sets)
    total_rows = sum(b.n_rows for b in batches)
    lp = torch.zeros(n_var, total_rows)
    greedy = torch.zeros(n_var, total_rows, dtype=torch.bool)
    resumable = store.resumable if store is not None else supports_resume(model)
    intact, groups = _layer_plan(sets, resumable, store.nearest_layer if store is not None else None)
    bar = progress_bar(len(batches), progress, desc, unit="batch")
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
                got: list = []
                i_lp, i_greedy = batch_pass(model, batch, intact_mask(n_layers, n_heads), 0, None, capture, sink, got,
                                             ablation=ZERO, bf16=bf16)
                if margin is not None and intact:
                    margin[intact, rows] = got[0]
                lp[intact, rows] = i_lp
                greedy[intact, rows] = i_greedy
        per_chunk = variants_per_pass(batch, max_tokens, max_rows)
        for start, members in groups.items():
            if start == 0:
                sources = None
            elif store is not None:
                sources = store.sources(b, start)
            else:
                sources = _batch_sources(sink, start, n_parts)
            for chunk in chunks(members, per_chunk):
                got = []
                c_lp, c_greedy = batch_pass(model, batch, masks[chunk], start, sources, margins=got, ablation=ablation,
                                           bf16=bf16)
                if margin is not None:
                    margin[chunk, rows] = got[0]
                lp[chunk, rows] = c_lp
                greedy[chunk, rows] = c_greedy
        bar.update(1)
    bar.close()
    return lp, greedy

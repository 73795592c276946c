"""Intact against ablated attention in the form CircuitsVis takes.

``circuitsvis.attention.attention_patterns(tokens, attention, attention_head_names)`` draws a
``[head, query, key]`` tensor with one name per head. :func:`circuitsvis_patterns` lays an
:class:`~cel_lens.report.attention.AttentionPatterns` out that way: each chosen head twice, intact
then ablated, side by side, so ``cv.attention.attention_patterns(**circuitsvis_patterns(p))`` shows
what the ablation did to the heads downstream of it. Data only: nothing here imports circuitsvis.
"""

from __future__ import annotations

from typing import Any

import torch

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.report.attention import AttentionPatterns, pattern_change

__all__ = ["circuitsvis_patterns"]


def _most_changed(patterns: AttentionPatterns, n: int) -> HeadSet:
    """The ``n`` heads whose pattern moves most under the ablation (any change at all), else the
    ablated heads themselves."""
    change = pattern_change(patterns)
    n_heads = change.shape[1]
    order = torch.argsort(change.flatten(), descending=True, stable=True)[:n]
    moved = [divmod(int(i), n_heads) for i in order if float(change.flatten()[i]) > 0]
    return HeadSet(moved) if moved else patterns.ablated_heads


def circuitsvis_patterns(patterns: AttentionPatterns, heads: HeadsLike = None, *, max_heads: int = 4) -> dict[str, Any]:
    """Keyword arguments for ``circuitsvis.attention.attention_patterns``: ``tokens`` (the string
    tokens), ``attention`` (``[2 * len(heads), query, key]``: each head intact, then ablated) and
    ``attention_head_names`` (``"L3H1 intact"``, ``"L3H1 ablated"``, ...). ``heads`` defaults to the
    ``max_heads`` heads whose pattern the ablation changes most (the ablated heads when none changes)."""
    n_layers, n_heads = patterns.intact.shape[:2]
    chosen = _most_changed(patterns, max_heads) if heads is None else HeadSet.parse(heads).validate(n_layers, n_heads)
    if not chosen:
        raise ValueError("no heads to show: pass heads= (e.g. 'L1H0+L1H2')")
    stacked, names = [], []
    for head in chosen:
        for label, source in (("intact", patterns.intact), ("ablated", patterns.ablated)):
            stacked.append(source[head.layer, head.head])
            names.append(f"{head} {label}")
    return {"tokens": list(patterns.tokens), "attention": torch.stack(stacked).float(), "attention_head_names": names}

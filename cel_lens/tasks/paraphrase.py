"""Near-paraphrases across splits: problems worded almost alike, by token overlap.

Exact-text deduplication (:func:`~cel_lens.tasks.base.drop_same_text`) misses problems that
differ by a word (MBPP 658/362 and 673/439). :func:`drop_near_paraphrases` drops the D_dist
candidates whose problem text has a token Jaccard similarity of at least ``threshold`` (default
:data:`NEAR_PARAPHRASE_JACCARD`) with any D_test problem, and returns what it dropped with the
similarity, for the task's ``options["deduplication"]`` record.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from cel_lens.tasks.base import Example, normalise_text

__all__ = ["NEAR_PARAPHRASE_JACCARD", "tokens", "jaccard", "drop_near_paraphrases", "paraphrase_record"]

NEAR_PARAPHRASE_JACCARD = 0.9
"""Token Jaccard similarity at or above which two problems count as one (near-paraphrases)."""

_WORD = re.compile(r"\w+")


def tokens(text: str) -> frozenset[str]:
    """The set of word tokens of the normalised text (NFKC, case-folded)."""
    return frozenset(_WORD.findall(normalise_text(text)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a & b| / |a | b|`` (1 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def drop_near_paraphrases(
    pool: Sequence[Example], reference: Sequence[Example], threshold: float = NEAR_PARAPHRASE_JACCARD
) -> tuple[list[Example], list[tuple[str, str, float]]]:
    """``pool`` without the examples whose problem text (``meta["text"]`` or the prompt) has token
    Jaccard >= ``threshold`` with a ``reference`` example's, and the ``(dropped id, its closest
    reference id, similarity)`` triples."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    ref = [(e.id, tokens(e.meta.get("text") or e.prompt)) for e in reference]
    kept, dropped = [], []
    for e in pool:
        mine = tokens(e.meta.get("text") or e.prompt)
        best = max(((jaccard(mine, t), rid) for rid, t in ref), default=(0.0, ""))
        if best[0] >= threshold:
            dropped.append((e.id, best[1], round(best[0], 4)))
        else:
            kept.append(e)
    return kept, dropped


def paraphrase_record(dropped: Sequence[tuple[str, str, float]], threshold: float) -> dict[str, Any]:
    """What ``options["deduplication"]["near_paraphrases"]`` records: the rule and every pair."""
    return {"key": f"token Jaccard >= {threshold:g} of the normalised problem text", "removed": len(dropped),
            "pairs": [list(p) for p in dropped]}

"""The generation benchmark (MBPP): cel_lens's stage-1 scan against TransformerLens's ``generate``.

* **Naive**: for each head, TransformerLens's ``generate`` (greedy, its key/value cache, stopping
  at EOS) on each prompt alone under one zeroing hook at ``hook_z``; the text is cut at the task's
  stop strings and judged (pass@1).
* **cel_lens**: ``evaluate(model, D_dist, [intact] + every single head)``, what
  :func:`cel_lens.scoring.exact_scores` runs for a generation task: variants batched, the prompts'
  intact pass shared below each variant's first ablated layer, finished rows dropped.
* **Floor**: ``transformers``' ``generate`` with its key/value cache, intact, times ``N + 1``.

Prompt token ids come from :func:`cel_lens.evaluation.generation_prompts` for both loops, so the
comparison is of generation, not of tokenization. Judging runs each distinct program in the
sandbox (``CEL_LENS_ALLOW_CODE_EXECUTION=1``); the CPU time of those child processes is counted.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from benchmarks.naive import zero_head_hook

__all__ = ["naive_generation_scan", "cel_generation_scan", "compare_completions"]


def _cut(text: str, stops: Sequence[str]) -> str:
    for s in stops:
        if s:
            text = text.split(s)[0]
    return text


def naive_generation_scan(model, split, heads: Sequence[tuple[int, int]], max_new_tokens: int) -> dict[str, Any]:
    """Completions and pass@1 of the intact model and each head, one ``generate`` per prompt."""
    from cel_lens.evaluation.generation import generation_prompts

    tok = model.tokenizer
    prompts = generation_prompts(model, split, False, max_new_tokens)
    eos = tok.eos_token_id
    completions: list[list[str]] = []
    for head in [None, *heads]:
        hooks = [] if head is None else [zero_head_hook(*head)]
        texts = []
        with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
            for ids, ex in zip(prompts, split):
                out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                                     stop_at_eos=True, verbose=False)
                new = out[0, len(ids):].tolist()
                if eos in new:
                    new = new[: new.index(eos)]
                texts.append(_cut(tok.decode(new, skip_special_tokens=True), split.stop_strings(ex)))
        completions.append(texts)
    passed = torch.tensor([[bool(split.judge(ex, c)) for ex, c in zip(split, row)] for row in completions])
    return {"heads": list(heads), "completions": completions, "correct": passed}


def cel_generation_scan(model, split, batch_size: int = 8) -> dict[str, Any]:
    """cel_lens's stage-1 scan of a generation split: completions and pass@1 of the intact model and
    every single head (row 0 intact, then heads layer-major), and the gains."""
    from cel_lens.evaluation import evaluate
    from cel_lens.heads import Head, HeadSet
    from cel_lens.model import model_shape

    L, H = model_shape(model)
    sets = [HeadSet()] + [HeadSet([Head(l, h)]) for l in range(L) for h in range(H)]
    res = evaluate(model, split, sets, batch_size=batch_size, progress=False)
    gains = res.correct[1:].to(torch.float64).mean(1) - res.correct[0].to(torch.float64).mean()
    return {"completions": res.completions, "correct": res.correct, "gains": gains}


def compare_completions(naive: dict[str, Any], cel: dict[str, Any], n_heads: int) -> list[str]:
    """Where the naive and cel_lens completions or verdicts differ (intact and the naive heads)."""
    bad = []
    for row, head in enumerate([None, *naive["heads"]]):
        c_row = 0 if head is None else 1 + head[0] * n_heads + head[1]
        for i, (a, b) in enumerate(zip(naive["completions"][row], cel["completions"][c_row])):
            if a != b:
                bad.append(f"{'intact' if head is None else f'L{head[0]}H{head[1]}'} example {i}: text differs")
        if not torch.equal(naive["correct"][row], cel["correct"][c_row]):
            bad.append(f"{'intact' if head is None else f'L{head[0]}H{head[1]}'}: pass@1 differs")
    return bad

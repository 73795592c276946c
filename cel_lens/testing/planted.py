"""Tasks whose best ablation is known by construction."""

from __future__ import annotations

import torch

from cel_lens.evaluation.encode import encode_pair, encode_prompt
from cel_lens.model.ablation import ablate
from cel_lens.model.forward import param_device
from cel_lens.tasks.base import Example, Task

__all__ = ["planted_task"]


def planted_task(model, n: int = 24, heads: str = "intact", name: str = "planted"):
    """A task whose best ablation is known by construction: exact-match examples (``n`` discovery,
    ``n`` test) whose target is the next token ``model`` predicts with ``heads`` ablated, so ablating
    exactly those heads scores 100%. Only prompts whose target re-encodes to that very token (no BPE
    merge across the boundary) are kept. With ``heads="intact"`` the targets are the intact model's
    own answers."""
    examples = []
    with ablate(model, heads):
        for i in range(20 * n):
            prompt = f"Question: What is {i} plus {3 * i + 7}?\nAnswer:"
            ids = encode_prompt(model, prompt)  # as the evaluator reads it (the model's BOS rule)
            nxt = int(model(torch.tensor([ids], device=param_device(model)))[0, -1].argmax())
            target = model.tokenizer.decode([nxt])
            ctx, cont = encode_pair(model, prompt, target)
            if cont == [nxt] and ctx == ids:
                examples.append(Example(f"{name}/{i}", prompt, target=target))
            if len(examples) == 2 * n:
                break
    if len(examples) < 2 * n:
        raise ValueError(f"only {len(examples)} of {2 * n} prompts give a target that re-encodes to one token")
    return Task(name, "exact_match", tuple(examples[:n]), tuple(examples[n:]))

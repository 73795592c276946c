"""The explorer's model-driven panels: attention intact vs ablated and direct logit effects,
computed once per example and kept.

:class:`ActivationCache` runs a D_dist example through the model once intact (every layer's
attention pattern, the answer position and the intact logits there) and once per ablated head set,
and keeps each direct logit effect per (example, head): clicking back and forth between heads
re-runs nothing. :func:`model_block` turns what it holds into the dict the explorer's renderer
(:mod:`cel_lens.report.explorer_render`) draws. Only D_dist examples are run: D_test stays sealed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.analysis.attention import direct_logit_effects, example_tokens
from cel_lens.evaluation.encode import encode_pair, format_prompt
from cel_lens.heads import Head, HeadSet
from cel_lens.model.ablation import ablation_hooks
from cel_lens.model.forward import forward_resid, unembed
from cel_lens.model.model_types import model_shape
from cel_lens.report.attention import AttentionPatterns, default_heads, pattern_change
from cel_lens.report.explorer_data import example_entry, rounded
from cel_lens.tasks.base import Example, Split

if TYPE_CHECKING:
    from cel_lens.model.types import Model

__all__ = ["ActivationCache", "model_block"]


class ActivationCache:
    """Per-example activations of ``model`` on ``split`` (a D_dist split), computed on first use and
    kept: ``runs`` counts the forward passes actually made (a cached panel adds none)."""

    def __init__(self, model: "Model", split: Split, *, chat_template: bool = False) -> None:
        if split.name == "test":
            raise ValueError("the explorer runs the model on D_dist examples only: D_test stays sealed")
        self.model, self.split, self.chat = model, split, chat_template
        self.n_layers, self.n_heads = model_shape(model)
        self.runs = 0
        self._intact: dict[int, dict[str, Any]] = {}
        self._ablated: dict[tuple[int, HeadSet], Tensor] = {}
        self._effects: dict[tuple[int, Head], tuple[float, float]] = {}

    def _patterns(self, tokens: Tensor, hooks: list) -> Float[Tensor, "layer head query key"]:
        store: dict[str, Tensor] = {}
        names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(self.n_layers)]

        def save(pattern: Tensor, hook: Any) -> None:
            store[hook.name] = pattern[0].detach().float().cpu()

        with torch.no_grad(), self.model.hooks(fwd_hooks=[*hooks, *[(n, save) for n in names]]):
            self.model(tokens)
        self.runs += 1
        return torch.stack([store[n] for n in names])

    def _first_token(self, example: Example, text: str) -> Optional[int]:
        try:
            cont = encode_pair(self.model, format_prompt(self.model, example.prompt, self.chat), text)[1]
        except ValueError:
            return None
        return int(cont[0]) if cont else None

    def intact(self, index: int) -> dict[str, Any]:
        """Example ``index``'s intact run: ``tokens`` (ids), ``str_tokens``, ``position`` (where
        the answer is predicted), ``answer`` and ``rival`` token ids (the best wrong answer: the
        likeliest wrong choice, else the likeliest other token) and ``patterns``."""
        if index not in self._intact:
            example = self.split[index]
            tokens = example_tokens(self.model, example, include_target=False, chat_template=self.chat)
            position = tokens.shape[1] - 1
            answer_text = example.target if example.target is not None else example.choices[example.label]
            answer = self._first_token(example, answer_text)
            with torch.no_grad():
                logits = unembed(self.model, forward_resid(self.model, tokens)[0, position][None]).float()[0].cpu()
            self.runs += 1
            wrong = [self._first_token(example, c) for i, c in enumerate(example.choices) if i != example.label]
            candidates = [t for t in wrong if t is not None and t != answer]
            if not candidates:
                masked = logits.clone()
                if answer is not None:
                    masked[answer] = -float("inf")
                candidates = [int(masked.argmax())]
            rival = max(candidates, key=lambda t: float(logits[t]))
            self._intact[index] = dict(
                tokens=tokens, str_tokens=[str(t) for t in self.model.to_str_tokens(tokens[0])], position=position,
                answer=answer, rival=rival, patterns=self._patterns(tokens, []),
            )
        return self._intact[index]

    def ablated(self, index: int, heads: HeadSet) -> Float[Tensor, "layer head query key"]:
        """Every layer's attention pattern on example ``index`` with ``heads`` zero-ablated."""
        key = (index, heads)
        if key not in self._ablated:
            self._ablated[key] = self._patterns(self.intact(index)["tokens"], ablation_hooks(heads, n_heads=self.n_heads))
        return self._ablated[key]

    def effects(self, index: int, heads: HeadSet) -> dict[Head, tuple[float, float]]:
        """Each head's direct logit effect on example ``index``: ``(on answer, on best wrong answer)``."""
        base = self.intact(index)
        todo = HeadSet([h for h in heads if (index, h) not in self._effects])
        if todo:
            per_token: dict[int, Tensor] = {}
            for token in {base["answer"], base["rival"]} - {None}:
                ids, eff = direct_logit_effects(self.model, base["tokens"], todo, base["position"], answer=token)
                per_token[token] = eff[:, ids.index(token)]
                self.runs += 1 + 2 * len(todo)
            for i, h in enumerate(todo):
                on = [float(per_token[t][i]) if t in per_token else float("nan") for t in (base["answer"], base["rival"])]
                self._effects[(index, h)] = (on[0], on[1])
        return {h: self._effects[(index, h)] for h in heads}


def model_block(
    cache: ActivationCache, heads: Any, index: int, *, n_downstream: int = 2, max_tokens: int = 16,
    progress: Optional[Callable[[str], None]] = None,
) -> dict[str, Any]:
    """The model panel of ``heads`` on D_dist example ``index``: the example, a window of its last
    ``max_tokens`` tokens, the attention patterns (intact, ablated) of the ablated heads and of the
    ``n_downstream`` later heads whose patterns change most, and each ablated head's direct logit
    effect on the answer and the best wrong answer. ``progress`` hears a line before each model run."""
    hs = HeadSet.parse(heads).validate(cache.n_layers, cache.n_heads)
    say = progress or (lambda _msg: None)
    say(f"running the model on D_dist example {index} (intact, cached once)")
    base = cache.intact(index)
    say(f"ablating {hs} on example {index}")
    ablated = cache.ablated(index, hs)
    say(f"direct logit effects of {hs}")
    effects = cache.effects(index, hs)
    patterns = AttentionPatterns(base["str_tokens"], hs, base["patterns"], ablated)
    change = pattern_change(patterns)
    start = max(0, len(base["str_tokens"]) - max_tokens)
    rows = []
    for h in default_heads(patterns, n_downstream):
        rows.append(dict(head=str(h), role="ablated" if h in hs else "downstream", change=float(change[h.layer, h.head]),
                         intact=base["patterns"][h.layer, h.head, start:, start:].tolist(),
                         ablated=ablated[h.layer, h.head, start:, start:].tolist()))
    decode = cache.model.tokenizer.decode
    logit_rows = [dict(head=str(h), on_answer=a, on_rival=b, margin=a - b) for h, (a, b) in effects.items()]
    return rounded(dict(
        example=example_entry(cache.split[index], index), tokens=base["str_tokens"][start:], offset=start, patterns=rows,
        logit=dict(answer=decode([base["answer"]]) if base["answer"] is not None else None, rival=decode([base["rival"]]),
                   rows=logit_rows),
    ), 3, decimals=True)

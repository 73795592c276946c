"""Head ablation at ``blocks.{l}.attn.hook_z``: what each ablation kind does, and the hooks for one
head set or for many variants. The one place that writes to ``hook_z``.

Ablating a head set S replaces the per-head attention output ``z`` (the input of the output
projection, ``[batch, pos, head, d_head]``) of every head in S, at every position, prompt and
generated tokens alike; nothing else changes. With grouped-query attention ``hook_z`` is per
*query* head, so ablating query head h never touches the other heads of its key/value group.

What replaces ``z`` is the ablation's *kind*, one entry of :data:`ABLATION_KINDS`:

* ``"zero"`` (the default, the paper's protocol): zero;
* ``"mean"``: the head's mean ``z`` over D_dist (position class ``"all"``: every real position
  of every D_dist prompt), computed once (:func:`fit_ablation`) and recorded with the run;
* ``"resample"``: ``z`` from another D_dist example: for each head, a donor example drawn with a
  seed, at its last prompt position (one donor per head, so the value never depends on the batch).

A kind is a small class (:class:`Ablation`): ``values(z, layer)`` says what replaces ``z``;
``fit`` builds it from a model and D_dist prompts. Adding a kind is one class and one line in
:data:`~cel_lens.config.ABLATION_KINDS` (name -> ``"module:Class"``); :func:`ablate`, :func:`run_variants`, the fused stack
(:mod:`~cel_lens.model.stack`, :meth:`Ablation.replace`), the resumed passes
(:mod:`~cel_lens.model.forward`, :meth:`Ablation.variant_hooks`), evaluation, search and export
(:meth:`Ablation.constant`) all ask it. A model carries no kind: an evaluation is handed its kind
in its context (:class:`~cel_lens.evaluation.context.EvalContext`; zero unless given).

Two ways to run ablations:

* one head set: :func:`ablate` (context manager) or :func:`ablation_hooks` (``fwd_hooks`` list);
* V head sets over the same inputs in one pass: :func:`variant_hooks` with inputs repeated
  variant-major along the batch (row ``v * batch + b``), or :func:`run_variants`, which does it all.

Both TransformerLens model types work: ``HookedTransformer`` and ``TransformerBridge`` (where
``hook_z`` is the input of the Hugging Face ``o_proj``, reshaped per head).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence, Union

import einops
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from cel_lens.config import ABLATION_KINDS
from cel_lens.heads import HeadSet, HeadsLike, masks_from_head_sets
from cel_lens.model.bos import prompt_ids
from cel_lens.model.forward import Hook, check_hooks, forward_resid, param_device, unembed
from cel_lens.model.model_types import is_bridge, model_name, model_shape
from cel_lens.model.processing import warn_if_processed

__all__ = [
    "hook_z_name", "Ablation", "ZeroAblation", "ABLATION_KINDS", "ZERO",
    "ablation_kind", "fit_ablation", "ablation_from_state",
    "ablation_hooks", "ablate", "variant_hooks", "prompt_tokens", "run_variants",
]

def hook_z_name(layer: int) -> str:
    """TransformerLens name of the per-head attention output of ``layer``."""
    return f"blocks.{layer}.attn.hook_z"


class Ablation:
    """An ablation kind: what replaces ``z`` of an ablated head. Subclasses set :attr:`name` and
    :meth:`values` (and :meth:`fit` with ``learns`` when they learn from D_dist); what export does
    with a kind is :meth:`folds_into_bias`; everything else is shared, and nothing outside the kind
    tests its name."""

    name = "zero"
    learns = False  # True: fit() learns from the D_dist prompts (so a run records the result)

    @classmethod
    def fit(
        cls, model: Any, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"], seed: int = 0
    ) -> "Ablation":
        """The kind's ablation for ``model``, learnt from D_dist prompts (right padded, mask 1 =
        real token); kinds that learn nothing ignore the inputs."""
        return cls()

    def values(self, z: Float[Tensor, "row pos head d_head"], layer: int) -> Tensor:
        """What replaces ``z`` at ``layer``, broadcastable to ``z``'s shape."""
        return torch.zeros((), dtype=z.dtype, device=z.device)

    @classmethod
    def folds_into_bias(cls) -> bool:
        """Whether export writes this kind by folding its :meth:`constant` into the output bias
        (refused where that is not exact): every kind but this base class, the zero kind, which
        needs only the zeroed ``o_proj`` columns (a subclass replaces ``z`` by something else)."""
        return cls is not Ablation

    def constant(self, layer: int, n_heads: int, d_head: int) -> Optional[Float[Tensor, "head d_head"]]:
        """The per-head replacement when it is the same at every position and in every row
        (export folds it into the ``o_proj`` bias), else ``None``."""
        return torch.zeros(n_heads, d_head)

    def record(self) -> dict[str, Any]:
        """What the run records of this ablation (its identity)."""
        return {"kind": self.name}

    def state(self) -> dict[str, Any]:
        """:meth:`record` plus whatever :func:`ablation_from_state` needs to rebuild it."""
        return self.record()

    def replace(self, z: Tensor, layer: int, ablated: Bool[Tensor, "row head"]) -> Tensor:
        """``z`` (``[row, pos, head, d_head]``, or flattened ``[row, pos, head * d_head]``) with the
        heads where ``ablated`` is True replaced; ``ablated`` broadcasts over rows with one row."""
        n_heads = ablated.shape[-1]
        if z.ndim == 3:
            heads = einops.rearrange(z, "rows pos (head d) -> rows pos head d", head=n_heads)
            return einops.rearrange(self.replace(heads, layer, ablated), "rows pos head d -> rows pos (head d)")
        if z.ndim != 4:
            raise ValueError(f"unexpected hook_z shape {tuple(z.shape)}")
        return torch.where(ablated.to(z.device)[:, None, :, None], self.values(z, layer), z)

    def head_hooks(self, heads: HeadSet, n_heads: Optional[int] = None) -> list[Hook]:
        """``fwd_hooks`` ablating ``heads`` (see :func:`ablation_hooks`)."""
        hooks: list[Hook] = []
        for layer in heads.layers:
            idx = tuple(h.head for h in heads if h.layer == layer)

            def hook(z: Tensor, hook=None, idx=idx, layer=layer) -> Tensor:  # noqa: ANN001 - TL hook signature
                width = z.shape[2] if z.ndim == 4 else n_heads
                if width is None:
                    raise ValueError("flattened hook_z needs n_heads; pass ablation_hooks(heads, n_heads=...)")
                bad = [f"L{layer}H{h}" for h in idx if h >= width]
                if bad:
                    raise ValueError(f"head(s) {', '.join(bad)} out of range for {hook_z_name(layer)}: heads 0..{width - 1}")
                ablated = torch.zeros(1, width, dtype=torch.bool, device=z.device)
                ablated[0, list(idx)] = True
                return self.replace(z, layer, ablated)

            hooks.append((hook_z_name(layer), hook))
        return hooks

    def variant_hooks(self, masks: Bool[Tensor, "variant layer head"], batch: int) -> list[Hook]:
        """``fwd_hooks`` for V masks over inputs repeated variant-major (see :func:`variant_hooks`)."""
        if masks.ndim != 3:
            raise ValueError(f"masks must be [variant, layer, head], got {tuple(masks.shape)}")
        n_variants = masks.shape[0]
        hooks: list[Hook] = []
        for layer in range(masks.shape[1]):
            if not bool(masks[:, layer, :].any()):
                continue
            rows = einops.repeat(masks[:, layer, :], "v head -> (v b) head", b=batch)

            def hook(z: Tensor, hook=None, rows=rows, layer=layer) -> Tensor:  # noqa: ANN001
                if z.shape[0] != n_variants * batch:
                    raise ValueError(
                        f"batch of {z.shape[0]} rows does not match {n_variants} variants x {batch} inputs"
                    )
                return self.replace(z, layer, rows)

            hooks.append((hook_z_name(layer), hook))
        return hooks

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


ZeroAblation = Ablation
"""The paper's zero ablation (the base kind)."""
ZERO = Ablation()
"""The default ablation."""


def ablation_kind(name: str) -> type[Ablation]:
    """The class of the ablation kind ``name`` (imported when first asked for); one-line
    ``ValueError`` naming the kinds otherwise."""
    return ABLATION_KINDS.resolve(name)


def fit_ablation(
    kind: str, model: Any, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"], seed: int = 0
) -> Ablation:
    """The ``kind`` ablation of ``model`` learnt from D_dist prompts (zero learns nothing)."""
    return ablation_kind(kind).fit(model, tokens, attention_mask, seed)


def ablation_from_state(state: dict[str, Any]) -> Ablation:
    """An ablation rebuilt from :meth:`record`/``state()`` (a learnt kind needs its ``table``)."""
    cls = ablation_kind(state["kind"])
    if "table" not in state:
        return cls()
    info = {k: v for k, v in state.items() if k not in ("kind", "table", "sha256")}
    return cls(torch.tensor(state["table"], dtype=torch.float32), **info)  # type: ignore[call-arg]


def ablation_hooks(
    heads: HeadsLike, n_heads: Optional[int] = None, *, model: Any = None, kind: Optional[Ablation] = None
) -> list[Hook]:
    """TransformerLens ``fwd_hooks`` that ablate ``hook_z`` of every head in ``heads`` (``kind``:
    default zero).

    With ``model`` the heads are checked against it first ("out of range ... layers 0..L-1, heads
    0..H-1", as :func:`ablate` says); without it a head beyond the layer's heads is named when the
    hook runs. ``n_heads`` is only needed for models whose ``hook_z`` is flattened to
    ``[.., head * d_head]`` (it is read from ``model`` or the tensor's shape otherwise).
    """
    head_set = HeadSet.parse(heads)
    if model is not None:
        n_layers, n_heads = model_shape(model)
        head_set.validate(n_layers, n_heads, model_name(model))
    return (kind or ZERO).head_hooks(head_set, n_heads)


@contextmanager
def ablate(model: Any, heads: HeadsLike, kind: Optional[Ablation] = None) -> Iterator:
    """Context manager: inside it, every forward pass of ``model`` runs with ``heads`` ablated
    (``kind``: default zero).

    >>> with ablate(model, "L3H1+L12H7"):
    ...     logits = model(tokens)

    Hooks are removed on exit, also when the body raises (and by ``model.reset_hooks()``).
    """
    hooks = ablation_hooks(heads, model=model, kind=kind)
    warn_if_processed(model, stacklevel=5)  # past the generator and contextlib's __enter__
    with model.hooks(fwd_hooks=check_hooks(model, hooks)):
        yield model


def variant_hooks(masks: Bool[Tensor, "variant layer head"], batch: int, kind: Optional[Ablation] = None) -> list[Hook]:
    """``fwd_hooks`` applying V masks (True = ablated, by ``kind``, default zero) to inputs
    repeated variant-major along the batch.

    The forward batch must have ``V * batch`` rows, row ``v * batch + b`` being input ``b`` under
    variant ``v``. Layers where no variant ablates anything get no hook at all.
    """
    return (kind or ZERO).variant_hooks(masks, batch)


def prompt_tokens(model, prompts: Union[str, Sequence[str]]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Token ids and attention mask of one prompt or a list of prompts, as cel_lens reads a prompt
    (:func:`~cel_lens.model.bos.prompt_ids`: the model's BOS rule, then the text's tokens); several
    prompts are padded on the right (mask 0 there)."""
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("expected token ids [batch, pos], a prompt string or a list of prompt strings")
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ValueError(f"{model_name(model)} has no tokenizer: pass token ids instead of strings")
    device = param_device(model)
    rows = [torch.tensor(prompt_ids(model, t), dtype=torch.long, device=device) for t in texts]
    width = max(len(r) for r in rows)
    pad = next((int(v) for v in (tok.pad_token_id, tok.eos_token_id, 0) if v is not None), 0)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long, device=rows[0].device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=rows[0].device)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return tokens, mask


def run_variants(
    model,
    tokens: Union[Int[Tensor, "batch pos"], str, Sequence[str]],
    head_sets: Sequence[HeadsLike],
    *,
    positions: Optional[Int[Tensor, "batch k"]] = None,
    attention_mask: Optional[Int[Tensor, "batch pos"]] = None,
    kind: Optional[Ablation] = None,
) -> Float[Tensor, "variant batch k d_vocab"]:
    """Logits of ``tokens`` under each head set, in one forward pass: ``[V, batch, pos, vocab]``.

    ``positions`` (``[batch, k]`` indices) unembeds only those positions, giving
    ``[V, batch, k, vocab]``. The layers below the lowest one any variant ablates run once, not
    V times; from there it is :func:`~cel_lens.model.forward.forward_resid` with ``variants``,
    the one ablated forward every evaluation takes. ``tokens`` may be a prompt string or a list of
    them (:func:`prompt_tokens`: as ``model("text")`` reads it; a list is right padded). A single
    head set (``"L0H1+L2H0"``) counts as a list of one. ``kind``: the ablation (default zero).
    """
    if isinstance(head_sets, (str, HeadSet)):
        head_sets = [head_sets]
    if not isinstance(tokens, Tensor):
        tokens, mask = prompt_tokens(model, tokens)
        if attention_mask is None and not bool(mask.all()):
            attention_mask = mask
    n_layers, n_heads = model_shape(model)
    name = model_name(model)
    sets = [HeadSet.parse(s).validate(n_layers, n_heads, name) for s in head_sets]
    if not sets:
        raise ValueError("run_variants needs at least one head set")
    warn_if_processed(model)
    masks = masks_from_head_sets(sets, n_layers, n_heads)
    first = min((s.first_layer for s in sets if s), default=n_layers)
    if is_bridge(model):
        first = 0  # no resuming on a bridge: one pass over the repeated batch beats prefix + full pass
    with torch.no_grad():
        x = tokens if first == 0 else forward_resid(model, tokens, stop_at_layer=first, attention_mask=attention_mask)
        resid = forward_resid(
            model, x, start_at_layer=first, attention_mask=attention_mask, variants=masks,
            ablation=kind or ZERO,
        )
    return _unembed_variants(model, resid, len(sets), positions)


def _unembed_variants(
    model,
    resid: Float[Tensor, "vb pos d_model"],
    n_variants: int,
    positions: Optional[Int[Tensor, "batch k"]],
) -> Float[Tensor, "variant batch k d_vocab"]:
    """Split the variant-major rows and unembed all positions, or only ``positions``."""
    resid = einops.rearrange(resid, "(v b) pos d -> v b pos d", v=n_variants)
    if positions is not None:
        idx = einops.repeat(positions.to(resid.device), "b k -> v b k d", v=n_variants, d=resid.shape[-1])
        resid = resid.gather(2, idx)
    return unembed(model, resid)

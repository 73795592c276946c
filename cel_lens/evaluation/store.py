"""ActivationStore: the intact residual stream of a split, kept so ablated passes can resume.

An ablation whose first ablated head is in layer ``l`` leaves layers ``0 .. l-1`` untouched, so a
pass can start at ``l`` from the intact residual stream entering it (``blocks.{l}.hook_resid_pre``)
instead of from the tokens. The store runs the intact model once over the split's teacher-forced
encoding (:func:`cel_lens.evaluation.encode_split`), keeps that residual stream at a set of layers
together with the intact per-row results, and :func:`cel_lens.evaluation.evaluate` (``store=``)
resumes each variant from the nearest stored layer at or below its first ablated layer.

Memory: one layer costs ``sum(rows x positions) x d_model x itemsize`` bytes over the split.
``budget_bytes`` caps the total: when every layer does not fit, an evenly spaced subset is kept.
Layer 0 is always available at no cost: its residual stream is the token embedding, recomputed
from the tokens rather than stored. ``dtype=torch.float16`` halves the memory (resumed passes then
differ from full ones within half-precision rounding); ``path=`` memory-maps the buffer to a file
in that directory (deleted by :meth:`ActivationStore.close`, on exit from a ``with`` block, or when
the store is garbage-collected). HookedTransformers and TransformerBridges over Hugging Face
decoder stacks resume (:func:`cel_lens.model.supports_resume`); a model that cannot gets a store
without layers: intact results are reused and every ablated variant runs a full, correct pass.
"""

from __future__ import annotations

import math
import os
import tempfile
import weakref
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from cel_lens.evaluation.batch import EncodedBatch
from cel_lens.evaluation.encode import as_split, chat_choice, encode_split
from cel_lens.evaluation.teacher_forced import batch_pass, intact_mask
from cel_lens.model.ablation import ZERO
from cel_lens.model.model_types import model_shape, supports_resume
from cel_lens.progress import progress_bar
from cel_lens.tasks.base import Split

__all__ = ["ActivationStore", "StoreView", "select_layers", "store_layers"]


def select_layers(candidates: Sequence[int], n_fit: int) -> list[int]:
    """``n_fit`` of the sorted layers ``candidates`` (all > 0), evenly spaced with layer 0 counted as
    the first point: with ``candidates = 1..L-1`` this is ``round(i * L / (n_fit + 1))``."""
    cands = sorted(set(int(c) for c in candidates))
    if n_fit >= len(cands):
        return cands
    if n_fit <= 0:
        return []
    m = len(cands) + 1
    picked = {cands[max(0, min(len(cands) - 1, round(i * m / (n_fit + 1)) - 1))] for i in range(1, n_fit + 1)}
    return sorted(picked)


def store_layers(
    batches: Sequence[EncodedBatch],
    candidates: Sequence[int],
    d_model: int,
    itemsize: int,
    budget_bytes: Optional[int],
) -> list[int]:
    """The layers a store of ``batches`` keeps: every candidate when no ``budget_bytes`` is given or
    they all fit, else as many as fit, evenly spaced (:func:`select_layers`). The one rule for the
    store's memory, shared by the local store and the Ray backend's shards."""
    per_layer = itemsize * sum(math.prod(s) for b in batches for s in b.part_shapes(d_model))
    n_fit = len(candidates)
    if budget_bytes is not None and per_layer > 0:
        n_fit = min(n_fit, int(budget_bytes) // per_layer)
    return select_layers(candidates, n_fit)


def _candidate_layers(layers: Union[str, Sequence[int]], n_layers: int) -> list[int]:
    if layers == "all":
        return list(range(1, n_layers))
    if isinstance(layers, str):
        raise ValueError(f"layers must be 'all' or a list of layer indices, got {layers!r}")
    bad = [l for l in layers if not 0 <= int(l) < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range 0..{n_layers - 1}")
    return sorted({int(l) for l in layers} - {0})


Offsets = dict[tuple[int, int], list[tuple[int, tuple[int, ...]]]]


def _layout(batches: Sequence[EncodedBatch], stored: Sequence[int], d_model: int) -> tuple[Offsets, int]:
    """Where each (batch, layer)'s parts sit in one flat buffer (slot per stored layer, then batch,
    then part, contiguous), and the buffer's size in elements."""
    offsets: Offsets = {}
    cursor = 0
    for layer in stored:
        for b, batch in enumerate(batches):
            entry = []
            for shape in batch.part_shapes(d_model):
                entry.append((cursor, shape))
                cursor += math.prod(shape)
            offsets[(b, layer)] = entry
    return offsets, cursor


def _allocate(
    size: int, dtype: torch.dtype, path: Optional[Union[str, os.PathLike]], device: Union[str, torch.device]
) -> tuple[Optional[Tensor], Optional[str]]:
    """A flat buffer of ``size`` elements: in RAM (on ``device``), or memory-mapped to a new file in
    directory ``path``; ``(None, None)`` when nothing is stored."""
    if size == 0:
        return None, None
    if path is None:
        return torch.empty(size, dtype=dtype, device=device), None
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    fd, file = tempfile.mkstemp(prefix="cel_lens_store_", suffix=".bin", dir=directory)
    try:
        os.ftruncate(fd, size * torch.empty((), dtype=dtype).element_size())
    finally:
        os.close(fd)
    return torch.from_file(file, shared=True, size=size, dtype=dtype), file


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ActivationStore:
    """Intact residual streams (``resid_pre``) of one split at a set of layers, plus the intact
    per-row results and the encoding they belong to. Build with :meth:`build`."""

    def __init__(
        self,
        *,
        model,
        split: Split,
        chat_template: bool,
        batches: list[EncodedBatch],
        stored_layers: list[int],
        resumable: bool,
        buffer: Optional[Tensor],
        offsets: Offsets,
        intact_lp: list[Tensor],
        intact_greedy: list[Tensor],
        file: Optional[str],
    ) -> None:
        self._model_ref = weakref.ref(model)
        self.split_name = split.name
        self.task = split.task
        self.split_hash = split.content_hash
        self.n_examples = len(split)
        self.chat_template = chat_template
        self.batches = batches
        self._stored = list(stored_layers)
        self.resumable = resumable
        self._buffer = buffer
        self._offsets = offsets
        self._intact_lp = intact_lp
        self._intact_greedy = intact_greedy
        self.path: Optional[Path] = Path(file) if file else None
        self._finalizer = weakref.finalize(self, _unlink, file) if file else None

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        model,
        split: Split,
        *,
        layers: Union[str, Sequence[int]] = "all",
        budget_bytes: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
        path: Optional[Union[str, os.PathLike]] = None,
        batch_size: int = 8,
        progress: bool = True,
        chat_template: Optional[bool] = None,
        device: Union[str, torch.device] = "cpu",
        max_tokens: Optional[int] = None,
        share_prefix: bool = False,
    ) -> "ActivationStore":
        """Run the intact model once over ``split`` and keep its residual stream.

        ``layers``: ``"all"`` or the layers to keep (layer 0 is always available for free);
        ``budget_bytes``: cap on the residual-stream bytes (an evenly spaced subset of ``layers``
        when they do not all fit); ``dtype``: storage dtype (default: the model's); ``path``: a
        directory in which to memory-map the buffer instead of holding it in RAM; ``device``: where
        an in-RAM buffer lives (``"cuda"`` avoids host-device copies when memory allows);
        ``batch_size``/``max_tokens``/``share_prefix``: the batching (:func:`~cel_lens.evaluation.encode_split`).
        """
        split = as_split(split)
        n_layers, _ = model_shape(model)
        dtype = dtype or next(model.parameters()).dtype
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        chat = chat_choice(split, chat_template)
        batches = encode_split(model, split, batch_size, chat_template=chat, max_tokens=max_tokens, share_prefix=share_prefix)
        resumable = supports_resume(model)
        candidates = _candidate_layers(layers, n_layers) if resumable else []
        itemsize = torch.empty((), dtype=dtype).element_size()
        stored = store_layers(batches, candidates, int(model.cfg.d_model), itemsize, budget_bytes)
        offsets, size = _layout(batches, stored, int(model.cfg.d_model))
        buffer, file = _allocate(size, dtype, path, device)
        store = cls(
            model=model, split=split, chat_template=chat, batches=batches, stored_layers=stored,
            resumable=resumable, buffer=buffer, offsets=offsets, intact_lp=[], intact_greedy=[], file=file,
        )
        try:
            store._fill(model, progress)
        except BaseException:
            store.close()
            raise
        return store

    def _fill(self, model, progress: bool) -> None:
        """Run the intact model over every batch once, keeping its results and residual streams."""
        n_layers, n_heads = model_shape(model)
        with progress_bar(len(self.batches), progress, f"store {self.task}/{self.split_name}", unit="batch") as bar:
            with torch.inference_mode():
                for b, batch in enumerate(self.batches):
                    sink: dict = {}
                    lp, greedy = batch_pass(model, batch, intact_mask(n_layers, n_heads), 0, None, self._stored, sink, ablation=ZERO)
                    self._intact_lp.append(lp[0])
                    self._intact_greedy.append(greedy[0])
                    for layer in self._stored:
                        for part, view in enumerate(self._views(b, layer)):
                            if view.numel():
                                view.copy_(sink[(part, layer)].reshape(view.shape))
                    bar.update(1)

    # -- queries ---------------------------------------------------------------------------------
    @property
    def layers(self) -> tuple[int, ...]:
        """Layers a pass can resume from: 0 (recomputed from tokens) and the stored ones."""
        return tuple([0] + self._stored)

    @property
    def model(self) -> Any:
        """The model this store was built for (``None`` once it is gone)."""
        return self._model_ref()

    @property
    def stored_layers(self) -> tuple[int, ...]:
        """Layers whose residual stream is held in the buffer."""
        return tuple(self._stored)

    @property
    def bytes_used(self) -> int:
        """Bytes of the residual-stream buffer (in RAM or on disk)."""
        if self._buffer is None:
            return 0
        return self._buffer.numel() * self._buffer.element_size()

    @property
    def dtype(self) -> Optional[torch.dtype]:
        """Storage dtype (None when nothing is stored)."""
        return None if self._buffer is None else self._buffer.dtype

    def nearest_layer(self, layer: int) -> int:
        """The largest available layer ``<= layer`` (0 at worst)."""
        return max(l for l in self.layers if l <= layer)

    def _views(self, batch: int, layer: int) -> list[Tensor]:
        if self._buffer is None:
            raise RuntimeError("this store holds no residual streams (closed, or nothing stored)")
        return [self._buffer[o : o + math.prod(s)].view(s) for o, s in self._offsets[(batch, layer)]]

    def sources(self, batch: int, layer: int) -> list[Float[Tensor, "row pos d_model"]]:
        """The intact residual streams entering stored ``layer`` for batch ``batch`` (one tensor per
        part of the batch's layout)."""
        if layer not in self._stored:
            raise KeyError(f"layer {layer} is not stored (stored: {self._stored})")
        return self._views(batch, layer)

    def intact_rows(self, batch: int) -> tuple[Float[Tensor, " row"], Bool[Tensor, " row"]]:
        """Intact summed target log-prob and all-greedy flag of each row of batch ``batch``."""
        return self._intact_lp[batch], self._intact_greedy[batch]

    def check(self, model, split: Split, chat_template: bool) -> None:
        """Raise ``ValueError`` unless this store belongs to ``model``, ``split`` and the same
        chat-template choice."""
        if self._model_ref() is not model:
            raise ValueError("this ActivationStore was built for another model object")
        if split.content_hash != self.split_hash:
            raise ValueError(
                f"this ActivationStore was built for split {self.task}/{self.split_name} "
                f"({self.n_examples} examples), not for {split.task}/{split.name} ({len(split)} examples)"
            )
        if bool(chat_template) != self.chat_template:
            raise ValueError(
                f"this ActivationStore was built with chat_template={self.chat_template}, "
                f"evaluation asks for chat_template={bool(chat_template)}"
            )

    def view(self, examples: Sequence[int]) -> "StoreView":
        """The store of the split's ``examples`` (indices, ascending) alone, as a split of
        ``len(examples)`` examples in that order: each batch holding any of them restricted to
        them at its padded width (:meth:`EncodedBatch.select`), its stored streams sliced to
        match. A pass resumed from it computes those rows as one resumed from the whole store
        does; what a float32 re-check of a few decisions resumes from. Not for batches with a
        shared prefix."""
        where = {int(e): i for i, e in enumerate(examples)}
        parts = []
        for b, batch in enumerate(self.batches):
            local = [j for j, e in enumerate(batch.example_index.tolist()) if e in where]
            if local:
                sub, index = batch.select(local, [where[int(batch.example_index[j])] for j in local])
                parts.append((b, sub, index))
        return StoreView(self, parts)

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the buffer and delete its memory-mapped file, if any."""
        self._buffer = None
        self._stored = []
        self._offsets = {}
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "ActivationStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"file {self.path}" if self.path else "memory"
        return (
            f"ActivationStore({self.task}/{self.split_name}, {self.n_examples} examples, layers {list(self.layers)}, "
            f"{self.bytes_used / 2**20:.1f} MiB in {where})"
        )


class StoreView:
    """Some examples of an :class:`ActivationStore`'s split, read as a store of their own
    (:meth:`ActivationStore.view`): ``batches``, ``resumable``, ``layers``, :meth:`nearest_layer`,
    :meth:`sources` and :meth:`intact_rows`, each the whole store's restricted to those examples."""

    def __init__(self, store: ActivationStore, parts: list[tuple[int, EncodedBatch, list[Tensor]]]) -> None:
        self._store = store
        self._parts = parts
        self.batches = [sub for _, sub, _ in parts]
        self.resumable = store.resumable
        self.layers = store.layers

    def nearest_layer(self, layer: int) -> int:
        """The whole store's :meth:`ActivationStore.nearest_layer`."""
        return self._store.nearest_layer(layer)

    def sources(self, batch: int, layer: int) -> list[Float[Tensor, "row pos d_model"]]:
        """The stored streams entering ``layer`` of this view's batch ``batch``, its rows only."""
        b, _, index = self._parts[batch]
        return [part[i] for part, i in zip(self._store.sources(b, layer), index)]

    def intact_rows(self, batch: int) -> tuple[Float[Tensor, " row"], Bool[Tensor, " row"]]:
        """The intact results of this view's batch ``batch``'s rows."""
        b, _, index = self._parts[batch]
        lp, greedy = self._store.intact_rows(b)
        return lp[index[-1]], greedy[index[-1]]

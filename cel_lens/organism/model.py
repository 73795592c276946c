"""The organism as a model: its word-level tokenizer, its architecture, saving and loading.

A one-layer, attention-only ``HookedTransformer`` (no normalization, learned absolute positions),
stored as a TransformerLens-native checkpoint (:mod:`cel_lens.model.native`): the shipped one is
``cel_lens.load_model("organism")``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union

from torch import Tensor

from cel_lens.model.load import load_model
from cel_lens.model.native import build_hooked, save_native
from cel_lens.model.registry import ORGANISM_DIR
from cel_lens.tasks.organism import TOKEN_ID, ORGANISM_TASK, SIDE_TASK, VOCAB, OrganismConfig

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

    from cel_lens.model.types import HookedTransformer

__all__ = [
    "ORGANISM_DIR",
    "build_tokenizer",
    "load_tokenizer",
    "hooked_config",
    "build_model",
    "save_organism",
    "load_organism",
    "organism_info",
]


def build_tokenizer() -> "PreTrainedTokenizerFast":
    """A word-level ``PreTrainedTokenizerFast`` over :data:`VOCAB` (split on whitespace only, so
    ``"u+"`` is one token and ``" pos"`` encodes to ``pos``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=dict(TOKEN_ID), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="right",
    )


def load_tokenizer(path: Union[str, Path, None] = None) -> "PreTrainedTokenizerBase":
    """The saved tokenizer (``AutoTokenizer.from_pretrained``; TransformerLens re-reads a
    tokenizer by its ``name_or_path``, so it must live in a directory)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(path or ORGANISM_DIR / "tokenizer")))


def hooked_config(config: OrganismConfig = OrganismConfig()) -> dict[str, Any]:
    """The ``HookedTransformerConfig`` fields of an organism: one attention-only layer, no
    normalization (so each head's direct logit attribution is exact), learned absolute positions."""
    return dict(
        n_layers=1,
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_head=config.d_head,
        n_ctx=config.n_ctx,
        d_vocab=len(VOCAB),
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        model_name="cel-lens-organism",
        default_prepend_bos=True,
        tokenizer_prepends_bos=False,
        init_weights=False,
    )


def build_model(
    state: Mapping[str, Tensor], config: OrganismConfig, tokenizer: Any = None, device: str = "cpu"
) -> "HookedTransformer":
    """A ``HookedTransformer`` holding ``state`` (TransformerLens parameter names), in eval mode."""
    tokenizer = tokenizer if tokenizer is not None else _default_tokenizer()
    model = build_hooked(hooked_config(config), tokenizer=tokenizer, state=state, device=device, padding_side="right")
    model.organism_config = config
    return model


def _default_tokenizer() -> "PreTrainedTokenizerBase":
    path = ORGANISM_DIR / "tokenizer"
    if path.is_dir():
        return load_tokenizer(path)
    import tempfile

    tmp = tempfile.mkdtemp(prefix="cel_lens_organism_tok_")
    build_tokenizer().save_pretrained(tmp)
    return load_tokenizer(tmp)


def save_organism(model: "HookedTransformer", out_dir: Union[str, Path], *, config: OrganismConfig, seed: int, log: Any = None) -> Path:
    """Write the organism as a native checkpoint (``model.safetensors``, ``config.json`` with the
    organism config, seed and TransformerLens config, ``tokenizer/``) and, with ``log``,
    ``training_log.json`` to ``out_dir``."""
    extra = {"organism": config.to_dict(), "seed": seed, "tasks": {"organism": ORGANISM_TASK, "side": SIDE_TASK}}
    out = save_native(model, out_dir, extra)
    if log is not None:
        (out / "training_log.json").write_text(json.dumps(log if isinstance(log, dict) else log.to_dict()) + "\n")
    return out


def load_organism(device: str = "cpu", path: Union[str, Path, None] = None) -> "HookedTransformer":
    """The shipped organism (or the one saved in ``path``) as a ``HookedTransformer`` with its
    word-level tokenizer, in eval mode (``cel_lens.load_model("organism")``, plus its config)."""
    root = Path(path) if path is not None else ORGANISM_DIR
    if not (root / "model.safetensors").is_file():
        raise FileNotFoundError(f"no organism weights at {root}; run 'cel-lens organism train --seed S --out DIR'")
    model = load_model("organism" if path is None else root, device=device)
    model.organism_config = OrganismConfig.from_dict(json.loads((root / "config.json").read_text())["organism"])
    return model


def organism_info(path: Union[str, Path, None] = None) -> dict[str, Any]:
    """The saved organism's config, seed and file sizes (for ``cel-lens organism info``)."""
    root = Path(path) if path is not None else ORGANISM_DIR
    if not (root / "config.json").is_file():
        raise FileNotFoundError(f"no organism at {root}")
    meta = json.loads((root / "config.json").read_text())
    files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
    meta["files"] = files
    meta["total_bytes"] = sum(files.values())
    meta["path"] = str(root)
    return meta

"""Building TransformerLens models from Hugging Face checkpoints (no network: files are local).

A ``HookedTransformer`` comes from TransformerLens's own config derivation and weight conversion
(``from_pretrained`` for names it knows, the same steps for a local directory); a
``TransformerBridge`` wraps the Hugging Face module itself, with raw weights unless processing is
asked for. See :mod:`cel_lens.model.load` for which processing keeps ablation exact.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from pathlib import Path
from typing import Optional, Union

import torch

from cel_lens.model.hooked_fields import check_hooked_config

__all__ = ["load_tokenizer", "load_hf", "quiet", "hooked_from_hf", "bridge_from_hf"]


def load_tokenizer(source: Union[str, Path], trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{source} has no usable tokenizer: {str(err).splitlines()[0]}") from err


def load_hf(source: Path, dtype: torch.dtype, trust_remote_code: bool):
    """The Hugging Face model (eager attention, so attention hooks see the pattern) and tokenizer
    from a local directory; nothing here touches the network."""
    from transformers import AutoModelForCausalLM

    with quiet():
        try:
            hf_model = AutoModelForCausalLM.from_pretrained(
                str(source),
                dtype=dtype,
                attn_implementation="eager",
                trust_remote_code=trust_remote_code,
                local_files_only=True,
            )
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"cannot load {source} as a causal language model: {str(err).splitlines()[0]}") from err
    hf_model.eval()
    for p in hf_model.parameters():
        p.requires_grad_(False)
    return hf_model, load_tokenizer(source, trust_remote_code)


@contextlib.contextmanager
def quiet():
    """Silence TransformerLens's prints, deprecation notices and progress bars while loading."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def hooked_from_hf(source: Path, hf_model, tokenizer, official: Optional[str], device: str, dtype, processing, tl_kwargs):
    """A HookedTransformer from an already-loaded HF model: ``from_pretrained`` for names
    TransformerLens knows; for a local directory the same steps (config derivation, weight
    conversion, processing) that ``from_pretrained`` runs, which does not accept paths."""
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading

    arch = (getattr(hf_model.config, "architectures", None) or [type(hf_model).__name__])[0]
    check_hooked_config(arch, hf_model.config.to_dict(), str(official or source))
    if official is not None:
        with quiet():
            return HookedTransformer.from_pretrained(
                official,
                hf_model=hf_model,
                tokenizer=tokenizer,
                device=device,
                dtype=dtype,
                local_files_only=True,
                **processing,
                **tl_kwargs,
            )
    with tempfile.TemporaryDirectory(prefix="cel_lens_") as tmp:
        # TransformerLens guesses the architecture from substrings ("llama", "gemma") of the name
        # before reading config.json; a neutral link name makes it read the config.
        link = Path(tmp) / "checkpoint"
        if any(word in str(link).lower() for word in ("llama", "gemma")):
            raise RuntimeError(f"temporary directory {tmp} confuses TransformerLens's name heuristics; set TMPDIR")
        link.symlink_to(source, target_is_directory=True)
        try:
            with quiet():
                cfg = loading.get_pretrained_model_config(
                    str(link),
                    hf_cfg=hf_model.config.to_dict(),
                    fold_ln=processing["fold_ln"],
                    device=device,
                    dtype=dtype,
                    local_files_only=True,
                    **{k: v for k, v in tl_kwargs.items() if k in ("n_ctx", "first_n_layers", "default_prepend_bos")},
                )
                state_dict = loading.get_pretrained_state_dict(str(link), cfg, hf_model, dtype=dtype)
        except (ValueError, KeyError, AttributeError, UnboundLocalError, NotImplementedError) as err:
            raise ValueError(
                f"TransformerLens's HookedTransformer cannot convert {arch} ({source}); use loader='bridge'"
            ) from err
    cfg.model_name = source.name
    flags = dict(processing)
    if flags["center_unembed"] and (getattr(cfg, "output_logits_soft_cap", -1.0) or -1.0) > 0:
        flags["center_unembed"] = False  # as from_pretrained: centering is wrong under a soft cap
    with quiet():
        model = HookedTransformer(
            cfg, tokenizer, move_to_device=False, default_padding_side=tl_kwargs.get("default_padding_side")
        )
        model.load_and_process_state_dict(state_dict, **flags)
        model.move_model_modules_to_device()
    return model


def bridge_from_hf(source_id: str, hf_model, tokenizer, device: str, dtype, processing, tl_kwargs):
    """A TransformerBridge around the HF model: raw weights unless processing was asked for."""
    from transformer_lens.model_bridge import TransformerBridge

    hf_model = hf_model.to(device)  # boot_transformers leaves a given hf_model where it is
    with quiet():
        bridge = TransformerBridge.boot_transformers(
            source_id, hf_model=hf_model, tokenizer=tokenizer, device=device, dtype=dtype, **tl_kwargs
        )
        wanted = {k: processing[k] for k in ("fold_ln", "center_writing_weights", "center_unembed")}
        if any(wanted.values()):
            bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False, **wanted)
        else:
            bridge.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    return bridge

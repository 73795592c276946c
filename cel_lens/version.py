"""The version of cel_lens (one place; the package root and run manifests read it)."""

__version__ = "0.1.0"
"""The installed version (the same as ``pyproject.toml``'s); run manifests and an export's provenance record it."""

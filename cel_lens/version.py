"""The version of cel_lens (one place; the package root and run manifests read it)."""

__version__ = "0.1.0"

"""Deprecated: ``cel_lens.demo`` moved to ``cel_lens.organism.demo`` (this module stays for one release)."""

import warnings

from cel_lens.organism.demo import (  # noqa: F401
    run_demo,
)

__all__ = ['run_demo']

warnings.warn("cel_lens.demo is deprecated; use cel_lens.organism.demo", DeprecationWarning, stacklevel=2)

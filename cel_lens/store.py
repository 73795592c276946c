"""Deprecated: ``cel_lens.store`` moved to ``cel_lens.evaluation.store`` (this module stays for one release)."""

import warnings

from cel_lens.evaluation.store import (  # noqa: F401
    ActivationStore,
    select_layers,
)

__all__ = ['ActivationStore', 'select_layers']

warnings.warn("cel_lens.store is deprecated; use cel_lens.evaluation", DeprecationWarning, stacklevel=2)

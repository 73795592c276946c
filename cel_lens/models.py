"""Deprecated: ``cel_lens.models`` moved to ``cel_lens.model.registry``, ``cel_lens.model.load``, ``cel_lens.model.hub``, ``cel_lens.model.identity``, ``cel_lens.model.kinds`` (this module stays for one release)."""

import warnings

from cel_lens.model.registry import (  # noqa: F401
    ModelSpec,
    PAPER_MODELS,
    tl_official_name,
)
from cel_lens.model.load import (  # noqa: F401
    PROCESSING_DEFAULTS,
    load_model,
)
from cel_lens.model.hub import (  # noqa: F401
    resolve_checkpoint,
)
from cel_lens.model.identity import (  # noqa: F401
    model_id,
    weights_hash,
)
from cel_lens.model.kinds import (  # noqa: F401
    is_bridge,
)

__all__ = ['ModelSpec', 'PAPER_MODELS', 'PROCESSING_DEFAULTS', 'is_bridge', 'load_model', 'model_id', 'resolve_checkpoint', 'tl_official_name', 'weights_hash']

warnings.warn("cel_lens.models is deprecated; use cel_lens.model", DeprecationWarning, stacklevel=2)

"""Deprecated: ``cel_lens.ablation`` moved to ``cel_lens.model.ablation``, ``cel_lens.model.forward``, ``cel_lens.model.kinds`` (this module stays for one release)."""

import warnings

from cel_lens.model.ablation import (  # noqa: F401
    hook_z_name,
    ablation_hooks,
    ablate,
    variant_hooks,
    run_variants,
)
from cel_lens.model.forward import (  # noqa: F401
    forward_resid,
    unembed,
    init_kv_cache,
    select_kv_cache,
    forward_resid_cached,
)
from cel_lens.model.kinds import (  # noqa: F401
    model_shape,
)

__all__ = ['ablate', 'ablation_hooks', 'forward_resid', 'forward_resid_cached', 'hook_z_name', 'init_kv_cache', 'model_shape', 'run_variants', 'select_kv_cache', 'unembed', 'variant_hooks']

warnings.warn("cel_lens.ablation is deprecated; use cel_lens.model", DeprecationWarning, stacklevel=2)

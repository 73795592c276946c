"""Deprecated: ``cel_lens.distributed`` moved to ``cel_lens.backends.ray`` (this module stays for one release)."""

import warnings

from cel_lens.backends.ray import (  # noqa: F401
    RAY_INSTALL_HINT,
    RayUnavailableError,
    require_ray,
    ModelFactory,
    to_factory,
    Shard,
    plan_shards,
    ShardWorker,
    RayOracle,
    shard_split,
    FORWARDED_ENV,
)

__all__ = ['FORWARDED_ENV', 'ModelFactory', 'RAY_INSTALL_HINT', 'RayOracle', 'RayUnavailableError', 'Shard', 'ShardWorker', 'plan_shards', 'require_ray', 'shard_split', 'to_factory']

warnings.warn("cel_lens.distributed is deprecated; use cel_lens.backends.ray", DeprecationWarning, stacklevel=2)

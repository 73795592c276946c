"""Where evaluations run: in this process (:mod:`~cel_lens.backends.local`) or on Ray actors
(:mod:`~cel_lens.backends.ray`), behind one :class:`Backend` protocol (:mod:`~cel_lens.backends.base`)."""

from cel_lens.backends.base import BACKENDS, Backend, BackendOracle, ExecutionSettings, backend_class, get_backend
from cel_lens.backends.local import LocalBackend, LocalOracle, ModelOracle

__all__ = [
    "Backend",
    "BackendOracle",
    "ExecutionSettings",
    "BACKENDS",
    "get_backend",
    "backend_class",
    "LocalBackend",
    "LocalOracle",
    "ModelOracle",
]

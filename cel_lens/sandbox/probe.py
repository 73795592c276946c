"""Whether this machine gives the sandbox its kernel layers: ``python -m cel_lens.sandbox.probe``.

Prints ``1`` when an empty program ran with namespaces (PID, network, mount, IPC), seccomp and the
pids and memory cgroups, and nothing otherwise (what is missing goes to stderr). ``make test`` sets
``CEL_LENS_REQUIRE_SANDBOX`` from it: where the layers are there, a sandbox test that skips for
want of one is a failure; where they are not, the suite still runs and those tests skip.
"""

from __future__ import annotations

import sys

from cel_lens.sandbox.runner import isolation

__all__ = ["REQUIRED_LAYERS", "REQUIRE_ENV", "missing_layers", "main"]

REQUIRED_LAYERS = ("pidns", "netns", "ipcns", "fs:read-only", "seccomp", "pids-cgroup", "memory-cgroup")
"""The layers ``make test`` expects before it requires the sandbox tests to run (not skip)."""
REQUIRE_ENV = "CEL_LENS_REQUIRE_SANDBOX"
"""Environment variable: ``1`` turns every skip of a sandbox test into a failure."""


def missing_layers() -> list[str]:
    """The :data:`REQUIRED_LAYERS` an empty program did not get here (all of them when it did not run)."""
    try:
        layers = set(isolation(allow=True))
    except Exception as exc:  # noqa: BLE001 - any failure to run means: not available
        return [f"the sandbox did not run ({type(exc).__name__}: {exc})"]
    return [layer for layer in REQUIRED_LAYERS if layer not in layers]


def main() -> int:
    """Print ``1`` when every required layer applies, else say on stderr which are missing."""
    missing = missing_layers()
    if missing:
        print(f"cel_lens.sandbox: kernel layers missing here: {', '.join(missing)}", file=sys.stderr)
    else:
        print("1")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

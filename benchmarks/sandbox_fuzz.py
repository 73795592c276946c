"""The judge's fuzzer, run longer than in the test suite: ``python -m benchmarks.sandbox_fuzz``.

Runs :func:`cel_lens.sandbox.fuzz.fuzz` for ``--seconds`` in each mode (with the kernel layers,
and the weaker guard-only mode) and prints how many hostile cases ran, their statuses, and every
forged pass or crash (there must be none). Needs ``CEL_LENS_ALLOW_CODE_EXECUTION=1`` or
``--allow-code-execution``: it runs generated hostile code in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cel_lens import sandbox as sb
from cel_lens.sandbox import fuzz, runner


def main(argv: list[str] | None = None) -> int:
    """Fuzz each mode for the given time; exit 1 if any case passed or crashed the judge."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.sandbox_fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=300.0, help="time budget per mode, in seconds (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed of the grammar (default 0)")
    p.add_argument("--workers", type=int, default=2, help="sandboxes run at once (default 2)")
    p.add_argument("--modes", default="namespaces,guard-only",
                   help="comma-separated modes: namespaces, guard-only (default both)")
    p.add_argument("--allow-code-execution", action="store_true", help="opt in to running generated code")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.workers < 1:
        p.error("--seconds must be > 0 and --workers >= 1")
    modes = args.modes.split(",")
    if not set(modes) <= {"namespaces", "guard-only"}:
        p.error(f"--modes: unknown mode in {args.modes!r}; choose namespaces, guard-only")
    sb.check_allowed(True if args.allow_code_execution else None)
    out, bad = {}, 0
    for mode in modes:
        runner.NAMESPACES = "require" if mode == "namespaces" else "off"
        report = fuzz.fuzz(seed=args.seed, budget=args.seconds, workers=args.workers, weak=mode == "guard-only")
        out[mode] = {"cases": report.cases, "statuses": dict(report.statuses), "passed": len(report.passed),
                     "crashes": len(report.crashes), "seconds": round(report.seconds, 1)}
        bad += len(report.passed) + len(report.crashes)
        if not args.json:
            print(f"{mode}: {report}")
        for case, outcome in report.passed:
            print(f"  PASSED {case.parts} {case.tests}: {outcome.reason}", file=sys.stderr)
        for chunk, error in report.crashes:
            print(f"  CRASH {error}: {[c.parts for c in chunk]}", file=sys.stderr)
    if args.json:
        print(json.dumps({"seed": args.seed, "workers": args.workers, "cpus": os.cpu_count(), **out}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

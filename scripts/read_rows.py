"""Write the rows a new D_test must avoid: every test row a model has read, by the ledger and by
earlier runs' splits, as a file for a task's ``avoid_test`` option (:mod:`cel_lens.tasks.avoid`).

    python scripts/read_rows.py --task arithmetic --model HuggingFaceTB/SmolLM2-135M-Instruct \\
        --split n_dist=400,n_test=400,seed=0 --manifest results/smollm2-135m/*/manifest.json \\
        --out results/smollm2-135m/arithmetic-read-rows.txt

Sources, each named in the file's header: this machine's ledger (reads filed under ``--task``, by
``--model``'s id, or by every model without ``--model``; :func:`cel_lens.evaluation.seal.read_example_ids`); ``--split``: the D_test of an
earlier run rebuilt from its sizes and seed (``key=value`` loader options; runs made on another
machine, whose ledger this one lacks); ``--manifest``: a run manifest's recorded D_test ids.
The file lists example ids, sorted, one per line; an existing file's ids are kept (the list only grows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from cel_lens.evaluation.seal import ledger_dir, read_example_ids


def parse_options(text: str) -> dict[str, Any]:
    """``n_dist=400,n_test=400,seed=0,chat_template=true`` as loader keywords."""
    out: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        low = value.lower()
        out[key] = int(value) if value.lstrip("-").isdigit() else {"true": True, "false": False}.get(low, value)
    return out


def split_ids(task: str, options: dict[str, Any], data_dir: Optional[str]) -> set[str]:
    """Ids of the D_test a load of ``task`` with ``options`` draws."""
    import cel_lens as cl

    return {e.id for e in cl.load_task(task, data_dir=data_dir, **options).test.examples}


def manifest_ids(path: Path) -> set[str]:
    """The D_test ids a run manifest records."""
    examples = json.loads(path.read_text()).get("examples") or {}
    test = examples.get("test") or {}
    ids = test.get("ids") if isinstance(test, dict) else test
    if not ids:
        raise SystemExit(f"{path}: no recorded D_test ids")
    return set(ids)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True)
    p.add_argument("--model", help="the model id the ledger records (default: reads by any model)")
    p.add_argument("--split", action="append", default=[], help="an earlier run's loader options, key=value,...")
    p.add_argument("--manifest", action="append", default=[], type=Path)
    p.add_argument("--data-dir")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    sources = {f"ledger {ledger_dir()} (model {a.model or 'any'})": read_example_ids(a.task, a.model)}
    sources.update({f"split {s}": split_ids(a.task, parse_options(s), a.data_dir) for s in a.split})
    sources.update({f"manifest {m}": manifest_ids(m) for m in a.manifest})
    old = set()
    if a.out.exists():
        old = {ln.strip() for ln in a.out.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
        sources[f"the earlier {a.out.name}"] = old
    ids = set().union(*sources.values())
    header = [f"# test rows of {a.task} to keep out of a new D_test ({len(ids)} ids)"]
    header += [f"# {name}: {len(found)}" for name, found in sources.items()]
    a.out.write_text("\n".join(header + sorted(ids)) + "\n")
    print("\n".join(header), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

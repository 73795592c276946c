"""Write the BoolQ row plan of the planted SmolLM2 controls (docs/planted.md).

    python scripts/plant_rows.py            # writes results/planted/boolq-plant-rows.{json,txt}

BoolQ has 3,270 validation rows and no train file here. The committed real-model rows
(``results/smollm2-135m/boolq-*/manifest.json``) name the ids of their D_dist and D_test; every row
outside all of them is *reserved* for the plants: a seeded shuffle (seed 56) gives ``train`` (what
``cel-lens plant`` fits and sizes a plant on) and ``truth`` (held out: where a plant's true effect is
measured; no search and no fit reads it). The ``.txt`` file lists the reserved rows' ids and content
hashes, one per line: a planted row's loader takes it as ``--task-option reserve=FILE``, so neither
its D_dist nor its D_test holds a reserved row (or a row with the same text).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N_TRAIN = 385
SEED = 56


def committed_ids(rows: Path) -> dict[str, list[str]]:
    """Each committed BoolQ row's D_dist and D_test ids, by ``<row>/<split>``."""
    out = {}
    for manifest in sorted(rows.glob("boolq-*/manifest.json")):
        examples = json.loads(manifest.read_text())["examples"]
        for split in ("dist", "test"):
            out[f"{manifest.parent.name}/{split}"] = list(examples[split]["ids"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=Path, default=ROOT / "results/smollm2-135m")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared/data"))
    parser.add_argument("--out", type=Path, default=ROOT / "results/planted/boolq-plant-rows")
    args = parser.parse_args()
    from cel_lens.tasks.boolq import load_boolq

    validation = load_boolq(n_test=3270, data_dir=args.data_dir, dist_from="validation", splits=("test",)).test
    used = committed_ids(args.rows)
    taken = set().union(*used.values())
    free = sorted((e for e in validation.examples if e.id not in taken), key=lambda e: int(e.id.rsplit("/", 1)[1]))
    order = list(range(len(free)))
    random.Random(SEED).shuffle(order)
    train = sorted((free[i] for i in order[:N_TRAIN]), key=lambda e: int(e.id.rsplit("/", 1)[1]))
    truth = sorted((free[i] for i in order[N_TRAIN:]), key=lambda e: int(e.id.rsplit("/", 1)[1]))
    plan = {
        "what": "BoolQ validation rows of the planted SmolLM2 controls (docs/planted.md)",
        "validation_rows": len(validation),
        "committed_rows": {k: len(v) for k, v in used.items()},
        "committed_union": len(taken),
        "reserved": len(free),
        "rule": f"reserved = validation rows in no committed row's D_dist or D_test; seeded shuffle (seed {SEED}): "
                f"the first {N_TRAIN} are train (fit and size the plants), the rest truth (held out)",
        "seed": SEED,
        "train": [e.id for e in train],
        "truth": [e.id for e in truth],
        "train_yes": sum(e.label for e in train),
        "truth_yes": sum(e.label for e in truth),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(plan, indent=1) + "\n")
    lines = [f"# BoolQ validation rows reserved for the planted controls ({len(free)} rows: ids, then content hashes)",
             "# written by scripts/plant_rows.py; a planted row's splits leave them out (--task-option reserve=FILE)"]
    lines += [e.id for e in free] + [e.content_hash for e in free]
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print(json.dumps({k: v for k, v in plan.items() if k not in ("train", "truth")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

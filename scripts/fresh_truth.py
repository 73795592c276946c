"""The ops-capability plant's truth on rows beyond the file (docs/planted.md).

    python scripts/fresh_truth.py --n 1500 --seed 62 --out results/planted/ops-plant-fresh.json

The plant's row plan keeps 300 truth rows of the single-digit three-operation file, and on them the
true calibrated gain of ablating L29H0 has a wide interval ([-0.3, +7.7] pp). The file is a sample of
one generator, ``(a op b) op c`` with digits 1-9 and ops ``+ - *`` (6,561 problems; every file row is
checked to have that form and its computed answer), so the problems it does not hold are held-out
rows of the same distribution that no split can ever contain. This measures the built plant's truth
(:func:`cel_lens.plant.sums.fresh_truth`: raw and calibrated gain of ablating the planted head, the
base model's own, and the checks of :func:`~cel_lens.plant.sums.sums_truth`) on ``--n`` of them.
``scripts/planted_rows.py`` takes, for a plant, the truth record with the most rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared/data"))
    parser.add_argument("--n", type=int, default=1500, help="fresh problems to measure on")
    parser.add_argument("--seed", type=int, default=62, help="seed of the draw among the problems outside the file")
    parser.add_argument("--out", default=None, help="write the record (JSON) here")
    args = parser.parse_args(argv)
    from cel_lens.plant.sums import fresh_truth

    record = fresh_truth(args.n, args.seed, data_dir=args.data_dir)
    text = json.dumps(record, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return record


if __name__ == "__main__":
    main()

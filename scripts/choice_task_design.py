"""How the two-choice addition task (``arithmetic_choice``) got its near miss and prompt (docs/planted.md).

    python scripts/choice_task_design.py --out results/planted/choice_design.json

On rows 700-999 of the GPT-3 two-digit addition file (base SmolLM2-135M-Instruct only; these rows
lie in the sums-capability plant's train part, never in its truth), each row becomes two choices, the
right sum and the sum +/- OFFSET (the sign from the row's text, as the task draws it), smaller
first, after either the file's own context or lm-eval's normalised one
(:func:`cel_lens.tasks.arithmetic.format_context`). Scored as the task scores (``cl.evaluate``,
float32): raw accuracy, the AUC of ``lp(larger) - lp(smaller)`` for "the larger is right", and the
accuracy at the best constant threshold on these rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared/data"))
    parser.add_argument("--rows", default="700:1000", help="FIRST:END rows of the file")
    parser.add_argument("--offsets", default="1,2,10,20")
    parser.add_argument("--out", default=None, help="write the numbers here (JSON)")
    args = parser.parse_args(argv)
    import torch

    import cel_lens as cl
    from cel_lens.evaluation.context import EvalContext
    from cel_lens.plant.fit import auc, best_prior_accuracy
    from cel_lens.tasks.arithmetic import format_context
    from cel_lens.tasks.base import Example, Split

    first, end = (int(x) for x in args.rows.split(":"))
    lines = (Path(args.data_dir) / "arithmetic/two_digit_addition.jsonl").read_text().splitlines()[first:end]
    rows = [json.loads(line) for line in lines]
    model = cl.load_model("smollm2-135m")
    out = {"rows": args.rows, "conditions": []}
    for prompt in ("file", "lm-eval"):
        for offset in (int(x) for x in args.offsets.split(",")):
            examples = []
            for i, row in enumerate(rows):
                right = int(row["completion"])
                sign = 1 if hashlib.sha256(row["context"].encode("utf-8")).digest()[0] % 2 else -1
                small, large = sorted((right, right + sign * offset))
                text = row["context"] if prompt == "file" else format_context(row["context"])
                examples.append(Example(id=f"design/{first + i}", prompt=text, choices=(f" {small}", f" {large}"),
                                        label=int(right == large)))
            split = Split("design", tuple(examples), task="design", answer_type="multiple_choice", metric="acc")
            scores = cl.evaluate(model, split, [[]], context=EvalContext(precision="float32"), progress=False).extra["choice_score"][0]
            margin, labels = (scores[:, 1] - scores[:, 0]).double(), torch.tensor([e.label for e in examples])
            rec = {"prompt": prompt, "offset": offset, "raw": float(((margin > 0) == labels.bool()).double().mean()),
                   "auc": auc(margin, labels), "best_prior": float(best_prior_accuracy(margin, labels)[0].double().mean())}
            out["conditions"].append(rec)
            print(json.dumps(rec), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()

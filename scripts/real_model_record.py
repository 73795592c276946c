"""D_test statistics of an unfinished SmolLM2 BoolQ run, read from its record alone (no forward pass).

The run (docs/real_model.md, "BoolQ, 150/300") was stopped in its null, after the selection, D_test's
intact and S-hat evaluations and the leave-one-out ones were recorded. This prints what those
recorded evaluations say: raw and calibrated D_test accuracy, the gain with Tango's interval and
exact McNemar p, and the answer shares. Usage: python scripts/real_model_record.py RUN_DIR
"""

from __future__ import annotations

import json
import sys

import torch

from cel_lens.heads import HeadSet
from cel_lens.runs import load_run
from cel_lens.selection.calibration import calibrated_predictions, fit_choice_bias, prediction_shares
from cel_lens.selection.paired import mcnemar_enhancement_p, tango_paired_ci
from cel_lens.stats import mcnemar_exact
from cel_lens.tasks import load_task


def main(path: str) -> None:
    run = load_run(path)
    manifest = json.load(open(f"{path}/manifest.json"))
    opts = manifest["task"]["options"]
    task = load_task("boolq", n_dist=opts["n_dist"], n_test=opts["n_test"], data_dir=sys.argv[2] if len(sys.argv) > 2 else None,
                     dist_from="validation", seed=opts.get("seed", 0))
    selected = [e for e in run.events if e.get("event") == "selected"][-1]
    heads = str(HeadSet.parse(selected["heads"]))
    ev = {(e.split, str(HeadSet.parse(e.heads))): e for e in (run.evaluations() if callable(run.evaluations) else run.evaluations)}
    labels = {s: torch.tensor([ex.label for ex in task.split(s)]) for s in ("dist", "test")}
    out = {"heads": heads, "dist_gain": selected["dist_gain"]}
    intact, ablated = ev[("test", "intact")].correct.numpy(), ev[("test", heads)].correct.numpy()
    out["test_intact"], out["test_ablated"] = float(intact.mean()), float(ablated.mean())
    out["gain"] = out["test_ablated"] - out["test_intact"]
    out["tango_ci"] = tango_paired_ci(intact, ablated)
    out["mcnemar_p"], out["p_enhance"] = mcnemar_exact(intact, ablated), mcnemar_enhancement_p(intact, ablated)
    out["majority_yes"] = float(labels["test"].float().mean()) if task.test[0].choices[1].strip() == "yes" else None
    cal = {}
    for name, h in (("intact", "intact"), ("ablated", heads)):
        bias = fit_choice_bias(ev[("dist", h)].choice_scores, labels["dist"])
        raw = calibrated_predictions(ev[("test", h)].choice_scores)
        fixed = calibrated_predictions(ev[("test", h)].choice_scores, bias)
        cal[name] = (fixed == labels["test"]).numpy()
        out[f"shares_{name}"] = prediction_shares(raw, 2)
    out["calibrated_intact"], out["calibrated_ablated"] = float(cal["intact"].mean()), float(cal["ablated"].mean())
    out["calibrated_gain"] = out["calibrated_ablated"] - out["calibrated_intact"]
    out["calibrated_ci"] = tango_paired_ci(cal["intact"], cal["ablated"])
    out["calibrated_mcnemar_p"] = mcnemar_exact(cal["intact"], cal["ablated"])
    out["choices"] = list(task.test[0].choices)
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", help="the BoolQ run directory")
    parser.add_argument("data_dir", nargs="?", help="where boolq/dev.jsonl is (default: cel_lens's search path)")
    main(parser.parse_args().run_dir)

"""Can one head carry an answer *prior* on two-choice arithmetic? Measured: no (docs/planted.md).

    python scripts/ops_prior_feasibility.py --out results/planted/ops-prior-feasibility.json

The capability control's row is on ``arithmetic_choice`` with the single-digit three-operation file
(``1dc``). A "both" row there would also need a prior plant: a head whose push moves
``lp(larger) - lp(smaller)`` by the same amount on every row, so that ablating it is a raw gain that
calibration (a constant threshold on that margin) removes. The BoolQ prior plant can do that because
" yes" and " no" are one token each at one shared position. Here the choices are numbers of one to
four tokens (" 2" against " 22": a space, then digits), and the margin is a sum over each number's
own tokens, so a fixed residual push moves it by an amount that depends on which digits the two
numbers have. This script builds the best such push it can and measures what it is:

1. Per row and choice, one base-model pass (``transformers``, float32) gives the last layer's input
   residual and ``z`` at every scored position; the choice scores recomputed from them
   (:func:`~cel_lens.plant.features.last_layer_output`, full log-softmax) are checked against the
   evaluator's (:func:`~cel_lens.plant.sums.choice_margins`).
2. The head: the last-layer head outside L29H0's key/value group whose zero ablation moves the
   train margins least; ``v`` its most constant ``z`` direction (the BoolQ prior plant's rule).
3. The push ``d`` (the head's output columns gain ``scale * d v^T``): each row's margin gradient
   ``g_i`` with respect to ``d``, and the ridge least-squares ``d`` with ``g_i . d`` nearest 1 on
   every train row; how constant that linear shift is out of fold and on the truth rows.
4. Sizing as the BoolQ prior plant's (raw gain of ablating the head nearest +15 pp on train, both
   signs), then the exact effects on the truth rows: a prior would show a raw gain with a
   calibrated gain near zero.

Rows: the ``ops-capability`` plan's 200 train and 300 truth rows (``results/planted/ops-plant-rows.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RIDGES = (1e-3, 1e-2, 1e-1, 1.0)
SIZES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def features(hf, tl, split) -> dict:
    """Every scored position of every row and choice: last-layer ``z`` and input residual, target
    token, row index, and the sign of its score in the margin (+1 the larger choice, -1 the smaller)."""
    from cel_lens.evaluation.encode import encode_pair

    last, seen = hf.model.layers[-1], {}
    hooks = [last.self_attn.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("z", a[0][0].detach().clone())),
             last.register_forward_pre_hook(lambda m, a, kw: seen.__setitem__("r", (a[0] if a else kw["hidden_states"])[0].detach().clone()),
                                            with_kwargs=True)]
    z, r, t, row, sign = [], [], [], [], []
    try:
        with torch.no_grad():
            for i, e in enumerate(split.examples):
                for c, choice in enumerate(e.choices):
                    ctx, cont = encode_pair(tl, e.prompt, choice)
                    hf(torch.tensor([ctx + cont[:-1]]), logits_to_keep=1)
                    at = slice(len(ctx) - 1, len(ctx) + len(cont) - 1)
                    z.append(seen["z"][at]), r.append(seen["r"][at])
                    t += cont
                    row += [i] * len(cont)
                    sign += [1.0 if c == 1 else -1.0] * len(cont)
    finally:
        for h in hooks:
            h.remove()
    return {"z": torch.cat(z), "r": torch.cat(r), "t": torch.tensor(t), "row": torch.tensor(row), "sign": torch.tensor(sign),
            "y": torch.tensor([e.label for e in split.examples]), "n": len(split.examples)}


def margins(w, unembed, f: dict, o_proj) -> torch.Tensor:
    """``lp(larger) - lp(smaller)`` of every row under ``o_proj`` (float64 sums of float32 log-probs)."""
    from cel_lens.plant.features import last_layer_output

    lp = torch.log_softmax(last_layer_output(w, f["z"], f["r"], o_proj) @ unembed.T, -1).gather(1, f["t"][:, None])[:, 0]
    out = torch.zeros(f["n"], dtype=torch.float64)
    return out.index_add_(0, f["row"], (lp * f["sign"]).double())


def edited(w, head: int, v=None, d=None, scale: float = 0.0, ablate: bool = False):
    """The last layer's output projection with ``head``'s columns gaining ``scale * d v^T``, or zeroed."""
    from cel_lens.plant.fit import head_slice

    o = w.o_proj.clone()
    cols = head_slice(w, head)
    o[:, cols] = 0.0 if ablate else o[:, cols] + scale * torch.outer(d, v)
    return o


def gradients(w, unembed, f: dict, head: int, v) -> torch.Tensor:
    """Each row's margin gradient with respect to the push ``d`` at ``d = 0`` (one small graph per row)."""
    out = torch.zeros(f["n"], w.o_proj.shape[0], dtype=torch.float64)
    for i in range(f["n"]):
        keep = f["row"] == i
        one = {k: f[k][keep] for k in ("z", "r", "t", "sign")} | {"row": torch.zeros(int(keep.sum()), dtype=torch.long), "n": 1}
        d = torch.zeros(w.o_proj.shape[0], requires_grad=True)
        out[i] = torch.autograd.grad(margins(w, unembed, one, edited(w, head, v, d, 1.0)).sum(), d)[0].double()
    return out


def ridge(g: torch.Tensor, lam: float) -> torch.Tensor:
    """``d`` minimising ``sum_i (g_i . d - 1)^2 + lam * mean|g_i|^2 * |d|^2``."""
    reg = lam * g.pow(2).sum(1).mean()
    return torch.linalg.solve(g.T @ g + reg * torch.eye(g.shape[1], dtype=g.dtype), g.T @ torch.ones(len(g), dtype=g.dtype))


def constancy(g, g_truth, seed: int = 0) -> list[dict]:
    """Per ridge: the linear shift's mean and spread out of fold (5 folds) and on the truth rows."""
    folds = torch.randperm(len(g), generator=torch.Generator().manual_seed(seed)).chunk(5)
    out = []
    for lam in RIDGES:
        oof = torch.zeros(len(g), dtype=torch.float64)
        for fold in folds:
            keep = torch.ones(len(g), dtype=torch.bool)
            keep[fold] = False
            oof[fold] = g[fold] @ ridge(g[keep], lam)
        held = g_truth @ ridge(g, lam)
        out.append({"ridge": lam, "out_of_fold_mean": float(oof.mean()), "out_of_fold_sd": float(oof.std()),
                    "truth_mean": float(held.mean()), "truth_sd": float(held.std())})
    return out


def sized(w, unembed, train: dict, truth: dict, head: int, v, d, target: float, base, ablated) -> dict:
    """Every signed size's train effects, the one whose raw gain is nearest ``target``, its truth effects
    (``base`` and ``ablated``: the train rows' margins intact and with ``head`` zeroed)."""
    from cel_lens.plant.truth import margin_effects

    grid = []
    for scale in [s * sign for s in SIZES for sign in (1.0, -1.0)]:
        planted = margins(w, unembed, train, edited(w, head, v, d, scale))
        e = margin_effects(planted, ablated, train["y"])
        shift = planted - base
        grid.append({"scale": scale, "raw_gain": e["raw"]["gain"], "calibrated_gain": e["calibrated_best_prior"]["gain"],
                     "shift_mean": float(shift.mean()), "shift_sd": float(shift.std())})
    chosen = min(grid, key=lambda s: (abs(s["raw_gain"] - target), -s["scale"]))
    planted = margins(w, unembed, truth, edited(w, head, v, d, chosen["scale"]))
    ablated_truth = margins(w, unembed, truth, edited(w, head, ablate=True))
    shift = planted - margins(w, unembed, truth, w.o_proj)
    return {"train_sizing": grid, "chosen_on_train": chosen, "truth": margin_effects(planted, ablated_truth, truth["y"]),
            "truth_shift_mean": float(shift.mean()), "truth_shift_sd": float(shift.std())}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared/data"))
    parser.add_argument("--out", default=None, help="write the record (JSON) here")
    args = parser.parse_args(argv)
    import cel_lens as cl
    from cel_lens.heads import HeadSet
    from cel_lens.model.sources import resolve_source
    from cel_lens.plant.build import PRIOR_RAW_TARGET
    from cel_lens.plant.features import load_base
    from cel_lens.plant.fit import constant_direction, head_slice
    from cel_lens.plant.sums import HEAD, SUMS_ROWS, choice_margins, sums_examples
    from cel_lens.tasks.arithmetic_choice import load_pool

    start = time.process_time()
    tl = cl.load_model("smollm2-135m")
    hf, _, w = load_base(resolve_source("smollm2-135m").path, tokens=(0, 1))
    unembed = hf.get_output_embeddings().weight.detach()
    plan = json.loads((ROOT / SUMS_ROWS["ops-capability"]).read_text())
    pool, _ = load_pool(args.data_dir, "1dc")
    splits = {part: sums_examples(plan, part, pool) for part in ("train", "truth")}
    train, truth = (features(hf, tl, splits[p]) for p in ("train", "truth"))
    base = margins(w, unembed, train, w.o_proj)
    check = float((base - choice_margins(tl, splits["train"], [HeadSet()])[0]).abs().max())
    per = w.n_heads // w.n_kv_heads
    others = [h for h in range(w.n_heads) if h // per != HEAD.head // per]
    ablated = {h: margins(w, unembed, train, edited(w, h, ablate=True)) for h in others}
    moved = {h: float((ablated[h] - base).abs().mean()) for h in others}
    head = min(others, key=lambda h: (moved[h], h))
    v = constant_direction(train["z"][:, head_slice(w, head)])
    along = train["z"][:, head_slice(w, head)] @ v
    g, g_truth = gradients(w, unembed, train, head, v), gradients(w, unembed, truth, head, v)
    fits = constancy(g, g_truth)
    best = min(fits, key=lambda f: f["out_of_fold_sd"] / abs(f["out_of_fold_mean"]))
    d = ridge(g, best["ridge"]).float()
    record = {"what": "whether one last-layer head can carry an answer prior on arithmetic_choice 1dc (scripts/ops_prior_feasibility.py)",
              "rows": {"plan": SUMS_ROWS["ops-capability"], "train": train["n"], "truth": truth["n"]},
              "features_vs_evaluator_max_abs_margin_diff": check, "mean_abs_margin_move_of_ablating": {f"L{w.layer}H{h}": m for h, m in moved.items()},
              "head": f"L{w.layer}H{head}", "v_dot_z_mean": float(along.mean()),
              "v_dot_z_sd": float(along.std()),
              "linear_shift_constancy": fits, "ridge": best["ridge"],
              **sized(w, unembed, train, truth, head, v, d, PRIOR_RAW_TARGET, base, ablated[head]), "cpu_s": time.process_time() - start}
    text = json.dumps(record, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return record


if __name__ == "__main__":
    main()

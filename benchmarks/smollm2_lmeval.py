"""SmolLM2-135M-Instruct against the lm-evaluation-harness loop: the same decisions, and their cost.

    python -m benchmarks.smollm2_lmeval

On a real model, with real prompts: Arithmetic (``--n-arith`` D_dist rows of the ten GPT-3 files,
targets replaced by the model's own greedy answers, since it answers almost none itself and
all-wrong decisions would agree trivially) and BoolQ (``--n-boolq`` real validation rows, no length
filter). For the intact model and a few heads (first, middle and last layers, both key/value groups
of GQA), cel_lens's per-example decisions (``LocalOracle``, the search's path) are compared with
lm-eval's (``HFLM`` over the plain ``transformers`` model, the head zeroed at ``o_proj``'s input, one
``simple_evaluate`` per head). Times are CPU seconds of one torch thread: cel_lens's process, and
lm-eval's own process and with the child processes it spawns per call (``git describe``, torch's
environment report). Writes the ``smollm2-lmeval`` section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from benchmarks.paths import MODEL, checkpoint_dir, task_data_dir  # noqa: E402
from benchmarks.measure import cpu_seconds, own_cpu_seconds  # noqa: E402
from benchmarks.racing import write_section  # noqa: E402

HEADS = [(0, 4), (14, 0), (14, 8), (29, 2)]
"""Heads compared: first and last layers, and two heads of layer 14 reading different key/value heads."""
BATCH = 8


def cel_lens_decisions(model, task, heads: list[tuple[int, int]]) -> tuple[torch.Tensor, float]:
    """Intact then per-head D_dist correctness from the search's oracle, and its CPU seconds."""
    from cel_lens.backends.local import LocalOracle
    from cel_lens.heads import Head, HeadSet
    from cel_lens.oracle import DIST_SPLIT

    sets = [HeadSet()] + [HeadSet([Head(l, h)]) for l, h in heads]
    t0 = own_cpu_seconds()
    correct = LocalOracle(model, task, batch_size=BATCH, progress=False).evaluate(DIST_SPLIT, sets)
    return correct.bool(), own_cpu_seconds() - t0


def lm_eval_decisions(hf, tokenizer, task, name: str, heads: list[tuple[int, int]]) -> dict[str, Any]:
    """Intact then per-head correctness from one ``simple_evaluate`` each, with CPU seconds per
    call (own process, and with its children)."""
    from benchmarks.lm_eval_loop import LmEvalLoop

    loop = LmEvalLoop(hf, tokenizer, task.dist, name, batch_size=BATCH)
    loop.evaluate(None)  # the first call loads and caches the local dataset: not part of a call's cost
    rows, own, total = [], [], []
    for head in [None, *heads]:
        t0, o0 = cpu_seconds(), own_cpu_seconds()
        rows.append(loop.evaluate(head))
        total.append(cpu_seconds() - t0)
        own.append(own_cpu_seconds() - o0)
    return {"correct": torch.stack(rows), "own_s": sum(own), "total_s": sum(total)}


def compare(model, hf, tokenizer, task, name: str, heads: list[tuple[int, int]]) -> dict[str, Any]:
    """cel_lens vs lm-eval on ``task``'s D_dist for the intact model and ``heads``."""
    ours, ours_s = cel_lens_decisions(model, task, heads)
    theirs = lm_eval_decisions(hf, tokenizer, task, name, heads)
    diff = (ours != theirs["correct"]).sum(1)
    return {
        "n": len(task.dist), "heads": heads, "differing": diff.tolist(),
        "decisions": int(ours.numel()), "identical": bool(diff.sum() == 0),
        "accuracy": ours.float().mean(1).tolist(), "cel_lens_s": ours_s,
        "lm_eval_own_s": theirs["own_s"], "lm_eval_total_s": theirs["total_s"],
    }


def measure(model_path: str, data_dir: Optional[str], n_arith: int, n_boolq: int, loader: str) -> dict[str, Any]:
    """Both comparisons (module docstring)."""
    from transformers import AutoTokenizer

    import cel_lens as cl
    from benchmarks.floor import hf_causal_lm
    from benchmarks.workload import arithmetic_task, boolq_task, self_labelled

    torch.set_num_threads(1)
    model = cl.load_model(model_path, loader=loader)
    model_path = str(checkpoint_dir(model_path))  # the same checkpoint as a directory, for transformers
    hf = hf_causal_lm(model_path)
    # lm-eval gets the checkpoint's own tokenizer: a TransformerLens model's ``tokenizer`` is a copy
    # that adds BOS by default, which would give lm-eval other prompts than a user's run
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    root = task_data_dir(data_dir, needs=["boolq/dev.jsonl"])
    arith, replaced = self_labelled(model, arithmetic_task(n_arith, data_dir=root))
    boolq = boolq_task(n_boolq, data_dir=root)
    out = {"loader": loader, "load_average": None}
    out["arithmetic"] = {**compare(model, hf, tokenizer, arith, "cel_smollm2_arith", HEADS), "self_labelled": replaced}
    out["boolq"] = compare(model, hf, tokenizer, boolq, "cel_smollm2_boolq", HEADS)
    out["load_average"] = os.getloadavg()[0]
    return out


def section(r: dict[str, Any], command: str) -> str:
    """The markdown section."""
    heads = ", ".join(f"L{l}H{h}" for l, h in HEADS)
    lines = [
        "## SmolLM2-135M-Instruct: decisions against the lm-eval loop (`" + command + "`)",
        "",
        f"Loader `{r['loader']}`; the intact model and {heads}, each on every D_dist row; one torch thread "
        f"(load average {r['load_average']:.1f} at the end). CPU seconds for all {len(HEADS) + 1} evaluations.",
        "",
        "| task | rows | decisions compared | differing (intact, then each head) | identical | accuracy (intact, then each head) "
        "| cel_lens, CPU s | lm-eval, own process | lm-eval, with children | vs lm-eval, own / with children |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, label in (("arithmetic", "Arithmetic (targets self-labelled: {self_labelled} of {n})"),
                       ("boolq", "BoolQ (real validation rows, no length filter)")):
        c = r[key]
        acc = ", ".join(f"{a:.1%}" for a in c["accuracy"])
        lines.append(
            f"| {label.format(**c)} | {c['n']} | {c['decisions']:,} | {', '.join(map(str, c['differing']))} | "
            f"{'yes' if c['identical'] else '**no**'} | {acc} | {c['cel_lens_s']:.1f} | {c['lm_eval_own_s']:.1f} | "
            f"{c['lm_eval_total_s']:.1f} | {c['lm_eval_own_s'] / c['cel_lens_s']:.1f}x / {c['lm_eval_total_s'] / c['cel_lens_s']:.1f}x |"
        )
    lines += ["", "cel_lens's time covers the intact pass and the heads in one oracle call (the activation store "
              "resumes each head at its layer); lm-eval runs the full model once per call.", ""]
    return "\n".join(lines)


def main() -> None:
    """Measure and write the section."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=MODEL, help="model name or local HF directory (default: %(default)s, loaded by name)")
    p.add_argument("--data-dir", default=None, help="task data directory (default: as the library finds it: $CEL_LENS_DATA_DIR, ./data or ../shared/data)")
    p.add_argument("--n-arith", type=int, default=48, help="Arithmetic D_dist rows")
    p.add_argument("--n-boolq", type=int, default=16, help="BoolQ D_dist rows")
    p.add_argument("--loader", default="bridge", choices=["bridge", "hooked"], help="cel_lens loader")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args()
    r = measure(args.model, args.data_dir, args.n_arith, args.n_boolq, args.loader)
    Path(__file__).with_name(f"smollm2_lmeval_{args.loader}.json").write_text(json.dumps(r, indent=1) + "\n")
    text = section(r, f"python -m benchmarks.smollm2_lmeval --n-arith {args.n_arith} --n-boolq {args.n_boolq} --loader {args.loader}")
    print(text)
    if not args.no_write:
        write_section(text, key=f"smollm2-lmeval-{args.loader}")


if __name__ == "__main__":
    main()

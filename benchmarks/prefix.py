"""The shared prompt start, once per variant: what it saves on SmolLM2-135M-Instruct's real prompts.

    python -m benchmarks.prefix --n-arith 100 --n-mbpp 4

An exact stage-1-like scan (the intact model and every head of two layers, :data:`DEFAULT_HEADS`,
as :func:`cel_lens.evaluate` runs them)
over real Arithmetic D_dist prompts (``Question: What is ...``: 4-5 shared tokens of ~21) and a
few MBPP prompts (the 3-shot prompt: ~637 shared tokens of 728-916; greedy generation with a short
budget, so that the prompt pass, which is what sharing saves, is not buried under decoding), each
with and without :func:`~cel_lens.evaluation.prefix.prefix_sharing`: CPU seconds of this process
(one torch thread) and wall seconds of each, the positions an intact pass computes, and whether
every decision is identical (with the largest score difference). Float32 throughout
(``CEL_LENS_PRECISION=float32``), so that only the sharing differs.

:func:`measure` returns the numbers as a dict (another benchmark command can call it); it loads
the model by name and the tasks as the library finds their data.

:func:`generation_flops_shared` is generation's FLOP bound (:func:`benchmarks.limit.generation_flops`)
with the prompts' common prefix counted once per evaluation instead of once per prompt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any, Iterator, Optional, Sequence

import torch

from benchmarks.limit import Shape, generation_flops, head_flops, intact_flops

__all__ = ["measure", "measure_scan", "generation_flops_shared", "DEFAULT_HEADS", "MBPP_HEADS"]

DEFAULT_HEADS = tuple(f"L{l}H{h}" for l in (0, 15) for h in range(9))
"""Every head of layers 0 and 15 of SmolLM2 (9 heads a layer): the chunks exact stage 1 runs, all
heads of one layer per pass; layer 0 recomputes everything, layer 15 resumes halfway up."""
MBPP_HEADS = ("L0H0", "L15H4", "L29H8")
"""Generation's heads: the prompt pass from layer 0, halfway and at the last layer."""


@contextlib.contextmanager
def _float32() -> Iterator[None]:
    before = os.environ.get("CEL_LENS_PRECISION")
    os.environ["CEL_LENS_PRECISION"] = "float32"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CEL_LENS_PRECISION", None)
        else:
            os.environ["CEL_LENS_PRECISION"] = before


def _timed(fn) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def measure_scan(model, split, heads: Sequence[str], batch_size: int = 8, reps: int = 1) -> dict[str, Any]:
    """One split scanned (intact + each head) without and with prefix sharing: CPU and wall seconds
    (the fastest of ``reps``), decisions compared, the positions an intact pass computes."""
    from cel_lens.evaluation import EvalContext, encode_split, evaluate
    from cel_lens.evaluation.encode import split_answer_entry

    sets = ["intact", *heads]
    out: dict[str, Any] = {"n_examples": len(split), "n_variants": len(sets), "answer_type": split.answer_type}
    results = {}
    with _float32():
        for name, on in (("unshared", False), ("shared", True)):
            best = None
            context = EvalContext(precision="float32", share_prefix=on)
            for _ in range(reps):
                res, cpu, wall = _timed(lambda: evaluate(model, split, sets, batch_size=batch_size, progress=False,
                                                         context=context))
                best = (cpu, wall) if best is None or cpu < best[0] else best
            if not split_answer_entry(split).generates:
                batches = encode_split(model, split, batch_size, share_prefix=on or None)
                out[f"positions_{name}"] = sum(b.computed_tokens for b in batches)
                out["prefix_tokens"] = [b.prefix for b in batches] if on else out.get("prefix_tokens")
            results[name] = res
            out[f"cpu_s_{name}"], out[f"wall_s_{name}"] = best
    a, b = results["unshared"], results["shared"]
    out["decisions_compared"] = int(a.correct.numel())
    out["decisions_identical"] = bool(torch.equal(a.correct, b.correct))
    if split_answer_entry(split).generates:
        out["completions_identical"] = a.completions == b.completions
    else:
        out["max_abs_score_diff"] = float((a.scores - b.scores).abs().max())
    out["cpu_ratio"] = out["cpu_s_unshared"] / max(out["cpu_s_shared"], 1e-9)
    return out


def _mbpp_prefix(model, split, max_new_tokens: int) -> dict[str, Any]:
    from cel_lens.evaluation.generation import generation_prompts
    from cel_lens.evaluation.prefix import common_prefix

    prompts = generation_prompts(model, split, False, max_new_tokens)
    lengths = [len(p) for p in prompts]
    return {"prompt_tokens": lengths, "prefix_tokens": common_prefix(prompts, min(lengths) - 1)}


def measure(
    model: Any = "smollm2-135m",
    n_arith: int = 100,
    n_mbpp: int = 4,
    n_boolq: int = 0,
    heads: Sequence[str] = DEFAULT_HEADS,
    mbpp_heads: Optional[Sequence[str]] = None,
    mbpp_max_new_tokens: int = 16,
    batch_size: int = 8,
    reps: int = 1,
    threads: int = 1,
) -> dict[str, Any]:
    """The saving of prefix sharing on real prompts of ``model`` (a name, loaded by
    :func:`cel_lens.load_model`, or a model already loaded): Arithmetic D_dist's
    first ``n_arith`` examples under ``heads`` and MBPP D_dist's first ``n_mbpp`` under ``mbpp_heads``
    (default :data:`MBPP_HEADS`) generating ``mbpp_max_new_tokens`` tokens. Returns
    ``{"arithmetic": {...}, "mbpp": {...}, ...}`` (see :func:`measure_scan`); 0 skips a task. MBPP's
    judge runs the generated programs in the sandbox (``CEL_LENS_ALLOW_CODE_EXECUTION=1`` is set
    unless given). ``n_boolq``: BoolQ's first validation-drawn D_dist examples under ``heads``
    (passage first: little or nothing to share; the check is that its decisions stay identical with
    sharing on, the default). The torch thread count is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = _measure(model, n_arith, n_mbpp, heads, mbpp_heads, mbpp_max_new_tokens, batch_size, reps, threads)
        if n_boolq:
            import cel_lens as cl

            m = cl.load_model(model) if isinstance(model, str) else model
            split = cl.load_task("boolq", dist_from="validation").dist[:n_boolq]
            out["boolq"] = measure_scan(m, split, heads, batch_size, reps)
        return out
    finally:
        torch.set_num_threads(before)


def _measure(model, n_arith, n_mbpp, heads, mbpp_heads, mbpp_max_new_tokens, batch_size, reps, threads) -> dict[str, Any]:
    import cel_lens as cl
    from cel_lens.model.model_types import model_name

    m = cl.load_model(model) if isinstance(model, str) else model
    out: dict[str, Any] = {"model": model_name(m), "threads": threads, "heads": list(heads), "torch": torch.__version__}
    if n_arith:
        task = cl.load_task("arithmetic")
        split = task.dist[:n_arith]
        out["arithmetic"] = measure_scan(m, split, heads, batch_size, reps)
    if n_mbpp:
        os.environ.setdefault("CEL_LENS_ALLOW_CODE_EXECUTION", "1")
        task = cl.load_task("mbpp", max_new_tokens=mbpp_max_new_tokens)
        split = task.dist[:n_mbpp]
        mh = list(mbpp_heads) if mbpp_heads is not None else list(MBPP_HEADS)
        out["mbpp"] = {**measure_scan(m, split, mh, max(batch_size, n_mbpp), reps), **_mbpp_prefix(m, split, mbpp_max_new_tokens),
                       "heads": mh, "max_new_tokens": mbpp_max_new_tokens}
    return out


def generation_flops_shared(
    shape: Shape, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[Sequence[int]]]
) -> tuple[int, int]:
    """:func:`~benchmarks.limit.generation_flops` (``(intact, scan)``) with the prompts' common
    prefix (token ids, ``P`` tokens, ending before the shortest prompt's last token) computed once
    per evaluation: each of the other ``n - 1`` prompts is charged only its positions after it.
    Exact subtraction: a prompt's prefill is its prefix's positions (no scored position) plus the
    rest after them, attention pairs included (:mod:`benchmarks.limit`'s terms are additive so)."""
    from cel_lens.evaluation.prefix import common_prefix

    lengths = [len(p) for p in prompts]
    intact, scan = generation_flops(shape, lengths, completions)
    n, p = len(prompts), common_prefix(prompts, min(lengths, default=1) - 1)
    if n < 2 or p == 0:
        return intact, scan
    saved_intact = (n - 1) * intact_flops(shape, p, 0, 0)
    saved_heads = (n - 1) * sum(head_flops(shape, (e - 1) // shape.n_heads, p, 0, 0) for e in range(1, len(completions)))
    return intact - saved_intact, scan - saved_intact - saved_heads


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n-arith", type=int, default=100)
    ap.add_argument("--n-mbpp", type=int, default=4)
    ap.add_argument("--n-boolq", type=int, default=0)
    ap.add_argument("--heads", default=",".join(DEFAULT_HEADS))
    ap.add_argument("--mbpp-max-new-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args(argv)
    os.environ.setdefault("CEL_LENS_ALLOW_CODE_EXECUTION", "1")  # MBPP is judged by running its programs (sandboxed)
    out = measure(args.model, args.n_arith, args.n_mbpp, args.n_boolq, args.heads.split(","), None, args.mbpp_max_new_tokens,
                  reps=args.reps)
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

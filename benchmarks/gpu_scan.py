"""Stage-1 exact scan on one large GPU: a random model with Llama-3.2-3B's shape, bf16, Arithmetic.

Run from anywhere (cel_lens is imported from this repository's root, no install needed):

    python benchmarks/gpu_scan.py                 # H200: 28 layers x 24 heads, 2,000 prompts
    python benchmarks/gpu_scan.py --tiny          # CPU smoke test of the same code path

What it measures: the activation store's build (one intact pass over D_dist, residual streams kept
on the GPU), then the single-head ablations of every head of a subset of layers (all 24 heads of
each, so every forward has the batch shape of a full scan), timed with CUDA synchronisation. A
variant whose head is in layer ``l`` resumes from the store at ``l``, so its cost is affine in
``L - l``: a least-squares fit ``t_l = a + b (L - l)`` over the measured layers extrapolates to all
``L`` layers (``--layers all`` measures every layer instead; nothing is then extrapolated). Also:
tokens/s, achieved TFLOP/s from an analytic FLOP count of the work done (padding included) and its
fraction of the GPU's dense bf16 peak (``--peak-tflops``, 790 as measured on the lent H200), and the
compute floor (one intact pass at the scan's batch shape x heads x (L+1)/(2L); the intact pass is
timed on up to 4 evenly spaced batches and scaled by padded tokens) with the efficiency
floor / scan; and the naive loop of ``benchmarks/naive.py`` (batch 8, full passes, greedy
generation with a key/value cache) timed on a prefix of the prompts for the intact model and one
head, scaled to a whole naive scan (``--naive-heads 0`` skips it). It prints one JSON line and
writes it to ``$OUT/gpu_scan.json`` when ``OUT`` is set.

Data: Arithmetic's 2,000 D_dist prompts from the offline files (``--data-dir``,
``$CEL_LENS_DATA_DIR``, ``shared/data`` inside or next to the repository); without them, 2,000
prompts in the same ten GPT-3 formats are generated from a seed (the model is random, so only the
prompts' lengths matter; the JSON says which). The tokenizer is trained on those prompts (digits one
per token); the embedding has Llama-3.2's 128,256 rows.

Packages: what ``import transformer_lens`` and this script load is, on the lent H200's image, all
there (torch with CUDA, transformers>=5.9, tokenizers, einops, jaxtyping, numpy, pandas, pyarrow,
xxhash, fsspec, huggingface-hub, accelerate, sentencepiece, rich, tqdm) except five, to carry as
wheels and install with ``--no-deps`` (versions as in this repository's environment):
transformer-lens==3.9.0 better-abc==0.0.3 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings  # noqa: E402

import torch  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)

LLAMA_3_2_3B = dict(n_layers=28, d_model=3072, n_heads=24, d_head=128, n_kv_heads=8, d_mlp=8192, d_vocab=128256)
TINY = dict(n_layers=4, d_model=64, n_heads=4, d_head=16, n_kv_heads=2, d_mlp=128, d_vocab=1024)

def _data_dir(arg: Optional[str]) -> Optional[Path]:
    from benchmarks.workload import default_data_dir

    root = Path(arg) if arg else default_data_dir()
    return root if root is not None and (root / "arithmetic").is_dir() else None


def arithmetic_split(n: int, data_dir: Optional[Path], seed: int = 0):
    """D_dist of ``n`` Arithmetic prompts: the real files when found, else synthetic ones."""
    from benchmarks.workload import synthetic_arithmetic
    from cel_lens.tasks import Example, Split, Task, load_task

    if data_dir is not None:
        return load_task("arithmetic", n_dist=n, n_test=16, seed=seed, data_dir=str(data_dir)).dist, "files"
    pairs = synthetic_arithmetic(n + 16, seed)
    examples = [Example(id=f"synthetic/{i}", prompt=p, target=t) for i, (p, t) in enumerate(pairs)]
    task = Task(name="arithmetic", kind="exact_match", dist=Split("dist", tuple(examples[:n])),
                test=Split("test", tuple(examples[n:])), metric="acc")
    return task.dist, "synthetic"


def build_model(shape: dict[str, int], tokenizer, device: str, dtype: torch.dtype, seed: int = 0):
    """A random HookedTransformer of ``shape`` (Llama: RMSNorm, rotary base 500,000, gated SiLU MLP,
    grouped-query attention), weights N(0, 0.02) drawn directly on ``device``."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=shape["n_layers"], d_model=shape["d_model"], n_heads=shape["n_heads"], d_head=shape["d_head"],
        n_key_value_heads=shape["n_kv_heads"], d_mlp=shape["d_mlp"], d_vocab=shape["d_vocab"], n_ctx=2048,
        act_fn="silu", gated_mlp=True, normalization_type="RMS", positional_embedding_type="rotary",
        rotary_dim=shape["d_head"], rotary_base=500000, final_rms=True, original_architecture="LlamaForCausalLM",
        default_prepend_bos=True, tokenizer_prepends_bos=False, device=device, dtype=dtype, seed=seed,
        init_weights=False,
    )
    with torch.device(device):
        model = HookedTransformer(cfg, tokenizer=tokenizer, default_padding_side="right", move_to_device=True)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32).mul_(0.02).to(p.dtype))
            elif name.endswith(".w"):  # RMSNorm gains
                p.fill_(1.0)
            else:
                p.zero_()
    model.eval()
    return model


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fit_extrapolate(times: dict[int, float], n_layers: int) -> float:
    """Total over all layers of the least-squares fit ``t_l = a + b (L - l)`` to ``times``."""
    xs = [n_layers - l for l in times]
    ys = list(times.values())
    if len(times) == n_layers:
        return float(sum(ys))
    if len(times) == 1:  # proportional model through the origin
        return ys[0] / xs[0] * sum(n_layers - l for l in range(n_layers))
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    return float(sum(a + b * (n_layers - l) for l in range(n_layers)))


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the scan; print and return the JSON record."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU (smoke test)")
    ap.add_argument("--n-prompts", type=int, default=None, help="|D_dist| (default 2000; 64 with --tiny)")
    ap.add_argument("--layers", default="7", help="'all', a count of evenly spaced layers, or a comma list")
    ap.add_argument("--batch-size", type=int, default=64, help="examples per encoded batch")
    ap.add_argument("--max-rows", type=int, default=None, help="rows per forward (default batch x heads)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--peak-tflops", type=float, default=790.0, help="dense bf16 peak of the GPU")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop measuring more layers after this")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--synthetic", action="store_true", help="generated prompts even when the files exist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--naive-heads", type=int, default=1, help="heads the naive loop times (0: skip it)")
    ap.add_argument("--naive-prompts", type=int, default=512, help="prompts the naive loop runs on")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    from benchmarks.measure import intact_pass_seconds, scan_flops
    from benchmarks.workload import train_bench_tokenizer
    from cel_lens.evaluation import evaluate
    from cel_lens.heads import Head, HeadSet
    from cel_lens.evaluation import ActivationStore

    shape = TINY if args.tiny else LLAMA_3_2_3B
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny for a CPU smoke test")
    dtype = torch.float32 if args.tiny else getattr(torch, args.dtype)
    n = args.n_prompts or (64 if args.tiny else 2000)
    L, H = shape["n_layers"], shape["n_heads"]

    split, source = arithmetic_split(n, None if args.synthetic else _data_dir(args.data_dir), args.seed)
    tokenizer = train_bench_tokenizer([e.prompt + (e.target or "") for e in split], vocab_size=4096)
    t0 = time.perf_counter()
    model = build_model(shape, tokenizer, device, dtype, args.seed)
    _sync(device)
    build_s = time.perf_counter() - t0

    if args.layers == "all":
        layers = list(range(L))
    elif "," in args.layers:
        layers = sorted({int(x) for x in args.layers.split(",")})
    else:
        k = max(1, min(L, int(args.layers)))
        layers = sorted({round(i * (L - 1) / max(1, k - 1)) for i in range(k)})
    max_rows = args.max_rows or args.batch_size * H

    # warm-up (kernel selection, allocator) on a small slice, outside every timing
    evaluate(model, split.subset(min(len(split), args.batch_size)), [HeadSet([Head(0, 0)])],
             batch_size=args.batch_size, max_rows=max_rows, progress=False)
    _sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    t0 = time.perf_counter()
    store = ActivationStore.build(model, split, batch_size=args.batch_size, device=device, progress=False)
    _sync(device)
    store_s = time.perf_counter() - t0

    times: dict[int, float] = {}
    for layer in layers:
        if times and time.perf_counter() - t_start > args.budget_s:
            break
        sets = [HeadSet([Head(layer, h)]) for h in range(H)]
        t0 = time.perf_counter()
        evaluate(model, split, sets, batch_size=args.batch_size, store=store, max_rows=max_rows, progress=False)
        _sync(device)
        times[layer] = time.perf_counter() - t0

    # the floor's intact pass at the scan's batch shape, on evenly spaced batches (at most 4: each
    # is repeated ``repeat`` times), scaled to the whole split by padded tokens
    repeat = max(1, min(H, max_rows // max(1, args.batch_size)))
    sample = store.batches[:: max(1, len(store.batches) // 4)][:4]
    scale = sum(b.rows.tokens.numel() for b in store.batches) / sum(b.rows.tokens.numel() for b in sample)
    floor_runs = []
    for _ in range(3):
        floor_runs.append(intact_pass_seconds(model, sample, repeat=repeat) * scale)
        _sync(device)
    intact_pass = sorted(floor_runs)[1]

    # the naive loop (benchmarks/naive.py: batch 8, full passes, KV-cached greedy generation) on a
    # prefix of the prompts, the intact model and ``--naive-heads`` heads; its cost per evaluation
    # does not depend on the head, and is scaled to the whole split by prompt count
    naive = None
    if args.naive_heads > 0:
        from benchmarks.naive import naive_scan

        sub = split.subset(min(len(split), args.naive_prompts))
        heads = [(0, 0), (L - 1, H - 1), (L // 2, H // 2)][: args.naive_heads]
        t0 = time.perf_counter()
        naive_scan(model, sub, heads, batch_size=8)
        _sync(device)
        per_eval = (time.perf_counter() - t0) / (len(heads) + 1) * len(split) / len(sub)
        naive = {"naive_prompts": len(sub), "naive_evals": len(heads) + 1, "naive_eval_s": round(per_eval, 3),
                 "naive_scan_s": round(per_eval * (L * H + 1), 1)}

    scan_s = fit_extrapolate(times, L) + store_s
    floor_s = intact_pass * L * H * (L + 1) / (2 * L)
    real_tokens = sum(int(b.rows.attention_mask.sum()) for b in store.batches)
    padded_tokens = sum(b.rows.tokens.numel() for b in store.batches)
    measured_flops = scan_flops(model.cfg, store.batches, [l for l in times for _ in range(H)])
    measured_s = sum(times.values())
    full_flops = scan_flops(model.cfg, store.batches, [0] + [l for l in range(L) for _ in range(H)])
    record = {
        "benchmark": "gpu_scan",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "shape": shape,
        "dtype": str(dtype),
        "n_prompts": len(split),
        "prompts": source,
        "batch_size": args.batch_size,
        "max_rows": max_rows,
        "real_tokens": real_tokens,
        "padded_tokens": padded_tokens,
        "model_build_s": round(build_s, 3),
        "store_build_s": round(store_s, 4),
        "store_bytes": store.bytes_used,
        "layers_measured": sorted(times),
        "heads_measured": len(times) * H,
        "layer_times_s": {str(k): round(v, 4) for k, v in times.items()},
        "extrapolated": len(times) < L,
        "scan_s": round(scan_s, 3),
        "per_head_ms": round(1000 * (scan_s - store_s) / (L * H), 3),
        "tokens_per_s": round(L * H * real_tokens / scan_s, 1),
        "measured_tflops": round(measured_flops / measured_s / 1e12, 2),
        "scan_tflops": round(full_flops / scan_s / 1e12, 2),
        "peak_tflops": args.peak_tflops,
        "fraction_of_peak": round(full_flops / scan_s / 1e12 / args.peak_tflops, 4),
        "intact_pass_s": round(intact_pass, 4),
        "floor_s": round(floor_s, 3),
        "efficiency": round(floor_s / scan_s, 4),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
        **(naive or {}),
        "ratio_vs_naive": round(naive["naive_scan_s"] / scan_s, 1) if naive else None,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    line = json.dumps(record)
    print(line, flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_scan.json").write_text(line + "\n")
    return record


if __name__ == "__main__":
    main()

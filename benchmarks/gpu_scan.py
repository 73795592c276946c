"""Forwards and stage-1 scans on one large GPU: random models of Llama-3.2-3B's shape, bf16.

Run from the repository root (cel_lens is imported from this checkout; no network, no hub):

    python -m benchmarks.gpu_scan --results   # H100/H200: 28 layers x 24 heads, d_model 3072, vocab 128,256
    python -m benchmarks.gpu_scan --tiny      # CPU smoke test of the same code path

The shape is Llama-3.2-3B-Instruct's published ``config.json`` (``cel_lens/data/paper_configs``).

Three readers of the same shape, side by side: ``transformers`` with SDPA (the floor's forward),
cel_lens on a HookedTransformer and on a TransformerBridge, each on the fused-attention stack
(:mod:`cel_lens.model.stack`) and on the model's own forward (TransformerLens's attention; the
bridge's re-implemented attention). Weights are random (N(0, 0.02), drawn on the GPU): a
HookedTransformer built from its config, and one ``LlamaForCausalLM`` that ``transformers`` runs
first and the bridge then wraps.

1. **One intact pass** (CUDA-synchronised, median of ``--reps`` after a warm-up) over two
   workloads of random tokens: Arithmetic-shaped (prompts of 15-25 tokens) and BoolQ-shaped
   (60-400 tokens, real BoolQ's spread), cut into cel_lens's batches (sorted, token budget
   ``--max-tokens``, cel_lens's padding share), the scored positions unembedded. Tokens per second and the
   ratio to ``transformers``.
2. **A stage-1 exact scan** (Arithmetic-shaped, ``--n-prompts``) on each cel_lens model type: the
   activation store's build, then all heads of ``--layers`` evenly spaced layers; a layer's cost is
   affine in ``L - l``, so a least-squares line extrapolates to every layer. The floor is
   ``(1 + N (L+1)/(2L))`` x the ``transformers`` pass; efficiency = floor / scan.

3. **The FLOP rate**: the scan's FLOP count (every head of every layer plus the store's intact pass,
   counted as :mod:`cel_lens.selection.plan_paper` counts) over its extrapolated seconds, as a share
   of the device's dense bf16 peak, and the paper plan's GPU hours of Llama-3.2-3B at that share in
   place of the assumed one (``record["flops"]``).

It prints one JSON line and writes it to ``$OUT/gpu_scan.json`` when ``OUT`` is set; ``--results``
also saves it as ``benchmarks/gpu_scan.json`` and rewrites RESULTS.md's GPU rows (as
``python -m benchmarks.run --report-only`` does).
About 3 minutes on an H200. The image there lacks a few packages: carry them as wheels, e.g. made
here with ``pip download --no-deps --only-binary=:all: --python-version 3.12 -d gpu_wheels
transformer-lens==3.9.0 better-abc==0.0.3 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
beartype typeguard fancy-einsum transformers-stream-generator`` and installed there with
``python3 -m pip install -q --no-deps --no-index gpu_wheels/*.whl``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings  # noqa: E402

import torch  # noqa: E402

warnings.filterwarnings("ignore")

def paper_shape(hub_id: str = "meta-llama/Llama-3.2-3B-Instruct") -> dict[str, int]:
    """The shape of one of the paper's models, from its published ``config.json`` (cel_lens/data)."""
    from cel_lens.model.registry import paper_config

    c = paper_config(hub_id)
    return dict(n_layers=c["num_hidden_layers"], d_model=c["hidden_size"], n_heads=c["num_attention_heads"],
                d_head=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                n_kv_heads=c["num_key_value_heads"], d_mlp=c["intermediate_size"], d_vocab=c["vocab_size"])


LLAMA_3_2_3B = dict(n_layers=28, d_model=3072, n_heads=24, d_head=128, n_kv_heads=8, d_mlp=8192, d_vocab=128256)
TINY = dict(n_layers=4, d_model=64, n_heads=4, d_head=16, n_kv_heads=2, d_mlp=128, d_vocab=1024)


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


def _tokenizer(shape: dict[str, int]):
    """A small byte-level BPE (the models are random, token ids only need to be in range)."""
    from benchmarks.workload import synthetic_arithmetic, train_bench_tokenizer

    corpus = [p + a for p, a in synthetic_arithmetic(400, seed=1)]
    return train_bench_tokenizer(corpus, vocab_size=min(1024, shape["d_vocab"]))


def _random_(model: torch.nn.Module, seed: int) -> None:
    """N(0, 0.02) matrices, unit norm gains, zero biases, drawn on the model's device."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32).mul_(0.02).to(p.dtype))
            elif name.endswith((".w", "norm.weight")):
                p.fill_(1.0)
            else:
                p.zero_()


def build_hooked(shape: dict[str, int], tokenizer, device: str, dtype: torch.dtype):
    """A random HookedTransformer of ``shape`` (Llama: RMSNorm, rotary base 500,000, gated SiLU MLP, GQA)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=shape["n_layers"], d_model=shape["d_model"], n_heads=shape["n_heads"], d_head=shape["d_head"],
        n_key_value_heads=shape["n_kv_heads"], d_mlp=shape["d_mlp"], d_vocab=shape["d_vocab"], n_ctx=2048,
        act_fn="silu", gated_mlp=True, normalization_type="RMS", positional_embedding_type="rotary",
        rotary_dim=shape["d_head"], rotary_base=500000, final_rms=True, original_architecture="LlamaForCausalLM",
        default_prepend_bos=True, tokenizer_prepends_bos=False, device=device, dtype=dtype, init_weights=False,
    )
    with torch.device(device):
        model = HookedTransformer(cfg, tokenizer=tokenizer, default_padding_side="right", move_to_device=True)
    _random_(model, 0)
    return model.eval()


def build_hf_and_bridge(shape: dict[str, int], tokenizer, device: str, dtype: torch.dtype, root: Path):
    """A random ``LlamaForCausalLM`` (SDPA) and a function that wraps it in a TransformerBridge
    (after ``transformers`` has been timed: the bridge replaces its modules in place)."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=shape["d_vocab"], hidden_size=shape["d_model"], intermediate_size=shape["d_mlp"],
        num_hidden_layers=shape["n_layers"], num_attention_heads=shape["n_heads"], num_key_value_heads=shape["n_kv_heads"],
        head_dim=shape["d_head"], max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    config.architectures = ["LlamaForCausalLM"]
    config._attn_implementation = "sdpa"
    with torch.device(device):
        hf = transformers.LlamaForCausalLM(config).to(dtype)
    _random_(hf, 1)
    hf.eval()
    config.save_pretrained(root)  # the bridge reads the architecture from a local config, no weights
    tokenizer.save_pretrained(root)

    def bridge():
        from cel_lens.model.convert import bridge_from_hf
        from cel_lens.model.load import PROCESSING_DEFAULTS

        return bridge_from_hf(str(root), hf, tokenizer, device, dtype, dict(PROCESSING_DEFAULTS), {})

    return hf, bridge


def split_of(n: int, lengths: tuple[int, int], seed: int, answer_type: str):
    """``n`` examples of random words, ``lengths`` words per prompt: exact match (a short target)
    or multiple choice (two one-token choices, BoolQ's shape). The models are random: only the
    lengths matter."""
    from cel_lens.tasks import Example, Split, answer_type_entry

    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "one", "two", "three", "four", "plus", "minus", "is", "the"]
    ex = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(*lengths)))
        if answer_type_entry(answer_type).argmax_target:
            ex.append(Example(id=f"g/{i}", prompt=text + "\nAnswer:", target=" one two"))
        else:
            ex.append(Example(id=f"g/{i}", prompt=text + "\nAnswer:", choices=(" no", " yes"), label=i % 2))
    return Split("dist", tuple(ex), task="gpu", answer_type=answer_type, metric="acc")


def _timed(fn: Callable[[], Any], device: str, reps: int) -> float:
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hf_pass(hf, batches) -> None:
    """``transformers``' intact pass over cel_lens's batches (rows layout: right padded, causal; shared
    layout: the contexts), scored positions unembedded."""
    with torch.inference_mode():
        for b in batches:
            if b.rows is not None:
                tokens, pos = b.rows.tokens, b.rows.positions
            else:
                tokens, pos = b.context_tokens, b.context_last[:, None]
            tokens = tokens.to(hf.device)
            hidden = hf.model(input_ids=tokens).last_hidden_state
            hf.lm_head(hidden.gather(1, pos.to(hf.device)[..., None].expand(-1, -1, hidden.shape[-1]))).float().logsumexp(-1)


def cel_pass(model, batches) -> None:
    from cel_lens.evaluation.teacher_forced import batch_pass
    from cel_lens.model.ablation import ZERO
    from cel_lens.model import model_shape

    masks = torch.zeros(1, *model_shape(model), dtype=torch.bool)
    with torch.inference_mode():
        for b in batches:
            batch_pass(model, b, masks, 0, None, ablation=ZERO)


def forward_table(models: dict[str, Any], splits: dict[str, Any], device: str, reps: int, max_tokens: int,
                  own: bool = True) -> dict:
    """Seconds of one intact cel_lens pass per workload, model type, and stack or own forward."""
    from cel_lens.evaluation import encode_split
    from cel_lens.model import fused_attention

    out: dict[str, dict[str, Any]] = {}
    for key, split in splits.items():
        ref_model = next(iter(models.values()))
        batches = encode_split(ref_model, split, 1 << 20, max_tokens=max_tokens)
        real = sum(b.real_tokens for b in batches)
        row: dict[str, Any] = {"tokens_real": real, "tokens_padded": sum(b.padded_tokens for b in batches),
                               "n_batches": len(batches)}
        for name, model in models.items():
            for fused in (True, False) if own else (True,):
                with fused_attention(fused):
                    mine = encode_split(model, split, 1 << 20, max_tokens=max_tokens)
                    row[f"{name}_{'stack' if fused else 'own'}_s"] = _timed(lambda: cel_pass(model, mine), device, reps)
        out[key] = row
    return out


def scan(model, split, layers: Sequence[int], batch_size: int, max_tokens: int, device: str) -> dict[str, Any]:
    """Store build plus every head of ``layers``; the fit extrapolates to all layers."""
    from cel_lens.evaluation import ActivationStore, evaluate
    from cel_lens.heads import Head, HeadSet
    from cel_lens.model import model_shape

    L, H = model_shape(model)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    evaluate(model, split.subset(min(len(split), batch_size)), [HeadSet([Head(0, 0)])], batch_size=batch_size,
             max_tokens=max_tokens, progress=False)  # warm-up
    sync()
    t0 = time.perf_counter()
    store = ActivationStore.build(model, split, batch_size=batch_size, max_tokens=max_tokens, device=device, progress=False)
    sync()
    store_s = time.perf_counter() - t0
    times = {}
    for layer in layers:
        sets = [HeadSet([Head(layer, h)]) for h in range(H)]
        t0 = time.perf_counter()
        evaluate(model, split, sets, batch_size=batch_size, store=store, max_tokens=max_tokens, progress=False)
        sync()
        times[layer] = time.perf_counter() - t0
    total = fit_extrapolate(times, L) + store_s
    out = {"store_build_s": round(store_s, 4), "layer_times_s": {str(k): round(v, 4) for k, v in times.items()},
           "scan_s": round(total, 3), "per_head_ms": round(1000 * (total - store_s) / (L * H), 3),
           "store_bytes": store.bytes_used}
    store.close()
    return out


def scan_efficiency(record: dict[str, Any], shape: dict[str, int], split, model) -> dict[str, Any]:
    """The measured scans' FLOP rate against the device's dense bf16 peak, and the paper plan's
    GPU hours of Llama-3.2-3B (:mod:`cel_lens.selection.plan_paper`) at that rate instead of its
    assumed :data:`~cel_lens.selection.plan_paper.GPU_EFFICIENCY`."""
    from cel_lens.evaluation import encode_split
    from cel_lens.selection.plan_memory import DEVICES, MemoryShape
    from cel_lens.selection.plan_paper import GPU_EFFICIENCY, PaperTask, paper_plan

    batches = encode_split(model, split, 1 << 20)
    tokens = sum(b.real_tokens for b in batches) / len(split)
    scored = sum(int(b.target_mask.sum()) for b in batches) / len(split)
    L, H, d = shape["n_layers"], shape["n_heads"], shape["d_model"]
    ms = MemoryShape(L, d, H, shape["n_kv_heads"], shape["d_head"], shape["d_mlp"], shape["d_vocab"], 0)
    per_layer = 2 * ms.layer_matrix_params + 4 * (tokens / 2) * H * shape["d_head"]
    unembed = scored * 2 * d * shape["d_vocab"]
    n = len(split)
    flops = n * (L * tokens * per_layer + unembed) + sum(H * n * ((L - l) * tokens * per_layer + unembed) for l in range(L))
    name = str(record.get("device", ""))
    peak = next((dev.bf16_flops for key, dev in DEVICES.items() if key.upper() in name.upper()), None)
    out: dict[str, Any] = {"tokens_per_example": round(tokens, 2), "scored_per_example": round(scored, 2),
                           "scan_flops": flops, "bf16_peak_flops": peak}
    for kind in ("hooked", "bridge"):
        seconds = record[f"scan_{kind}"]["scan_s"]
        out[f"{kind}_flops_per_s"] = flops / seconds
        if peak:
            eff = flops / seconds / peak
            out[f"{kind}_efficiency_of_peak"] = round(eff, 4)
            for task in ("arithmetic", "boolq"):
                plan = paper_plan("meta-llama/Llama-3.2-3B-Instruct", task, "h200" if "H200" in name.upper() else "h100",
                                  efficiency=eff)
                out[f"{kind}_plan_{task}_gpu_hours"] = round(plan.seconds / 3600, 3)
    out["assumed_efficiency"] = GPU_EFFICIENCY
    return out


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run everything; print and return the JSON record."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU (smoke test)")
    ap.add_argument("--n-prompts", type=int, default=None, help="scan |D_dist| (default 1024; 32 with --tiny)")
    ap.add_argument("--layers", default="3", help="'all', a count of evenly spaced layers, or a comma list")
    ap.add_argument("--batch-size", type=int, default=256, help="examples per encoded batch (cap)")
    ap.add_argument("--max-tokens", type=int, default=None, help="padded positions per forward (default 65,536)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions of each pass")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--skip-own", action="store_true", help="time only the stack (not the models' own forwards)")
    ap.add_argument("--results", action="store_true",
                    help="also save benchmarks/gpu_scan.json and rewrite the GPU rows of benchmarks/RESULTS.md")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    from cel_lens.model import model_shape

    shape = TINY if args.tiny else paper_shape()
    assert args.tiny or shape == LLAMA_3_2_3B, "the published config and this script's shape disagree"
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny for a CPU smoke test")
    dtype = torch.float32 if args.tiny else getattr(torch, args.dtype)
    n = args.n_prompts or (32 if args.tiny else 1024)
    max_tokens = args.max_tokens or (2048 if args.tiny else 65536)
    reps = 2 if args.tiny else args.reps
    L, H = shape["n_layers"], shape["n_heads"]
    tokenizer = _tokenizer(shape)
    root = Path(tempfile.mkdtemp(prefix="cel_lens_gpu_"))
    t0 = time.perf_counter()
    hooked = build_hooked(shape, tokenizer, device, dtype)
    hf, make_bridge = build_hf_and_bridge(shape, tokenizer, device, dtype, root)
    build_s = time.perf_counter() - t0
    lo = (12, 20)
    splits = {"arithmetic_shaped": split_of(n, lo, 0, "exact_match"),
              "boolq_shaped": split_of(max(8, n // 8), (40, 300), 1, "multiple_choice")}
    record: dict[str, Any] = {"benchmark": "gpu_scan", "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                              "torch": torch.__version__, "shape": shape, "dtype": str(dtype), "n_prompts": n,
                              "max_tokens": max_tokens, "batch_size": args.batch_size, "model_build_s": round(build_s, 2)}
    # transformers first: the bridge then takes over the same modules
    hf_times = {}
    for key, split in splits.items():
        from cel_lens.evaluation import encode_split

        batches = encode_split(hooked, split, 1 << 20, max_tokens=max_tokens)
        hf_times[key] = _timed(lambda: hf_pass(hf, batches), device, reps)
    bridge = make_bridge()
    models = {"hooked": hooked, "bridge": bridge}
    table = forward_table(models, splits, device, reps, max_tokens, own=not args.skip_own)
    for key, row in table.items():
        row["transformers_sdpa_s"] = hf_times[key]
        for k in [k for k in row if k.endswith("_s")]:
            row[k[:-2] + "_tokens_per_s"] = round(row["tokens_real"] / row[k], 1)
            row[k[:-2] + "_vs_transformers"] = round(row[k] / hf_times[key], 3)
    record["one_pass"] = table
    if args.layers == "all":
        layers = list(range(L))
    elif "," in args.layers:
        layers = sorted({int(x) for x in args.layers.split(",")})
    else:
        k = max(1, min(L, int(args.layers)))
        layers = sorted({round(i * (L - 1) / max(1, k - 1)) for i in range(k)})
    floor_s = hf_times["arithmetic_shaped"] * (1 + L * H * (L + 1) / (2 * L))
    record["scan_floor_s"] = round(floor_s, 3)
    for name, model in models.items():
        res = scan(model, splits["arithmetic_shaped"], layers, args.batch_size, max_tokens, device)
        res["efficiency"] = round(floor_s / res["scan_s"], 4)
        record[f"scan_{name}"] = res
    record["layers_measured"] = layers
    record["flops"] = scan_efficiency(record, shape, splits["arithmetic_shaped"], hooked)
    record["peak_gpu_bytes"] = torch.cuda.max_memory_allocated() if device == "cuda" else None
    record["wall_s"] = round(time.perf_counter() - t_start, 1)
    assert model_shape(hooked) == (L, H)
    line = json.dumps(record)
    print(line, flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_scan.json").write_text(line + "\n")
    if args.results:
        from benchmarks.report import write_report
        from benchmarks.scan import GPU_JSON

        GPU_JSON.write_text(json.dumps(record, indent=1) + "\n")
        write_report(json.loads((REPO / "benchmarks" / "results.json").read_text()), REPO / "benchmarks" / "RESULTS.md")
    return record


if __name__ == "__main__":
    main()

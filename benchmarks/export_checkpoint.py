"""Exporting a checkpoint: wall/CPU time and peak resident memory, on the tiny checkpoints and on a
slice of a 3B model's shapes, and what that predicts for a whole 3B model.

Export reads every byte once, hashes it twice (source and copy) and writes it once; it holds one
1 MiB chunk and one edited ``o_proj`` at a time. The slice has Llama-3.2-3B's layer shapes in
bfloat16 (d_model 3072, 24 query / 8 KV heads of 128, MLP 8192), ``--layers`` of them split into two
shards; its throughput (bytes per second) scales to the full model's bytes.

Usage: ``python -m benchmarks.export_checkpoint [--layers 4] [--dir /tmp/cel_lens_export_bench]``
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

from benchmarks.measure import measure
from cel_lens.model.checkpoint_edit import export_checkpoint, read_checkpoint
from cel_lens.testing import TINY_ARCHS, tiny_hf_checkpoint

LLAMA_3B = dict(d_model=3072, n_heads=24, n_kv=8, d_head=128, d_mlp=8192, n_layers=28, vocab=128256)
QWEN_3B = dict(d_model=2048, n_heads=16, n_kv=2, d_head=128, d_mlp=11008, n_layers=36, vocab=151936)
"""Shapes of the paper's Llama-3.2-3B-Instruct and Qwen2.5-3B-Instruct (their config.json)."""


def model_bytes(s: dict, qkv_bias: bool = False, itemsize: int = 2) -> int:
    """Bytes of a Llama-shaped model's weights (tied embeddings) in a dtype of ``itemsize`` bytes."""
    q, kv = s["n_heads"] * s["d_head"], s["n_kv"] * s["d_head"]
    layer = 2 * q * s["d_model"] + 2 * kv * s["d_model"] + 3 * s["d_mlp"] * s["d_model"] + 2 * s["d_model"]
    layer += (q + 2 * kv) if qkv_bias else 0
    return itemsize * (s["n_layers"] * layer + s["vocab"] * s["d_model"] + s["d_model"])


def _slice_checkpoint(path: Path, n_layers: int) -> Path:
    """``n_layers`` Llama-3.2-3B-shaped layers in bfloat16, two shards with an index."""
    from safetensors.torch import save_file

    s = LLAMA_3B
    path.mkdir(parents=True)
    config = {"num_attention_heads": s["n_heads"], "num_key_value_heads": s["n_kv"], "head_dim": s["d_head"],
              "hidden_size": s["d_model"], "num_hidden_layers": n_layers, "architectures": ["LlamaForCausalLM"]}
    (path / "config.json").write_text(json.dumps(config))
    gen = torch.Generator().manual_seed(0)
    shapes = {"self_attn.q_proj.weight": (s["n_heads"] * s["d_head"], s["d_model"]),
              "self_attn.k_proj.weight": (s["n_kv"] * s["d_head"], s["d_model"]),
              "self_attn.v_proj.weight": (s["n_kv"] * s["d_head"], s["d_model"]),
              "self_attn.o_proj.weight": (s["d_model"], s["n_heads"] * s["d_head"]),
              "mlp.gate_proj.weight": (s["d_mlp"], s["d_model"]), "mlp.up_proj.weight": (s["d_mlp"], s["d_model"]),
              "mlp.down_proj.weight": (s["d_model"], s["d_mlp"]), "input_layernorm.weight": (s["d_model"],)}
    weight_map = {}
    for shard_i, layers in enumerate((range(n_layers // 2), range(n_layers // 2, n_layers))):
        name = f"model-{shard_i + 1:05d}-of-00002.safetensors"
        tensors = {f"model.layers.{layer}.{k}": torch.randn(shape, generator=gen).to(torch.bfloat16)
                   for layer in layers for k, shape in shapes.items()}
        save_file(tensors, str(path / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def _row(label: str, src: Path, out: Path, heads: str) -> dict:
    shards = [src / s for s in read_checkpoint(src).shards]
    m = measure(lambda: export_checkpoint(src, heads, out))
    total = sum(p.stat().st_size for p in shards)
    return {"checkpoint": label, "shards": len(shards), "bytes": total, "largest_shard": max(p.stat().st_size for p in shards),
            "wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_delta": m.peak_rss_delta, "bytes_per_s": total / m.wall_s}


def main() -> None:
    """Measure and print a table and the 3B estimate."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="Llama-3.2-3B-shaped layers in the slice (even)")
    parser.add_argument("--dir", default="/tmp/cel_lens_export_bench", help="scratch directory (deleted first)")
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    rows = []
    for i, arch in enumerate(TINY_ARCHS):
        src = tiny_hf_checkpoint(arch, root / "src" / arch, seed=i, max_shard_size="200KB")
        rows.append(_row(f"tiny {arch}", src, root / "out" / arch, "L0H1+L2H3"))
    big = _slice_checkpoint(root / "src" / "slice", args.layers)
    rows.append(_row(f"3B slice ({args.layers} layers)", big, root / "out" / "slice", f"L0H3+L{min(1, args.layers - 1)}H7+L{args.layers - 1}H20"))
    print("| checkpoint | shards | MiB | largest shard MiB | wall s | CPU s | peak RSS added MiB | MiB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        peak = "n/a" if r["peak_rss_delta"] is None else f"{r['peak_rss_delta'] / 2**20:.1f}"
        print(f"| {r['checkpoint']} | {r['shards']} | {r['bytes'] / 2**20:.2f} | {r['largest_shard'] / 2**20:.2f} | "
              f"{r['wall_s']:.3f} | {r['cpu_s']:.3f} | {peak} | {r['bytes_per_s'] / 2**20:.0f} |")
    last = rows[-1]
    for name, shape, bias in (("Llama-3.2-3B", LLAMA_3B, False), ("Qwen2.5-3B", QWEN_3B, True)):
        size, o_proj = model_bytes(shape, bias), 2 * shape["d_model"] * shape["n_heads"] * shape["d_head"]
        print(f"{name}: {size / 2**30:.2f} GiB bfloat16 -> about {size / last['bytes_per_s']:.0f} s wall at the slice's rate, "
              f"{size * last['cpu_s'] / last['bytes']:.0f} s CPU; peak memory 1 MiB chunk + one o_proj ({o_proj / 2**20:.0f} MiB)")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The exactness table of docs/real_model.md: SmolLM2-135M-Instruct (by name, offline) under both loaders
against plain transformers on the same weights, intact and with four heads zero-ablated (o_proj input
columns zeroed in transformers). Run: PYTHONPATH=. python scripts/real_model_diffs.py"""
import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import cel_lens as cl
from cel_lens.model.sources import resolve_source


def main() -> None:
    """Print the largest logit difference of each loader, intact and ablated."""
    d = resolve_source("smollm2-135m").path
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(str(d))
    prompts = ["The capital of France is", "def add(a, b):\n    return", "Question: 17 + 25 = ?\nAnswer:"]
    heads = [(0, 4), (14, 0), (14, 8), (29, 2)]
    for loader in ("hooked", "bridge"):
        m = cl.load_model("smollm2-135m", device="cpu", loader=loader)
        worst_i = worst_a = scale = 0.0
        for p in prompts:
            t = torch.tensor([tok(p)["input_ids"]])
            with torch.no_grad():
                ref = hf(t).logits
                worst_i = max(worst_i, (m(t) - ref).abs().max().item()); scale = max(scale, ref.abs().max().item())
                saved = {l: hf.model.layers[l].self_attn.o_proj.weight.clone() for l, _ in heads}
                for l, h in heads:
                    hf.model.layers[l].self_attn.o_proj.weight[:, h * 64:(h + 1) * 64] = 0
                ref_a = hf(t).logits
                for l, w in saved.items():
                    hf.model.layers[l].self_attn.o_proj.weight.copy_(w)
                with cl.ablate(m, "+".join(f"L{l}H{h}" for l, h in heads)):
                    worst_a = max(worst_a, (m(t) - ref_a).abs().max().item())
        print(f"{loader}: max |logit diff| intact {worst_i:.2e}, ablated {worst_a:.2e} (max |logit| {scale:.1f})", flush=True)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()
    main()

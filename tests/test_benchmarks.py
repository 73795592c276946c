"""The benchmark's correctness properties (no timing assertions).

The naive baseline (``benchmarks/naive.py``: ``run_with_hooks`` with one zeroing hook, greedy
generation, per-choice log-likelihood) is an implementation independent of cel_lens's evaluator;
both must give the same per-head stage-1 gains, and the same per-example correctness, on a tiny
random model. The naive loop itself is checked against TransformerLens' ``generate``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not part of the installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_scan import fit_extrapolate  # noqa: E402
from benchmarks.measure import layer_flops  # noqa: E402
from benchmarks.naive import greedy_tokens, naive_scan, zero_head_hook  # noqa: E402
from benchmarks.run import cel_scan, naive_heads  # noqa: E402
from benchmarks.workload import self_labelled, synthetic_arithmetic  # noqa: E402
from cel_lens.heads import Head, HeadSet  # noqa: E402
from cel_lens.tasks import Example, Split, Task  # noqa: E402


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model


def _all_heads(model) -> list[tuple[int, int]]:
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def _arithmetic(model, n: int = 32) -> tuple[Task, int]:
    pairs = synthetic_arithmetic(n + 4, seed=3)
    ex = [Example(id=f"a/{i}", prompt=p, target=t) for i, (p, t) in enumerate(pairs)]
    task = Task("arithmetic", "exact_match", dist=Split("dist", tuple(ex[:n])), test=Split("test", tuple(ex[n:])))
    return self_labelled(model, task)


def _boolq(n: int = 12) -> Task:
    from cel_lens.tasks.boolq import make_example

    path = ROOT / "cel_lens" / "data" / "fixtures" / "boolq" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ex = [make_example(r, "train", i) for i, r in enumerate(rows[: n + 4])]
    return Task("boolq", "multiple_choice", dist=Split("dist", tuple(ex[:n])), test=Split("test", tuple(ex[n:])))


def _check_identical(model, task) -> tuple[torch.Tensor, torch.Tensor]:
    heads = _all_heads(model)
    naive = naive_scan(model, task.dist, heads, batch_size=8)
    gains, oracle = cel_scan(model, task)  # exact_scores over a ModelOracle: the benchmarked path
    assert gains.dtype == torch.float64
    assert torch.equal(naive.gains, gains), (naive.gains, gains)
    # per example too, not only the means: intact and every single-head ablation
    sets = [HeadSet()] + [HeadSet([Head(l, h)]) for l, h in heads]
    correct = oracle.evaluate("dist", sets)
    assert torch.equal(correct[0], naive.intact)
    assert torch.equal(correct[1:], naive.correct)
    return naive.intact, gains


def test_arithmetic_gains_identical(model):
    task, replaced = _arithmetic(model)
    assert replaced >= 4  # self-labelling makes the comparison non-trivial
    intact, gains = _check_identical(model, task)
    assert intact.float().mean() > 0.1
    assert (gains != 0).any() and len(set(gains.tolist())) > 1


def test_boolq_gains_identical(model):
    intact, gains = _check_identical(model, _boolq())
    assert (gains != 0).any()


def test_naive_greedy_matches_transformer_lens_generate(model):
    """The naive loop (left padding, key/value cache, run_with_hooks) against TL's own generate on
    each prompt alone, unpadded, under the same zeroing hook."""
    tok = model.tokenizer
    prompts = [p for p, _ in synthetic_arithmetic(5, seed=1)]
    ctxs = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert len({len(c) for c in ctxs}) > 1  # padding is exercised
    hook = zero_head_hook(1, 2)
    with torch.inference_mode():
        batched = greedy_tokens(model, ctxs, 4, [hook]).tolist()
        no_cache = greedy_tokens(model, ctxs, 4, [hook], kv_cache=False).tolist()
        for ctx, got in zip(ctxs, batched):
            with model.hooks(fwd_hooks=[hook]):
                ref = model.generate(torch.tensor([ctx]), max_new_tokens=4, do_sample=False, stop_at_eos=False,
                                     verbose=False)
            assert got == ref[0, len(ctx):].tolist()
    assert batched == no_cache


def test_zero_head_hook_zeroes_one_head(model):
    seen = {}

    def spy(z, hook=None):
        seen["z"] = z.clone()

    tokens = torch.tensor([[1, 5, 9, 12]])
    with torch.inference_mode():
        model.run_with_hooks(tokens, fwd_hooks=[zero_head_hook(0, 3), ("blocks.0.attn.hook_z", spy)])
    z = seen["z"]
    assert torch.all(z[:, :, 3] == 0) and torch.any(z[:, :, :3] != 0)


def test_naive_heads_rotate_over_repetitions():
    first, second = naive_heads(8, 8, 8, 0), naive_heads(8, 8, 8, 1)
    assert [l for l, _ in first] == list(range(8))
    assert set(first).isdisjoint(second)
    assert naive_heads(2, 3, None, 0) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [l for l, _ in naive_heads(8, 8, 3, 0)] == [0, 4, 7]


def test_layer_flops_hand_computed():
    cfg = SimpleNamespace(d_model=4, n_heads=2, d_head=2, n_key_value_heads=1, d_mlp=8, gated_mlp=True, attn_only=False)
    # per token: q+o 2*4*4*2 = 64, k+v 2*4*2*2 = 32, attention 2*2*2*2*3 = 48, gated MLP 3*2*4*8 = 192
    assert layer_flops(cfg, rows=1, width=3) == 3 * (64 + 32 + 48 + 192)
    assert layer_flops(cfg, rows=2, width=1, keys=3) == 2 * (64 + 32 + 48 + 192)


def test_fit_extrapolate_hand_computed():
    # t_l = 1 + 2 (L - l), L = 4: total over l = 0..3 is 4 + 2 * (4 + 3 + 2 + 1) = 24
    assert fit_extrapolate({0: 9.0, 3: 3.0}, 4) == pytest.approx(24.0)
    assert fit_extrapolate({0: 9.0, 1: 7.0, 2: 5.0, 3: 3.0}, 4) == pytest.approx(24.0)
    assert fit_extrapolate({3: 2.0}, 4) == pytest.approx(2.0 * (4 + 3 + 2 + 1))


def test_gpu_scan_tiny_smoke(monkeypatch, tmp_path):
    """The GPU script's code path on a CPU at a tiny shape: it runs, extrapolates, writes its JSON."""
    from benchmarks.gpu_scan import main

    monkeypatch.setenv("OUT", str(tmp_path))
    record = main(["--tiny", "--n-prompts", "8", "--layers", "2", "--reps", "1", "--skip-own"])
    assert record["n_prompts"] == 8 and record["layers_measured"] == [0, 3]
    for kind in ("hooked", "bridge"):
        assert record[f"scan_{kind}"]["scan_s"] > record[f"scan_{kind}"]["store_build_s"] > 0
        assert record[f"scan_{kind}"]["efficiency"] > 0
        for key in ("arithmetic_shaped", "boolq_shaped"):
            assert record["one_pass"][key][f"{kind}_stack_s"] > 0
    assert record["one_pass"]["boolq_shaped"]["transformers_sdpa_s"] > 0
    flops = record["flops"]  # the FLOP rate; no bf16 peak to compare with on a CPU
    assert flops["scan_flops"] > 0 and flops["bf16_peak_flops"] is None
    assert flops["hooked_flops_per_s"] == pytest.approx(flops["scan_flops"] / record["scan_hooked"]["scan_s"])
    assert not any(k.endswith("efficiency_of_peak") for k in flops)
    assert json.loads((tmp_path / "gpu_scan.json").read_text()) == record


def test_floor_buckets_hand_computed():
    from benchmarks.floor import buckets

    # longest first; 10 % padding at most; 0 = one example per batch
    assert buckets([10, 30, 29, 9, 28], 1000, 0.1) == [[1, 2, 4], [0, 3]]
    # cel_lens's share by default, 2 %: 30, 29 and 28 is 3.3 % padding, 10 and 9 is 5 %
    assert buckets([10, 30, 29, 9, 28], 1000) == [[1, 2], [4], [0], [3]]
    assert buckets([10, 30, 29], 0) == [[1], [2], [0]]
    assert buckets([30, 30, 30], 60) == [[0, 1], [2]]


def test_floor_pass_and_lm_eval_task(model, tmp_path):
    """The transformers floor runs on each layout; the lm-eval task file holds the split's examples."""
    from benchmarks.floor import encode_for_floor, floor_layout, hf_floor
    from benchmarks.lm_eval_loop import write_task

    task, _ = _arithmetic(model, 8)
    hs = Split("dist", tuple(Example(f"h/{i}", f"a b c {i}", choices=(" x y", " z", " w v u", " q"), label=i % 4)
                             for i in range(4)), task="hellaswag", answer_type="multiple_choice", metric="acc_norm")

    class Hf(torch.nn.Module):  # transformers' interface over the tiny HookedTransformer
        def __init__(self, m):
            super().__init__()
            self.m = m
            self.model = self
            self.config = SimpleNamespace(num_hidden_layers=m.cfg.n_layers)

        def forward(self, input_ids, **kw):
            from cel_lens.model import forward_resid

            return SimpleNamespace(last_hidden_state=forward_resid(model, input_ids))

        def lm_head(self, x):
            from cel_lens.model import unembed

            return unembed(model, x)

    out = hf_floor(Hf(model), encode_for_floor(model, task.dist), pad=0, budgets=(0, 256), reps=1)
    assert out["best"].startswith("rows/") and out["pass_cpu_s"] > 0
    assert sorted(out["all"]) == ["rows/0/0.02", "rows/0/0.1", "rows/256/0.02", "rows/256/0.1"]
    assert floor_layout("shared/256/0.1") == {"shared": True, "max_tokens": 256, "max_padding": 0.1}
    yaml = write_task(hs, "t_hs", tmp_path).read_text()
    assert "output_type: multiple_choice" in yaml and "acc_norm" in yaml and 'target_delimiter: " "' in yaml
    rows = [json.loads(line) for line in (tmp_path / "t_hs.jsonl").read_text().splitlines()]
    assert rows[0] == {"prompt": "a b c 0", "choices": ["x y", "z", "w v u", "q"], "label": 0}
    yaml = write_task(task.dist, "t_ar", tmp_path).read_text()
    assert "output_type: loglikelihood" in yaml and "metric: acc" in yaml


def test_floor_encoding_follows_the_splits_chat_template(model):
    """A split whose task asks for the chat template is encoded in it, as the evaluator encodes it
    (the scaled cost of a chat row counts the template's tokens); a plain split is not."""
    from benchmarks.floor import encode_for_floor
    from cel_lens.evaluation import encode_pair

    task, _ = _arithmetic(model, 4)
    chat = Split("dist", task.dist.examples, task="arithmetic", answer_type="exact_match",
                 options={"chat_template": True})
    tok = model.tokenizer
    old = getattr(tok, "chat_template", None)
    tok.chat_template = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"
    try:
        ex = task.dist[0]
        ctx, cont = encode_pair(model, f"User: {ex.prompt}\nAssistant:", ex.target)
        assert encode_for_floor(model, chat)[0] == (ctx, [cont])
        plain_ctx, plain_cont = encode_pair(model, ex.prompt, ex.target)
        assert encode_for_floor(model, task.dist)[0] == (plain_ctx, [plain_cont]) and len(plain_ctx) < len(ctx)
    finally:
        tok.chat_template = old


def test_floor_layouts_score_as_one_by_one_transformers(tiny_checkpoints):
    """Every layout and budget of the floor (rows or shared contexts, several batches) gives each
    choice the log-likelihood of a plain one-example ``transformers`` forward."""
    from benchmarks.floor import hf_causal_lm, hf_loglikelihoods

    hf = hf_causal_lm(tiny_checkpoints["qwen2"]).eval()
    rng = torch.Generator().manual_seed(0)
    encoded = [(torch.randint(3, 200, (n,), generator=rng).tolist(),
                [torch.randint(3, 200, (m,), generator=rng).tolist() for m in (1, 3, 2, 3)])
               for n in (5, 17, 9, 16, 30)]
    ref = {}
    with torch.inference_mode():
        for e, (ctx, conts) in enumerate(encoded):
            for c, cont in enumerate(conts):
                ids = torch.tensor([ctx + cont[:-1]])
                logp = hf(input_ids=ids).logits[0].float().log_softmax(-1)
                ref[(e, c)] = sum(float(logp[len(ctx) - 1 + t, tok]) for t, tok in enumerate(cont))
    for shared in (False, True):
        for budget in (0, 64, 4096):
            got = hf_loglikelihoods(hf, encoded, shared=shared, max_tokens=budget, pad=0)
            assert got.keys() == ref.keys()
            assert max(abs(got[k] - ref[k]) for k in ref) < 1e-4, (shared, budget)


def test_lm_eval_loop_decisions_equal_cel_lens(tiny_checkpoints):
    """lm-evaluation-harness over the same examples, one call per head, decides as cel_lens does."""
    pytest.importorskip("lm_eval")
    from benchmarks.floor import hf_causal_lm
    from benchmarks.lm_eval_loop import LmEvalLoop
    from cel_lens.backends import LocalOracle
    from cel_lens.model import load_model

    path = tiny_checkpoints["qwen2"]
    model = load_model(str(path), loader="bridge", device="cpu")
    task = _boolq(8)
    loop = LmEvalLoop(hf_causal_lm(path), model.tokenizer, task.dist, "t_boolq")
    got = loop.scan([(0, 1), (2, 3)])
    ref = LocalOracle(model, task, progress=False).evaluate("dist", [HeadSet(), HeadSet([Head(0, 1)]), HeadSet([Head(2, 3)])])
    assert torch.equal(got["intact"], ref[0]) and torch.equal(got["correct"], ref[1:])

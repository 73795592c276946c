"""The memory plan: its parameter count against the models' own, its store against a built store's
bytes, what it picks when a device is too small, and ``cl.plan`` carrying it. (Its peak against a
real-width search's peak resident memory is ``benchmarks/paper_width.py``'s measurement.)"""

from __future__ import annotations

import json

import pytest
import torch

from cel_lens.model import load_model
from cel_lens.selection.plan_memory import (
    DeviceSpec, MemoryShape, fit_memory, memory_plan, model_memory_shape, search_memory,
)
from cel_lens.tasks import Example, Split

PATHS = [("llama", "hooked"), ("qwen2", "hooked"), ("llama", "bridge"), ("qwen2", "bridge"), ("smollm3", "bridge")]


@pytest.fixture(scope="module")
def loaded(tiny_checkpoints):
    cache = {}

    def get(arch, loader):
        if (arch, loader) not in cache:
            cache[arch, loader] = load_model(tiny_checkpoints[arch], device="cpu", dtype="float32", loader=loader)
        return cache[arch, loader]

    return get


def _split(n: int = 12) -> Split:
    words = ["one", "two", "three", "plus", "minus", "is"]
    ex = tuple(Example(f"e{i}", " ".join(words[j % 6] for j in range(3 + i % 5)) + "\nAnswer:", target=" one")
               for i in range(n))
    return Split("dist", ex, task="toy", answer_type="exact_match", metric="acc")


@pytest.mark.parametrize("arch,loader", PATHS)
def test_config_count_equals_the_loaded_models(arch, loader, loaded, tiny_checkpoints):
    """The count the paper-size plans use (from ``config.json`` alone) is what a loaded model holds;
    a HookedTransformer's load copy is the Hugging Face model's own count."""
    from transformers import AutoModelForCausalLM

    config = json.loads((tiny_checkpoints[arch] / "config.json").read_text())
    model = loaded(arch, loader)
    from_config, from_model = MemoryShape.from_config(config, loader), model_memory_shape(model)
    assert from_config.params == from_model.params == sum(p.numel() for p in model.parameters())
    if loader == "hooked":
        hf = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoints[arch]))
        assert from_config.load_params == from_model.load_params == sum(p.numel() for p in hf.parameters())
        assert from_model.params > from_model.load_params  # the untied unembedding, TransformerLens's biases
    assert (from_model.n_layers, from_model.d_model, from_model.d_vocab) == (
        config["num_hidden_layers"], config["hidden_size"], config["vocab_size"])


def test_store_term_is_the_built_stores_bytes(loaded):
    from cel_lens.evaluation import ActivationStore

    model, split = loaded("llama", "hooked"), _split()
    plan = search_memory(model, split, n_test=0, batch_size=4, precision="float32")
    store = ActivationStore.build(model, split, batch_size=4, progress=False)
    try:
        assert plan.stage("D_dist (intact, stages 1-2)").parts["store"] == store.bytes_used > 0
        assert plan.store_layers["dist"] == model.cfg.n_layers - 1
    finally:
        store.close()
    budget = store.bytes_used // 2 + 1  # one of the two layers fits
    halved = search_memory(model, split, n_test=0, batch_size=4, store_budget=budget, precision="float32")
    small = ActivationStore.build(model, split, batch_size=4, budget_bytes=budget, progress=False)
    try:
        assert halved.stage("D_dist (intact, stages 1-2)").parts["store"] == small.bytes_used
    finally:
        small.close()


SHAPE = MemoryShape(n_layers=10, d_model=1024, n_heads=8, n_kv_heads=2, d_head=128, d_mlp=4096, d_vocab=32000,
                    params=200_000_000, load_params=150_000_000)


def _device(gib: float) -> DeviceSpec:
    return DeviceSpec("test GPU", int(gib * 2**30), 2**30, 1e15)


def test_fit_picks_the_largest_store_that_fits_and_says_so():
    kw = dict(dist_tokens=200_000, test_tokens=300_000, weight_bytes=2, precision="bf16")
    everything = memory_plan(SHAPE, device=_device(1000), **kw)
    assert everything.fits and everything.store_layers == {"dist": 9, "test": 9}
    device = _device(everything.peak / 2**30 * 0.6)
    plan = fit_memory(SHAPE, device=device, **kw)
    assert plan.fits and 0 < plan.store_layers["test"] < 9
    assert any("--store-budget" in n for n in plan.notes)
    one_more = memory_plan(SHAPE, device=device, store_budget=plan.store_budget + 300_000 * 1024 * 2, **kw)
    assert not one_more.fits  # a layer more would not fit: the largest that fits was picked
    assert plan.stage("D_test (test, controls)").parts["float32 copy"] == SHAPE.params * 4


def test_fit_says_when_nothing_fits():
    plan = fit_memory(SHAPE, device=_device(0.5), dist_tokens=1000, test_tokens=1000, weight_bytes=2)
    assert not plan.fits and "a device with more memory is needed" in plan.notes[-1]


def test_cpu_plan_has_the_load_copy_of_a_hooked_model_only():
    kw = dict(dist_tokens=1000, test_tokens=1000, device=DeviceSpec("cpu", 2**40, 0, None, gpu=False))
    hooked = memory_plan(SHAPE, hooked=True, **kw).stage("load")
    bridge = memory_plan(SHAPE, hooked=False, **kw).stage("load")
    assert hooked.parts["load copy"] == SHAPE.load_params * 4 and bridge.parts["load copy"] == 0


def test_cl_plan_carries_the_memory_plan(loaded, data_dir):
    import cel_lens as cl

    model = loaded("qwen2", "hooked")
    plan = cl.plan(model, "arithmetic", k=1, pool_size=2, n_dist=16, n_test=8, data_dir=data_dir, calibrate=False,
                   progress=False, precision="float32")
    assert plan.memory is not None and plan.memory.device.name == "cpu"
    assert "memory on cpu" in str(plan) and plan.to_dict()["memory"]["peak"] == plan.memory.peak
    weights = plan.memory.stage("load").parts["weights"]
    assert weights == sum(p.numel() * p.element_size() for p in model.parameters())


def test_no_store_for_generation_or_without_a_store(loaded):
    model = loaded("llama", "hooked")
    gen = Split("dist", tuple(Example(f"g{i}", "def f(x):", target="    return x") for i in range(4)), task="toy",
                answer_type="generation", metric="pass@1")
    plan = search_memory(model, gen, n_test=4, precision="float32")
    assert plan.stage("D_test (test, controls)").parts["store"] == 0 and "no store" in plan.notes[-1]
    off = search_memory(model, _split(), n_test=4, use_store=False, precision="float32")
    assert off.stage("D_test (test, controls)").parts["store"] == 0

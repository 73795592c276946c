"""Ablation kinds: one table entry makes a kind work everywhere, bit for bit equal to a hand-written
``run_with_hooks`` reference; mean and resample are exact on every path (hooks, variants, the fused
stack, the bridge) and learnt as documented."""

from __future__ import annotations

import pytest
import torch

import cel_lens as cl
from cel_lens.config import ABLATION_KINDS, SearchConfig
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.heads import HeadSet, masks_from_head_sets
from cel_lens.model import ablate, ablation_hooks, forward_resid, fused_attention, load_model, run_variants, unembed
from cel_lens.evaluation import EvalContext
from cel_lens.model.ablation import Ablation, ablation_from_state, ablation_kind, fit_ablation
from cel_lens.model.ablation_kinds import MeanAblation, ResampleAblation
from cel_lens.pipeline import _split_options
from cel_lens.runs import load_run
from cel_lens.runs.export import run_ablation
from cel_lens.testing.planted import planted_task

ATOL = 1e-4  # fused attention sums in another order than the model's own forward


class ToyAblation(Ablation):
    """A kind that depends on z itself (so no constant: export must refuse it)."""

    name = "toy"

    def values(self, z, layer):
        return 0.5 * z + 0.25 * (layer + 1)

    def constant(self, layer, n_heads, d_head):
        return None


@pytest.fixture
def toy_kind(monkeypatch):
    monkeypatch.setitem(ABLATION_KINDS, "toy", f"{__name__}:ToyAblation")
    return ablation_kind("toy")()


@pytest.fixture(scope="module", params=["hooked", "bridge"])
def model(request, tiny_model, tiny_checkpoints):
    if request.param == "hooked":
        return tiny_model
    return load_model(tiny_checkpoints["llama"], device="cpu")


def _tokens(batch: int = 3, pos: int = 9, seed: int = 2) -> torch.Tensor:
    return torch.randint(3, 250, (batch, pos), generator=torch.Generator().manual_seed(seed))


def _reference_hooks(kind: Ablation, heads: str) -> list:
    """The textbook hook: ``z[:, :, h] = value`` for each ablated head, written here independently."""
    hooks = []
    head_set = HeadSet.parse(heads)
    for layer in head_set.layers:
        idx = [h.head for h in head_set if h.layer == layer]

        def hook(z, hook=None, idx=idx, layer=layer):
            assert z.ndim == 4  # both model types show hook functions [batch, pos, head, d_head]
            z = z.clone()
            values = kind.values(z, layer).expand_as(z)
            z[:, :, idx] = values[:, :, idx]
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", hook))
    return hooks


def _learnt(model, kind: str) -> Ablation:
    tokens = _tokens(6, 7, seed=5)
    mask = torch.ones_like(tokens)
    mask[0, 5:] = 0
    return fit_ablation(kind, model, tokens, mask, seed=3)


def _kinds(model, toy=None):
    out = {"zero": ablation_kind("zero")(), "mean": _learnt(model, "mean"), "resample": _learnt(model, "resample")}
    if toy is not None:
        out["toy"] = toy
    return out


def test_the_kind_table_is_the_config_choice():
    assert {"zero", "mean", "resample"} <= set(ABLATION_KINDS)  # the built-in kinds; more may be added
    assert all(issubclass(ablation_kind(name), Ablation) for name in ABLATION_KINDS)
    assert not ablation_kind("zero").learns and not ablation_kind("zero").folds_into_bias()
    assert all(ablation_kind(k).learns and ablation_kind(k).folds_into_bias() for k in ("mean", "resample"))
    assert SearchConfig().ablation == "zero"
    with pytest.raises(ValueError, match="unknown ablation 'nope'"):
        SearchConfig(ablation="nope").validate()
    with pytest.raises(ValueError, match="unknown ablation kind"):
        ablation_kind("nope")


@pytest.mark.parametrize("kind_name", ["zero", "mean", "resample", "toy"])
def test_ablate_and_run_variants_equal_a_run_with_hooks_reference(model, toy_kind, kind_name):
    kind = _kinds(model, toy_kind)[kind_name]
    tokens = _tokens()
    heads = "L0H1+L2H0+L2H3"
    with torch.no_grad():
        ref = model.run_with_hooks(tokens, fwd_hooks=_reference_hooks(kind, heads))
        with ablate(model, heads, kind=kind):
            got = model(tokens)
        assert torch.equal(got, ref)  # the model's own forward: bit for bit
        hooks_got = model.run_with_hooks(tokens, fwd_hooks=ablation_hooks(heads, model=model, kind=kind))
        assert torch.equal(hooks_got, ref)
        with fused_attention(False):
            variants = run_variants(model, tokens, ["intact", heads], kind=kind)
        torch.testing.assert_close(variants[1], ref, atol=ATOL, rtol=0)
        fused = run_variants(model, tokens, [heads, "intact"], kind=kind)
        torch.testing.assert_close(fused[0], ref, atol=ATOL, rtol=0)
        assert kind_name == "zero" or (fused[0] - fused[1]).abs().max() > 1e-4


@pytest.mark.parametrize("kind_name", ["mean", "resample", "toy"])
def test_the_stack_path_applies_the_kind(model, toy_kind, kind_name):
    """``forward_resid(variants=..., ablation=kind)``: the fused stack (rows shared up to the first
    ablated layer) and the hooked fallback equal the reference hooks."""
    kind = _kinds(model, toy_kind)[kind_name]
    tokens = _tokens()
    sets = ["intact", "L1H2", "L0H0+L2H3"]
    masks = masks_from_head_sets(sets, *model_shape_of(model))
    with torch.no_grad():
        refs = [unembed(model, forward_resid(model, tokens, fwd_hooks=_reference_hooks(kind, s))) for s in sets]
        for fused in (True, False):
            with fused_attention(fused):
                out = unembed(model, forward_resid(model, tokens, variants=masks, ablation=kind))
            for v, ref in enumerate(refs):
                torch.testing.assert_close(out[3 * v : 3 * v + 3], ref, atol=ATOL, rtol=0)


def model_shape_of(model):
    return int(model.cfg.n_layers), int(model.cfg.n_heads)


def test_mean_is_the_mean_over_real_positions_and_resample_a_donor(tiny_model):
    tokens = _tokens(6, 7, seed=5)
    mask = torch.ones_like(tokens)
    mask[0, 5:] = 0
    _, cache = tiny_model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_z"))
    mean = fit_ablation("mean", tiny_model, tokens, mask)
    resample = fit_ablation("resample", tiny_model, tokens, mask, seed=3)
    for layer in range(3):
        z = cache[f"blocks.{layer}.attn.hook_z"].double()
        want = (z * mask[:, :, None, None]).sum((0, 1)) / mask.sum()
        torch.testing.assert_close(mean.table[layer].double(), want, atol=1e-5, rtol=0)
        for head in range(4):
            donor = resample.info["donors"][layer][head]
            last = int(mask[donor].sum()) - 1
            torch.testing.assert_close(resample.table[layer, head].double(), z[donor, last, head], atol=1e-5, rtol=0)
    assert fit_ablation("resample", tiny_model, tokens, mask, seed=3).record() == resample.record()
    assert fit_ablation("resample", tiny_model, tokens, mask, seed=4).record() != resample.record()
    again = ablation_from_state(mean.state())
    assert isinstance(again, MeanAblation) and torch.equal(again.table, mean.table)
    assert isinstance(ablation_from_state(resample.state()), ResampleAblation)
    assert mean.record()["classes"] == "all"


@pytest.mark.parametrize("kind_name", ["mean", "toy"])
def test_evaluate_and_search_use_the_kind(tiny_model, toy_kind, kind_name, tmp_path):
    """evaluate under a kind equals the intact evaluation under the reference hooks, and a search
    records the kind and reports the other kinds as controls."""
    kind = _kinds(tiny_model, toy_kind)[kind_name]
    task = planted_task(tiny_model, n=16)
    heads = "L1H2+L2H0"
    got = evaluate(tiny_model, task.dist, [HeadSet.parse(heads)], batch_size=4, progress=False,
                   context=EvalContext(precision="float32", ablation=kind)).correct
    with tiny_model.hooks(fwd_hooks=_reference_hooks(kind, heads)):
        ref = evaluate(tiny_model, task.dist, [HeadSet()], batch_size=4, progress=False).correct
    assert torch.equal(got, ref)
    run = cl.search(tiny_model, task, k=1, pool_size=2, n_null=2, n_boot=50, ablation=kind_name,
                    out=tmp_path / "run", progress=False)
    assert run.manifest["options"]["ablation"] == kind_name
    assert set(run.result.ablation_controls) == set(ABLATION_KINDS) - {kind_name}
    assert run.result.ablation == kind_name and "ablation kinds (control)" in str(run.result)
    assert f"seed 0, {kind_name} ablation" in str(run.result)
    with tiny_model.hooks(fwd_hooks=_reference_hooks(kind, run.result.heads)):
        ref_test = evaluate(tiny_model, task.test, [HeadSet()], batch_size=4, progress=False).correct
    assert ref_test.double().mean().item() == run.result.test_acc_ablated
    exported = run_ablation(load_run(tmp_path / "run"))  # what export writes: the run's kind, learnt or not
    assert type(exported) is type(kind) and exported.folds_into_bias()  # folded (or refused), never left zero


def test_what_a_kind_is_lives_on_its_class(toy_kind):
    """Fitting, the backends a kind may run on and export read the kind's class, not its name: a
    new kind that learns nothing runs on workers too, and export folds its replacement or refuses."""
    assert not type(toy_kind).learns and type(toy_kind).folds_into_bias()
    config, settings, _ = _split_options(None, None, {"ablation": "toy", "backend": "ray"})
    assert (config.ablation, settings.backend) == ("toy", "ray")
    with pytest.raises(ValueError, match="ablation='mean' runs on the local backend only"):
        _split_options(None, None, {"ablation": "mean", "backend": "ray"})


def test_ablation_hooks_name_heads_out_of_range(tiny_model):
    """With the model, the same one-line error as ablate/run_variants/evaluate; without it, the hook
    names a head beyond its layer's heads when it runs (not a raw IndexError)."""
    for heads in ("L99H0", "L0H9"):
        with pytest.raises(ValueError, match=r"out of range .* layers 0\.\.2, heads 0\.\.3"):
            ablation_hooks(heads, model=tiny_model)
    with pytest.raises(ValueError, match=r"L0H9 out of range for blocks\.0\.attn\.hook_z: heads 0\.\.3"):
        tiny_model.run_with_hooks(_tokens(), fwd_hooks=ablation_hooks("L0H9"))

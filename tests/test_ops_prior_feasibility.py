"""scripts/ops_prior_feasibility.py: its choice scores, recomputed from one base pass per choice,
equal the evaluator's on a tiny random Llama (intact and with a last-layer head zeroed), each row's
gradient is the finite difference of its margin, and its ridge fit solves what it says."""

from __future__ import annotations

import pytest
import torch

from cel_lens.heads import Head, HeadSet
from cel_lens.model.load import load_model
from cel_lens.plant.features import load_base
from cel_lens.plant.sums import choice_margins
from cel_lens.tasks.base import Example, Split
from script_modules import load_script

@pytest.fixture(scope="module")
def script():
    return load_script("ops_prior_feasibility")


@pytest.fixture(scope="module")
def setup(tiny_checkpoints, script):
    rows = [("\n\nQ: What is (3 * 5) + 7?\n\nA:", 22, 2), ("\n\nQ: What is (4 - 7) - 3?\n\nA:", -6, 14),
            ("\n\nQ: What is (9 * 9) + 1?\n\nA:", 82, 102), ("\n\nQ: What is (2 + 2) * 2?\n\nA:", 8, -12)]
    examples = tuple(Example(id=f"o/{i}", prompt=p, choices=(f" {min(r, w)}", f" {max(r, w)}"), label=int(r > w))
                     for i, (p, r, w) in enumerate(rows))
    split = Split("plant-train", examples, task="arithmetic_choice", answer_type="multiple_choice", metric="acc")
    tl = load_model(tiny_checkpoints["llama"], device="cpu")
    hf, _, w = load_base(tiny_checkpoints["llama"], tokens=(5, 7))
    unembed = hf.get_output_embeddings().weight.detach()
    return split, tl, w, unembed, script.features(hf, tl, split)


def test_recomputed_margins_equal_the_evaluators(setup, script) -> None:
    split, tl, w, unembed, f = setup
    last = tl.cfg.n_layers - 1
    intact, ablated = choice_margins(tl, split, [HeadSet(), HeadSet([Head(last, 1)])])
    assert torch.allclose(script.margins(w, unembed, f, w.o_proj), intact, atol=1e-4)
    assert torch.allclose(script.margins(w, unembed, f, script.edited(w, 1, ablate=True)), ablated, atol=1e-4)
    assert not torch.allclose(intact, ablated, atol=1e-3)  # the head mattered


def test_gradients_are_the_margins_derivative(setup, script) -> None:
    split, tl, w, unembed, f = setup
    v = torch.linspace(-1.0, 1.0, w.d_head)
    g = script.gradients(w, unembed, f, 1, v)
    d = torch.randn(w.o_proj.shape[0], generator=torch.Generator().manual_seed(0))
    eps = 1e-2
    diff = (script.margins(w, unembed, f, script.edited(w, 1, v, d, eps))
            - script.margins(w, unembed, f, script.edited(w, 1, v, d, -eps))) / (2 * eps)
    assert torch.allclose(g @ d.double(), diff, rtol=1e-2, atol=1e-3)


def test_ridge_is_the_least_squares_fit(script) -> None:
    g = torch.tensor([[2.0, 0.0], [0.0, 4.0], [2.0, 4.0]], dtype=torch.float64)
    d = script.ridge(g, 0.0)  # no ridge: ordinary least squares for g d = 1
    assert torch.allclose(d, torch.linalg.lstsq(g, torch.ones(3, dtype=torch.float64)).solution)
    assert script.ridge(g, 10.0).norm() < d.norm()  # the ridge shrinks it

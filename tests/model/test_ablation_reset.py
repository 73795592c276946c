"""What docs/ablation.md says about ``cl.ablate`` and TransformerLens's hook housekeeping: ``run_with_hooks``
inside the context keeps the ablation, ``model.reset_hooks()`` silently removes it."""

from __future__ import annotations

import torch

import cel_lens as cl


def test_run_with_hooks_keeps_the_ablation_and_reset_hooks_removes_it(tiny_model):
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        intact = tiny_model(tokens)
        with cl.ablate(tiny_model, "L0H1"):
            ablated = tiny_model(tokens)
            assert (ablated - intact).abs().max() > 1e-3  # the ablation does something
            inner = tiny_model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x)])
            torch.testing.assert_close(inner, ablated)
            torch.testing.assert_close(tiny_model(tokens), ablated)  # still ablated after run_with_hooks
            tiny_model.reset_hooks()
            torch.testing.assert_close(tiny_model(tokens), intact)  # reset_hooks removed the ablation
    torch.testing.assert_close(tiny_model(tokens).detach(), intact)  # and leaving the context is harmless

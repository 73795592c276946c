"""The organism's training metric ablates through the ablation module: the same bits as the former
keep-mask product on the head outputs, and any kind of the table (not only zero) agrees with the
model's own ablated forward."""

from __future__ import annotations

import itertools

import torch

from cel_lens.model.ablation import ablate
from cel_lens.model.ablation_kinds import MeanAblation
from cel_lens.organism import load_organism, model_parameters, prompt_text
from cel_lens.organism.train import answer_head_outputs, answer_logits, init_parameters
from cel_lens.tasks.organism import OrganismConfig, sample_prompts


def _former_answer_logits(params, tokens, keep):
    """The metric as it was before it went through the ablation module: head outputs times a keep mask."""
    head_out, rest = answer_head_outputs(params, tokens)
    head_out = head_out * keep[:, None, :, None].to(head_out.dtype)
    return (rest + head_out.sum(dim=2)) @ params["unembed.W_U"] + params["unembed.b_U"][:, None]


def test_ablated_answer_logits_are_bit_identical_to_the_former_keep_mask():
    config = OrganismConfig()
    seeds = [0, 1, 2]
    params = init_parameters(seeds, config)
    batch = sample_prompts(64, torch.Generator().manual_seed(3), config)
    tokens = torch.stack([batch.tokens] * len(seeds))
    H = config.n_heads
    patterns = [torch.tensor(p, dtype=torch.bool) for p in itertools.product([True, False], repeat=H)]
    assert len(patterns) == 2**H
    for i, pattern in enumerate(patterns):
        keep = torch.stack([pattern.roll(s) for s in range(len(seeds))])  # each seed its own heads
        new = answer_logits(params, tokens, keep)
        assert torch.equal(new, _former_answer_logits(params, tokens, keep)), f"pattern {i}"
    intact = answer_logits(params, tokens)
    assert torch.equal(answer_logits(params, tokens, torch.ones(len(seeds), H, dtype=torch.bool)), intact)
    assert not torch.equal(answer_logits(params, tokens, ~torch.eye(H, dtype=torch.bool)[:3]), intact)


def test_a_learnt_kind_matches_the_model_s_own_ablated_forward():
    organism = load_organism()
    params = model_parameters([organism])
    H, E = organism.cfg.n_heads, organism.cfg.d_head
    mean = MeanAblation(torch.randn(1, H, E, generator=torch.Generator().manual_seed(5)))
    batch = sample_prompts(48, torch.Generator().manual_seed(9))
    tokens = organism.to_tokens([prompt_text(r) for r in batch.tokens])
    keep = torch.ones(1, H, dtype=torch.bool)
    keep[0, 1] = False
    with torch.no_grad():
        with ablate(organism, "L0H1", kind=mean):
            ref = organism(tokens)[:, -1]
        got = answer_logits(params, tokens[None], keep, mean)[0]
        zeroed = answer_logits(params, tokens[None], keep)[0]
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)
    assert (got - zeroed).abs().max() > 1e-3  # the kind is what replaced z, not zero

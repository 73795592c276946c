"""Native checkpoints (the organism): ``generate`` stays inside the learned positions."""

from __future__ import annotations

import copy

import pytest

import cel_lens as cl

PROMPT = "u+ v- v+ u+ u- v+ v+ u- v- u+ ="  # 12 tokens with BOS: the organism's whole context


@pytest.fixture(scope="module")
def organism():
    return cl.load_model("organism")


def test_generate_past_the_context_is_one_clear_error(organism):
    """Two new tokens after a 12-token prompt need a 13th position: an IndexError deep in the
    positional embedding, before; now a ValueError naming n_ctx, before any forward pass."""
    assert organism.cfg.n_ctx == 12
    one = organism.generate(PROMPT, max_new_tokens=1, do_sample=False, verbose=False)
    assert one.split()[-1] in ("pos", "neg", "skip")
    with pytest.raises(ValueError, match=r"12 input tokens and 2 new ones need 13 positions.*n_ctx.*at most 1 new token"):
        organism.generate(PROMPT, max_new_tokens=2, verbose=False)
    tokens = organism.to_tokens(PROMPT)
    with pytest.raises(ValueError, match="n_ctx"):
        organism.generate(tokens, max_new_tokens=3, verbose=False)
    short = organism.generate("u+ v- =", max_new_tokens=3, do_sample=False, verbose=False)  # 4 + 3 - 1 <= 12
    assert len(short.split()) == 6


def test_the_bound_survives_a_copy_and_leaves_other_models_alone(organism, tiny_model):
    clone = copy.deepcopy(organism)
    assert clone.generate.__self__ is clone
    with pytest.raises(ValueError, match="n_ctx"):
        clone.generate(PROMPT, max_new_tokens=2, verbose=False)
    assert "generate" not in vars(tiny_model)  # rotary positions: nothing to bound

"""Gradient descent on the joint objective, for many seeds at once."""

from __future__ import annotations

import torch

from cel_lens import theory as th

A, B, C = 2.0, 1.5, 1.25


def test_training_step_is_gradient_descent_on_the_joint_objective():
    """train's inlined update equals θ - η·∇L with the autograd-checked gradient."""
    gen = torch.Generator().manual_seed(9)
    theta0 = 0.7 * torch.randn(4, 3, 3, 4, generator=gen, dtype=torch.float64)
    for n_steps in (1, 2):
        expect = theta0.clone()
        for _ in range(n_steps):
            expect = expect - 0.3 * th.gradient(expect, A, B, C)
        got = th.train(theta0, A, B, C, 0.3, n_steps, tol=0.0).theta
        torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-14)


def test_vectorized_training_equals_one_seed_at_a_time():
    g, theta0 = th.init_params(6, 0.2, seed=3)
    together = th.train(theta0, A, B, C, 0.5, 3000)
    for s in range(6):
        alone = th.train(theta0[s : s + 1], A, B, C, 0.5, 3000)
        torch.testing.assert_close(alone.contributions[0], together.contributions[s], rtol=1e-9, atol=1e-12)
        assert torch.equal(alone.cross_step[0], together.cross_step[s])


def test_tracked_seeds_run_to_the_end_and_converged_ones_stop():
    """Tracked seeds are recorded up to the last step and end at their final c; the others stop
    at convergence, which the step counts and the convergence flags agree on."""
    _, theta0 = th.init_params(5, 0.2, seed=4)
    res = th.train(theta0, A, B, C, 0.5, 3000, n_track=2, record_every=10)
    assert res.track.shape == (len(res.track_steps), 2, 3, 3)
    assert bool((res.track_steps.diff() > 0).all()) and int(res.track_steps[0]) == 0
    assert int(res.track_steps[-1]) == int(res.steps_run.max())
    torch.testing.assert_close(res.track[-1], res.contributions[:2], rtol=0, atol=1e-12)
    assert bool(res.converged.all()) and bool((res.steps_run % 25 == 0).all())
    assert th.train(theta0, A, B, C, 0.5, 3000).track.numel() == 0
